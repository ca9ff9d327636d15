"""The live analyzer beside a synthetic fleet: does it keep up, and stay right, as the fleet grows?

Per fleet size, on a real Kafka broker: the analyzer service as it ships (``AnalysisService``:
Spark Structured Streaming from the samples topic into the archive, the incremental window
state fed by the driver (``window_feed``; ``--window-feeds spark`` for the earlier second query,
the baseline), the default detectors on their timer, ``local[2]``; its settings the defaults, except
``state_max_records``, sized to hold the fleet's horizon) and ``linkwatch fleet`` in a process
of its own (:mod:`testbed.fleet`: every broker's stage sketches and exemplars each window,
latencies from the repository's request-log capture), with a ``local`` fault (a slow disk:
produce appends take ``--fault-ms`` more) on a typical leader (the median leadership weight)
from the ``--warmup-windows``-th window on. The capture's stage times are scaled by
``--latency-scale`` (0.5 by default: the repository's capture comes from a loaded 2-core test
machine, whose produce replication-wait p99, 184 ms, is above the slow-broker model's 150 ms
floor; at 1.0 the busiest leaders read as waiting on an unknown follower before any fault).
Each size gets a samples topic of its own (``--partitions``), so no size reads
another's records or a shared cluster's backlog.

Measured per size (one table): records/s into the topic; the time from a window's end to the
first evaluation holding it (median, max); the evaluation's own time (``tick``); each stream's
micro-batch time (``triggerExecution``; for the driver's window feed, a poll's merge time) and
the share of the Spark queries' batches over the trigger;
the driver's memory (this process's RSS, which holds the window state, and the Spark JVM's);
the time from the fault's onset to the victim's ``slow_broker`` finding; other brokers'
findings (each a false alarm: only one broker is faulty); the fleet generator's CPU (share of a
core) and how late its windows went out; the load average at the end. Everything shares the
machine: the fleet's CPU is reported so it can be told apart.

    .venv/bin/python bench/fleet.py --brokers 10,100,500,1000,2000
    .venv/bin/python bench/fleet.py --bootstrap HOST:PORT --smoke    # 10 brokers, 2 s windows

Without ``--bootstrap`` a 1-broker KRaft cluster (``testbed.cluster``) is started and stopped.

``--replay``: no broker and no Spark: each window's records go straight into the analyzer's
window state and engine (:class:`~aggregation.window_state.WindowState`, the default detectors)
at the window's end plus the agents' grace, on a simulated clock: the driver's own cost per
fleet size (merging a window, evaluating) and the rules' verdict without the pipeline's delay.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _kit import process_cpu_s  # bench/ is on sys.path (run as a script)

from analyzer.base import InMemorySink
from analyzer.service import (
    AnalysisService,
    AnalyzerConfig,
    AnalyzerKafkaConfig,
    AnalyzerMetricsConfig,
    interval_ms,
)
from linkwatch.records import SAMPLES_TOPIC, STAGES
from spark_metrics.streaming import ARCHIVE_QUERY
from testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port
from testbed.fleet import Fleet, FleetSpec
from testbed.load import ensure_topic

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = "fleet"
WINDOW_LINE = re.compile(r"^fleet window (\d+) records (\d+) bytes (\d+) .* behind_s ([\d.]+)")
TRIGGER_S = AnalyzerConfig().trigger_s
REPLAY_START_MS = 1_800_000_000_000
FAULT_LINE = re.compile(r"^fleet fault (\w+):(\d+) .* from (\d+)")


@dataclass
class FleetProcess:
    """``linkwatch fleet`` in a process of its own; its per-window lines read by a thread."""

    proc: subprocess.Popen
    # Per window published: (when its line was read, its start ms, records, seconds late).
    windows: list[tuple[float, int, int, float]] = field(default_factory=list)
    onset_ms: int | None = None
    cpu_s: float = 0.0

    @classmethod
    def start(cls, args: list[str]) -> FleetProcess:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "fleet", *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        fp = cls(proc)
        threading.Thread(target=fp._read, daemon=True).start()
        return fp

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if m := WINDOW_LINE.match(line):
                self.windows.append((time.time(), int(m[1]), int(m[2]), float(m[4])))
            elif m := FAULT_LINE.match(line):
                self.onset_ms = int(m[3])

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):  # it ended on its own after all
                self.cpu_s = process_cpu_s(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Row:
    brokers: int
    feed: str = "driver"  # the analyzer's window_feed
    records_per_s: float = 0.0
    window_to_eval_s: list[float] = field(default_factory=list)
    # Where window→eval goes: window end → its stage sketches complete in the window state
    # (the fleet's grace and publishing, the feed's read and merge), the rest is the wake and
    # the evaluation.
    window_to_complete_s: list[float] = field(default_factory=list)
    eval_s: list[float] = field(default_factory=list)
    batch_s: dict[str, list[float]] = field(default_factory=dict)  # query name -> triggerExecution
    py_rss_mb: float = 0.0
    jvm_rss_mb: float = 0.0
    # (seconds into the run, driver RSS MB, Spark JVM RSS MB) at every evaluation: flat or growing.
    rss_series: list[tuple[float, float, float]] = field(default_factory=list)
    # (seconds into the run, the Spark JVM's heap in use, MB) every 10 s: the lowest in a stretch
    # (the troughs young collections leave) is what its live objects hold, which an RSS capped by
    # -Xmx and padded by non-heap does not say. (Its pools' usage after their last collection says
    # nothing here: in 30 minutes at 200 brokers the old generation was never collected.)
    heap_series: list[tuple[float, float]] = field(default_factory=list)
    detect_s: float | None = None
    others: set[str] = field(default_factory=set)
    fleet_cpu_pct: float = 0.0
    fleet_behind_s: float = 0.0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    state_dropped: int = 0
    tick_errors: int = 0
    before_fault: bool = False  # the victim was found slow before its fault began
    records_per_window: int = 0


def fleet_spec(args: argparse.Namespace, brokers: int) -> FleetSpec:
    return FleetSpec(
        brokers=brokers,
        cluster=CLUSTER,
        window_s=args.window_s,
        seed=args.seed,
        traffic=args.traffic,
        latency_scale=args.latency_scale,
    )


def replay_size(args: argparse.Namespace, brokers: int) -> Row:
    """``--replay``: the fleet's windows into the window state and the engine, no pipeline."""
    from aggregation.window_state import WindowState
    from analyzer.engine import Engine
    from analyzer.registry import load_detectors
    from testbed.fleet import Fault

    row = Row(brokers)
    cfg = AnalyzerConfig(cluster=CLUSTER, window_s=args.window_s, lookback_windows=args.lookback)
    window_ms = args.window_s * 1000
    first = REPLAY_START_MS // window_ms * window_ms  # a fixed start: the same records every run
    onset = first + args.warmup_windows * window_ms
    victim = Fleet(fleet_spec(args, brokers)).typical()
    fleet = Fleet(fleet_spec(args, brokers), faults=(Fault("local", victim, onset, extra_ms=args.fault_ms),))
    state = WindowState(
        CLUSTER, args.window_s, cfg.state_horizon_ms, 1 << 40, int(cfg.window_settle_s * 1000)
    )
    engine = Engine(load_detectors(cfg.detectors), sinks=[InMemorySink()], policy=cfg.policy.as_policy())
    key = ("slow_broker", f"broker:{victim}")
    records = 0
    for w in range(args.warmup_windows + args.fault_windows):
        start = first + w * window_ms
        now = start + window_ms + int(fleet.spec.grace_s * 1000)
        chunks = list(fleet.window(start))
        records += sum(map(len, chunks))
        t = time.process_time()
        for chunk in chunks:
            state.add(chunk, now)
        row.batch_s.setdefault("merge", []).append(time.process_time() - t)
        t = time.process_time()
        engine.evaluate(state.aggregates(now, now - window_ms * (args.lookback + 1)), now)
        row.eval_s.append(time.process_time() - t)
        for rule, subject in engine.tracker.active:
            if (rule, subject) == key and row.detect_s is None:
                row.detect_s, row.before_fault = (now - onset) / 1000, now < onset
            elif subject.startswith("broker:") and subject != key[1]:
                row.others.add(f"{rule} {subject}")
        row.py_rss_mb = max(row.py_rss_mb, rss_mb()[0])
    row.records_per_window = records // (args.warmup_windows + args.fault_windows)
    row.load = os.getloadavg()
    return row


def print_replay(rows: list[Row], args: argparse.Namespace) -> None:
    print(
        f"\nreplay (no broker, no Spark): window {args.window_s}s, fault local +{args.fault_ms:g} ms on a typical "
        f"leader after {args.warmup_windows} windows; CPU seconds, median/max"
    )
    print(
        f"{'brokers':>7} {'records/window':>14} {'merge':>11} {'evaluate':>11} {'py MB':>6} "
        f"{'fault→finding':>13} {'others':>6} {'load 1/5/15':>14}"
    )
    for r in rows:
        detect = f"{r.detect_s:.0f}" if r.detect_s is not None else "not found"
        detect = "before fault" if r.before_fault else detect
        print(
            f"{r.brokers:>7} {r.records_per_window:>14} {_med_max(r.batch_s['merge']):>11} "
            f"{_med_max(r.eval_s):>11} {r.py_rss_mb:>6.0f} {detect:>13} {len(r.others):>6} "
            f"{'/'.join(f'{x:.1f}' for x in r.load):>14}"
        )
    for r in rows:
        if r.others:
            print(f"{r.brokers} brokers, other brokers' findings: {', '.join(sorted(r.others))}")


def rss_mb() -> tuple[float, float]:
    """(this process's RSS, the Spark driver JVM's RSS) in MB (the Kafka broker's JVM, also a
    child when the bench started it, is not counted)."""
    import psutil

    me = psutil.Process()
    jvm = 0
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):  # a child that just ended
            if "org.apache.spark.deploy.SparkSubmit" in child.cmdline():
                jvm = max(jvm, child.memory_info().rss)
    return me.memory_info().rss / 2**20, jvm / 2**20


class BatchReader(threading.Thread):
    """Each stream's micro-batch times, read every ``period_s`` beside the evaluation loop.

    Not ``recentProgress`` in the loop: PySpark converts each of the (up to 100) kept progress
    reports field by field over py4j, tens of round trips each, seconds a call once the list is
    full, and the loop's next evaluation waited for it (the bench's own delay, measured as
    window→evaluation). One ``lastProgress`` as JSON is two round trips; read at under half the
    trigger it sees every batch. The driver feed's progress is a Python deque, read whole."""

    HEAP_EVERY_S = 10.0

    def __init__(self, service: AnalysisService, row: Row, period_s: float = 0.5) -> None:
        super().__init__(name="fleet-batches", daemon=True)
        self.service, self.row, self.period_s = service, row, period_s
        self.seen: set[tuple[str, int]] = set()
        self.halt = threading.Event()
        self.started = time.monotonic()

    def run(self) -> None:
        heap_at = 0.0
        while not self.halt.wait(self.period_s):
            with contextlib.suppress(Exception):  # a query stopping under us: read next time
                self.read()
            if time.monotonic() - heap_at >= self.HEAP_EVERY_S:
                heap_at = time.monotonic()
                with contextlib.suppress(Exception):
                    self.row.heap_series.append((heap_at - self.started, self.heap_mb()))

    def heap_mb(self) -> float:
        """The Spark JVM's heap in use now (``MemoryMXBean``), MB."""
        management = self.service.spark._jvm.java.lang.management.ManagementFactory
        return management.getMemoryMXBean().getHeapMemoryUsage().getUsed() / 2**20

    def read(self) -> None:
        for query in (self.service.query, self.service.window_query):
            if query is None:
                continue
            jsq = getattr(query, "_jsq", None)
            if jsq is not None:
                last = jsq.lastProgress()
                progress = [] if last is None else [json.loads(last.json())]
            else:
                progress = list(query.recentProgress)
            for p in progress:
                key = (str(p["name"]), int(p["batchId"]))
                if key in self.seen or not p["numInputRows"]:
                    continue
                self.seen.add(key)
                self.row.batch_s.setdefault(key[0], []).append(
                    p["durationMs"].get("triggerExecution", 0) / 1000
                )

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=10)
        with contextlib.suppress(Exception):
            self.read()  # the last batches


def run_size(
    args: argparse.Namespace,
    bootstrap: str,
    brokers: int,
    stamp: int,
    feed: str = "driver",
    master: str = "local[2]",
) -> Row:
    row = Row(brokers, feed)
    topic = f"{args.topic}.fleet{brokers}.{feed}.{stamp}"
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    ensure_topic(admin, topic, args.partitions, 1)
    admin.close()
    fleet = Fleet(fleet_spec(args, brokers))
    victim = fleet.typical()
    serving = int((fleet.layout.weight > 0).sum())
    horizon_windows = args.lookback + 1 + interval_ms(args.watermark) // (args.window_s * 1000)
    state_max = max(200_000, serving * len(fleet.requests) * len(STAGES) * (horizon_windows + 2))
    root = Path(tempfile.mkdtemp(prefix=f"lw-fleet-{brokers}-"))
    cfg = AnalyzerConfig(
        cluster=CLUSTER,
        kafka=AnalyzerKafkaConfig(bootstrap_servers=bootstrap),
        samples_topic=topic,
        window_s=args.window_s,
        lookback_windows=args.lookback,
        watermark=args.watermark,
        state_max_records=state_max,
        window_feed=feed,
        spark_master=master,
        state_dir=root / "analyzer",
        spark_log=root / "spark.log",
        publish_findings=False,
        metrics=AnalyzerMetricsConfig(enabled=False),
    )
    service = AnalysisService(cfg, sinks=[InMemorySink()]).start()
    completed = _stamp_completions(service)
    reader = BatchReader(service, row)
    reader.start()
    fp = None
    try:
        fleet_args = [
            *("--bootstrap", bootstrap, "--brokers", str(brokers), "--topic", topic, "--cluster", CLUSTER),
            *("--window-s", str(args.window_s), "--seed", str(args.seed), "--traffic", str(args.traffic)),
            *("--latency-scale", str(args.latency_scale)),
            *("--fault", f"local:{victim}:{args.fault_ms:g}"),
            *("--fault-at", str(args.warmup_windows * args.window_s)),
        ]
        started = time.time()
        fp = FleetProcess.start(fleet_args)
        run_s = (args.warmup_windows + args.fault_windows + 1) * args.window_s
        key = ("slow_broker", f"broker:{victim}")
        window_ms = args.window_s * 1000
        seen_windows = -1
        stop = threading.Event()
        while time.time() - started < run_s:
            if fp.proc.poll() is not None:
                raise SystemExit(f"linkwatch fleet exited {fp.proc.returncode} (its error is above)")
            t = time.monotonic()
            try:
                service.tick()
            except Exception as e:  # as AnalysisService.run: logged, tried again
                row.tick_errors += 1
                print(f"evaluation failed: {type(e).__name__}: {e}", flush=True)
                service.wait_next(stop, t)
                continue
            row.eval_s.append(time.monotonic() - t)
            now = time.time()
            last = service.last
            newest = max((r.window_start_ms for r in last.cluster_stages), default=-1) if last else -1
            if newest > seen_windows:
                # Every window this evaluation holds first; not the first ones (the streams' first
                # batches compile their plans: start-up, not keeping up).
                if seen_windows >= 0:
                    for start in range(seen_windows + window_ms, newest + 1, window_ms):
                        end_s = (start + window_ms) / 1000
                        row.window_to_eval_s.append(now - end_s)
                        done = next((t for through, t in completed if through >= start), None)
                        if done is not None:
                            row.window_to_complete_s.append(done - end_s)
                seen_windows = newest
            for rule, subject in service.engine.tracker.active:
                if (rule, subject) == key:
                    if row.detect_s is None and fp.onset_ms is not None:
                        row.detect_s = now - fp.onset_ms / 1000
                        row.before_fault = now < fp.onset_ms / 1000
                elif subject.startswith("broker:") and subject != key[1]:
                    row.others.add(f"{rule} {subject}")
            py, jvm = rss_mb()
            row.py_rss_mb, row.jvm_rss_mb = max(row.py_rss_mb, py), max(row.jvm_rss_mb, jvm)
            row.rss_series.append((now - started, py, jvm))
            if row.detect_s is not None and args.stop_on_detect:
                break
            service.wait_next(stop, t)
        elapsed = time.time() - started
        fp.stop()
        # The fleet's rate: its windows' records over the time they stand for.
        row.records_per_s = sum(w[2] for w in fp.windows) / max(1, len(fp.windows) * args.window_s)
        row.fleet_cpu_pct = 100 * fp.cpu_s / elapsed
        row.fleet_behind_s = max((w[3] for w in fp.windows), default=0.0)
        row.state_dropped = sum(service.state.dropped.values()) if service.state is not None else 0
    finally:
        reader.stop()
        if fp is not None:
            fp.stop()
        service.stop()
    row.load = os.getloadavg()
    return row


def _stamp_completions(service: AnalysisService) -> list[tuple[int, float]]:
    """(window start, wall time) each time the service's window state completes a newer window
    (its wake, ``_window_done``); the bench reads it, the service is unchanged."""
    out: list[tuple[int, float]] = []

    class Stamped(threading.Event):
        def set(self) -> None:
            through = service._complete_through
            if through is not None and (not out or through > out[-1][0]):
                out.append((through, time.time()))
            super().set()

    service._window_done = Stamped()
    return out


def _fifths(series: list[tuple[float, ...]]) -> list[tuple[str, list[tuple[float, ...]]]]:
    """The samples ``(seconds into the run, value, ...)`` of each fifth of the run (by time),
    labelled ``"lo-hi min"``; fifths without a sample left out."""
    end = max(s[0] for s in series) or 1.0
    out = []
    for k in range(5):
        lo, hi = end * k / 5, end * (k + 1) / 5
        inside = [s[1:] for s in series if lo <= s[0] <= hi]
        if inside:
            out.append((f"{lo / 60:.0f}-{hi / 60:.0f} min", inside))
    return out


def memory_by_fifth(series: list[tuple[float, float, float]]) -> str:
    """The driver's and the Spark JVM's median RSS in each fifth of the run (by time): a state
    or cache without a bound shows as a rise from fifth to fifth, a bounded one as a plateau."""
    parts = [
        f"{label} {statistics.median(p for p, _ in inside):.0f}/{statistics.median(j for _, j in inside):.0f}"
        for label, inside in _fifths(series)
    ]
    return "driver/JVM MB by fifth: " + ", ".join(parts)


def heap_by_fifth(series: list[tuple[float, float]]) -> str:
    """The Spark JVM's heap in use, the lowest sample (MB) in each fifth of the run."""
    parts = [f"{label} {min(mb for (mb,) in inside):.0f}" for label, inside in _fifths(series)]
    return "lowest in use, MB by fifth: " + ", ".join(parts)


def _med_max(values: list[float]) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.2f}/{max(values):.2f}"


def print_table(rows: list[Row], args: argparse.Namespace) -> None:
    master = getattr(args, "master", "local[2]")
    print(
        f"\n{master}, window {args.window_s}s, trigger {TRIGGER_S:g}s (the default), fault local +{args.fault_ms:g} ms on a "
        "typical leader; median/max in seconds"
    )
    head = (
        f"{'brokers':>7} {'feed':>6} {'rec/s in':>9} {'window→eval':>12} {'eval':>11} {'archive batch':>13} "
        f"{'window batch':>12} {'>trigger':>8} {'py MB':>6} {'jvm MB':>6} {'fault→finding':>13} "
        f"{'others':>6} {'fleet cpu':>9} {'late':>5} {'load 1/5/15':>14}"
    )
    print(head)
    for r in rows:
        archive = r.batch_s.get(ARCHIVE_QUERY, [])
        window = [v for k, vs in r.batch_s.items() if k != ARCHIVE_QUERY for v in vs]
        # Against the trigger: the Spark queries' batches (the driver feed's polls have none).
        triggered = archive + window if r.feed == "spark" else archive
        over = [b for b in triggered if b > TRIGGER_S]
        share = f"{100 * len(over) / len(triggered):.0f}%" if triggered else "-"
        detect = f"{r.detect_s:.1f}" if r.detect_s is not None else "not found"
        detect = "before fault" if r.before_fault else detect
        load = "/".join(f"{x:.1f}" for x in r.load)
        print(
            f"{r.brokers:>7} {r.feed:>6} {r.records_per_s:>9.0f} {_med_max(r.window_to_eval_s):>12} {_med_max(r.eval_s):>11} "
            f"{_med_max(archive):>13} {_med_max(window):>12} {share:>8} {r.py_rss_mb:>6.0f} {r.jvm_rss_mb:>6.0f} "
            f"{detect:>13} {len(r.others):>6} {r.fleet_cpu_pct:>8.0f}% {r.fleet_behind_s:>5.1f} {load:>14}"
        )
    for r in rows:
        if r.window_to_complete_s:
            print(
                f"{r.brokers} brokers, {r.feed}: window end → complete in the state "
                f"{_med_max(r.window_to_complete_s)} s (median/max; the rest of window→eval is the "
                "wake and the evaluation)"
            )
    for r in rows:
        if len(r.rss_series) >= 10:
            print(f"{r.brokers} brokers, memory over the run: {memory_by_fifth(r.rss_series)}")
        if len(r.heap_series) >= 5:
            print(f"{r.brokers} brokers, the Spark JVM heap, {heap_by_fifth(r.heap_series)}")
    for r in rows:
        if r.others:
            print(f"{r.brokers} brokers, other brokers' findings: {', '.join(sorted(r.others))}")
        if r.tick_errors:
            print(f"{r.brokers} brokers: {r.tick_errors} evaluations failed")
        if r.state_dropped:
            print(f"{r.brokers} brokers: the window state dropped {r.state_dropped} records")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", default="10,100,500,1000,2000", help="fleet sizes, comma-separated")
    ap.add_argument("--bootstrap", help="a running cluster (else a 1-broker cluster is started)")
    ap.add_argument("--topic", default=SAMPLES_TOPIC, help="prefix of each size's samples topic")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--lookback", type=int, default=30, help="the analyzer's lookback_windows")
    ap.add_argument("--watermark", default="2 minutes", help="the analyzer's watermark")
    ap.add_argument("--warmup-windows", type=int, default=6, help="healthy windows before the fault")
    ap.add_argument("--fault-windows", type=int, default=12, help="windows of fault measured")
    ap.add_argument("--fault-ms", type=float, default=400.0)
    ap.add_argument("--traffic", type=float, default=1.0, help="× the capture's request rates")
    ap.add_argument("--latency-scale", type=float, default=0.5, help="× the capture's stage times")
    ap.add_argument("--replay", action="store_true", help="no broker, no Spark: state and engine only")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--stop-on-detect", action="store_true", help="end a size once the fault is found")
    ap.add_argument(
        "--window-feeds",
        default="driver",
        help="the analyzer's window_feed per run, comma-separated: driver (the default), spark (the "
        "earlier second query: the baseline)",
    )
    ap.add_argument(
        "--standalone",
        action="store_true",
        help="run the analyzer on a Spark standalone cluster of two 1-core workers started here "
        "(testbed.spark), not local[2]",
    )
    ap.add_argument("--smoke", action="store_true", help="10 brokers, 2 s windows: about a minute")
    args = ap.parse_args()
    if args.smoke:
        # 2 s windows: 5 × the capture's rates gives the brokers the requests a p99 needs.
        args.brokers, args.window_s, args.traffic = "10", 2, 5.0
        args.warmup_windows, args.fault_windows, args.stop_on_detect = 4, 10, True
    sizes = [int(b) for b in args.brokers.split(",")]
    feeds = args.window_feeds.split(",")
    if not set(feeds) <= {"driver", "spark"}:
        raise SystemExit(f"--window-feeds: driver or spark, not {args.window_feeds!r}")
    print(f"load average at start: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    if args.replay:
        print_replay([replay_size(args, n) for n in sizes], args)
        return
    cluster = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        root = Path(tempfile.mkdtemp(prefix="lw-fleet-kafka-"))
        cluster = LocalCluster(ClusterSpec(brokers=1, root=root, base_port=find_free_base_port(1)))
        bootstrap = cluster.up().bootstrap
    rows = []
    stamp = int(time.time())
    spark = None
    try:
        master = "local[2]"
        if args.standalone:
            from testbed.spark import SparkClusterSpec, SparkStandalone
            from testbed.spark import find_free_base_port as spark_port

            spark_root = Path(tempfile.mkdtemp(prefix="lw-fleet-spark-"))
            spark = SparkStandalone(SparkClusterSpec(root=spark_root, base_port=spark_port(2)))
            master = spark.up().master_url
        for n in sizes:
            for feed in feeds:
                rows.append(run_size(args, bootstrap, n, stamp, feed, master))
                print(f"{n} brokers, window_feed {feed} done", flush=True)
    finally:
        if spark is not None:
            spark.down()
        if cluster is not None:
            cluster.down()
    args.master = master
    print_table(rows, args)


if __name__ == "__main__":
    main()
