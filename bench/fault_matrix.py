"""Fault matrix: faults on the real 3-broker cluster, judged by both detection paths; one table of
what was expected, what each path said and when, and a verdict.

    python bench/fault_matrix.py [--scenarios leader_pause_400,all_paused,...] [--fault-s 60]
                                 [--soak-s 900] [--prometheus shipped|fast] [--json PATH]
                                 [--save-run RUN.json]
    python bench/fault_matrix.py --from-run RUN.json   # judge a saved run again, no cluster

What runs for real: a 3-broker KRaft cluster (``linkwatch.testbed``); producer load (acks=1
uniform and Zipf keys, acks=all) and a consumer; one agent per broker (in this process, 10 s
windows by default, ``--window-s``) publishing to ``linkwatch.samples`` and serving /metrics; the faults of
``linkwatch.testbed.faults`` (with handlers starved, small requests aimed at the victim alone,
:class:`AimedLoad`: one I/O thread copes with the matrix's own load); and both detection paths,
live during the run:

* the analyzer: ``AnalysisService`` (Spark local mode: Structured Streaming from the samples
  topic into its archive, the detectors on a timer, as ``tests/analyzer/test_cluster_e2e.py``
  drives it), its findings taken from its sink with the wall-clock time they were emitted. Its
  slow-broker thresholds are the defaults; only its policy differs: ``info`` findings
  (``degraded_broker``) are emitted too, so they can be timed (by default they are re-checked
  later, never sent on);
* Prometheus with the shipped rules, Alertmanager and ``linkwatch alerts serve``
  (``AlertStack``), scraping the agents and the analyzer. ``--prometheus shipped`` (the
  default): the shipped rules, ``for:`` and Alertmanager waits, the agents scraped every 2 s and
  the analyzer every 1 s as the shipped ``config/prometheus.example.yml`` does.
  ``--prometheus fast``: every ``for:`` 10 s, the minute ranges 30s/20s/40s, Alertmanager's
  waits 1-2 s, scrape and evaluation every 1 s. The receiver's audit log gives each
  notification and its time.

Besides, the agents' windows are read back from the samples topic after the run and replayed
through the analyzer's engine (``WindowState`` → ``SlowBrokerDetector`` → ``Engine``) window by
window: the rules' verdict on the same rows without the pipeline's delay. ``--save-run`` keeps
the run (the agents' records, the phases, the live findings and alerts), and ``--from-run``
judges it again: the live paths as they were, the replay with the rules as they are now (a rule
change is tried on every scenario's real windows without a cluster).

Per scenario: whether the fault took effect (the stage it should move: the victim's median p99
against its peers' in the fault windows), per path the findings that appeared during the
scenario's phases (before / fault / after), time from onset to the first right one and from
the fault's end to its clearing, and a verdict: right (right subject and stage, and no other
finding eligible for remediation at any time in the scenario), wrong subject, wrong stage,
missed, or false alarm. The load average is printed at the start and at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _kit import read_samples  # bench/ is on sys.path (run as a script)

from analyzer.base import Decision, FindingSink, PolicyConfig, SeverityPolicy
from analyzer.engine import Engine
from analyzer.registry import load_detectors
from analyzer.service import AnalysisService, AnalyzerConfig, PrometheusConfig
from analyzer.window_state import WindowState
from linkwatch import records as R
from linkwatch.aggregates import StageWindow
from linkwatch.testbed import faults
from linkwatch.testbed.agents import config_for_node, start_agents_in_process
from linkwatch.testbed.alert_stack import SHIPPED_SCRAPE_S, AlertStack, ScrapeTarget, agent_targets
from linkwatch.testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from linkwatch.testbed.load import ConsumerLoad, KeyDistribution, ProducerLoad, ensure_topic

CLUSTER = "fm"
# The agents' and the analyzer's window unless --window-s sets it (the product's default;
# runs 1-3 used 2 s). A saved run carries its own.
DEFAULT_WINDOW_S = 10
REPLAY_LOOKBACK_WINDOWS = 30  # more than the rules read back (attribute_lookback_windows 18)
VICTIM = 2
TOPICS = ("fm-uniform", "fm-zipf", "fm-all")
ACKS_ALL_TOPIC = "fm-all"
SLOW_TOPIC = "fm-slow"  # one partition led by the victim, filled for the slow client to fetch
HOT_TOPIC = "fm-hot"  # partitions only the victim holds: the load aimed at it (AimedLoad)
SLOW_CLIENT_ID = "fm-slow-client"
# Findings a remediation may act on (a broker's leadership moved), per path.
ELIGIBLE = {"analyzer": {"slow_broker"}, "prometheus": {"LinkwatchSlowBroker", "LinkwatchSlowBrokerFinding"}}
# Alerts about request latency: in the soak, any of them is a false alarm.
LATENCY_ALERTS = {
    "LinkwatchSlowBroker",
    "LinkwatchSlowBrokerFinding",
    "LinkwatchSlowClient",
    "LinkwatchSlowClientFinding",
    "LinkwatchDegradedBroker",
    "LinkwatchDegradedBrokerFinding",
    "LinkwatchClusterSlowdown",
    "LinkwatchFinding",
}


@dataclass(frozen=True)
class Expect:
    """A finding that is right for a scenario: rule (or alertname), subject, stage (None: any;
    ``a|b``: either)."""

    rule: str
    subject: str
    stage: str | None

    def matches(self, rule: str, subject: str) -> bool:
        return rule == self.rule and subject == self.subject

    def stage_ok(self, stages: list[str]) -> bool:
        """The first stage named is right (the one a remediation would act on)."""
        return self.stage is None or (bool(stages) and stages[0] in self.stage.split("|"))

    def __str__(self) -> str:
        return f"{self.rule} {self.subject} {self.stage or 'any stage'}"


@dataclass(frozen=True)
class Effect:
    """The stage(s) a fault should move, for ``request``; ``mode``: ``victim`` (the victim's p99
    against its peers'), ``waiters`` (the peers', waiting on the victim, against its), ``all``
    (every broker in the fault against itself before it)."""

    request: str
    stages: tuple[str, ...]
    mode: str = "victim"


@dataclass
class Ctx:
    state: ClusterState
    admin: Any

    def pid(self, broker: int) -> int:
        return self.state.node(broker).pid


FaultFn = Callable[[Ctx], contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True)
class Scenario:
    name: str
    fault: FaultFn
    analyzer: tuple[Expect, ...]  # right findings (empty: nothing may be found)
    prometheus: tuple[Expect, ...]
    effect: Effect | None
    note: str = ""


# Every pause runs in its own process, on an absolute schedule: a thread of this busy process
# (Spark's driver, three agents, the loads) woke late, and in run 3 the leader pause had
# windows with no pause at all ("fault did NOT take effect").
@contextlib.contextmanager
def _pause(ctx: Ctx, pause_ms: int) -> Iterator[None]:
    with faults.PauseDutyCycle(ctx.pid(VICTIM), pause_ms=pause_ms, period_ms=1000, own_process=True):
        yield


@contextlib.contextmanager
def _all_paused(ctx: Ctx) -> Iterator[None]:
    # Staggered by a third of the period: paused in lockstep, the brokers would stop and resume
    # together and barely see each other's pauses.
    with contextlib.ExitStack() as stack:
        for n in ctx.state.nodes:
            stack.enter_context(faults.PauseDutyCycle(n.pid, pause_ms=400, period_ms=1000, own_process=True))
            time.sleep(0.333)
        yield


HOT_PARTITIONS = 6


class AimedLoad:
    """Produce requests aimed at one broker: ``producers`` librdkafka producers (a connection
    each), one small message per request (``linger.ms`` 0), to ``HOT_TOPIC``'s partitions,
    which only the victim holds, at ``rate_per_s`` in all: requests and appends on it alone,
    no work for the others. ``calls`` counts produce calls, ``refused`` those its
    full local queue refused (not retried)."""

    def __init__(self, bootstrap: str, rate_per_s: float, producers: int) -> None:
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "batch.num.messages": 1}
        self.producers = [Producer({**conf, "client.id": f"fm-aimed-{k}"}) for k in range(producers)]
        self.rate_per_s = rate_per_s
        self.calls = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aimed-load", daemon=True)

    def __enter__(self) -> AimedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)
        for p in self.producers:
            p.flush(5)

    def _run(self) -> None:
        start, step = time.monotonic(), 1.0 / self.rate_per_s
        while not self._stop.is_set():
            for k, p in enumerate(self.producers):
                try:
                    p.produce(HOT_TOPIC, b"h" * 100, partition=k % HOT_PARTITIONS)
                except BufferError:  # its queue is full: the broker is behind, as meant
                    self.refused += 1
                p.poll(0)
                self.calls += 1
            ahead = start + self.calls * step - time.monotonic()
            if ahead > 0:
                self._stop.wait(ahead)


# Handlers starved: one I/O thread, held now and then by a request slow to handle. One thread
# alone copes with the matrix's load (~150 requests/s, a fraction of a millisecond each): in
# run 13, 4,000 small requests/s aimed at the victim left its request queue p99 at 1.7-3.3 ms
# while the load's CPU raised its peers' to 3.5-19 ms. So the one thread is held instead: an
# append to HOT_TOPIC (RF 1 on the victim, flushed on every message) waits for the victim's
# capped disk, while every request behind it waits in the request queue. Half a request a
# second, about 5 of a window's ~900 Produce requests, too few to move its local p99 (Rule 11
# would name the disk then). The cap is close to what the victim then writes in all (16.5
# writes/s in run 19, the held appends' flushes among them), and the effect turns on it:
# * 25 writes/s (run 17): request queue p99 73 ms against 6 ms, but in one window only 4.4x its
#   peers', whose queues rose to 16-18 ms: Rule 8's two windows came late (+38 s, +42 s);
# * 20 writes/s (run 19): 296-699 ms against 2-19 ms, local 1.8-4.3 ms against 1.1-2.3 ms;
# * 15 writes/s (run 18): its writes fell behind the cap, request queue 1-2 s and local up to
#   1.4 s, the disk's signature (named local).
HELD_RATE_PER_S = 0.5
HELD_WRITE_IOPS = 20


@contextlib.contextmanager
def _handlers_starved(ctx: Ctx) -> Iterator[None]:
    node = ctx.state.node(VICTIM)
    with (
        faults.starve_request_handlers(ctx.admin, VICTIM, 1),
        faults.topic_configs(ctx.admin, [HOT_TOPIC], {"flush.messages": "1"}),
        faults.throttle_disk_writes(node.pid, node.log_dirs[0], HELD_WRITE_IOPS) as group,
        AimedLoad(ctx.state.bootstrap, HELD_RATE_PER_S, 1) as load,
        _writes_per_s(group) as writes,
    ):
        yield
    print(
        f"  held: {load.calls} produce calls to {HOT_TOPIC}, {load.refused} refused (queue full);"
        f" the victim's disk writes {writes[0]:.1f}/s (cap {HELD_WRITE_IOPS}/s)",
        flush=True,
    )


# Writes a second the victim's JVM may make to the disk (its fsyncs): the brokers share one disk
# here, so a flush per append alone slowed all three (run 14) or was weak (run 13: 5.6 ms
# median). Capped for the victim only, its appends wait and its peers' do not: at 1,200/s (the
# victim then wrote 1,188/s) its Produce local p99 was 100 ms against 1 ms (run 16); at 400/s,
# 290 ms, and it served a tenth of its requests (run 15).
SLOW_DISK_WRITE_IOPS = 1200


def _io_writes(group: str) -> int:
    with open(f"{group}/blkio.throttle.io_serviced") as f:
        return sum(int(w[2]) for w in (line.split() for line in f) if len(w) == 3 and w[1] == "Write")


@contextlib.contextmanager
def _writes_per_s(group: str) -> Iterator[list[float]]:
    """The cap's cgroup's disk writes a second over the block, appended to the list it yields."""
    out: list[float] = []
    t0 = time.monotonic()
    try:
        yield out
    finally:
        out.append(_io_writes(group) / max(time.monotonic() - t0, 1e-9))


@contextlib.contextmanager
def _slow_disk(ctx: Ctx) -> Iterator[None]:
    node = ctx.state.node(VICTIM)
    with (
        faults.slow_disk(ctx.admin, VICTIM, node.pid, node.log_dirs[0], SLOW_DISK_WRITE_IOPS) as group,
        _writes_per_s(group) as writes,
    ):
        yield
    print(
        f"  slow disk: the victim's disk writes {writes[0]:.0f}/s (cap {SLOW_DISK_WRITE_IOPS}/s)", flush=True
    )


@contextlib.contextmanager
def _slow_client(ctx: Ctx) -> Iterator[None]:
    node = ctx.state.node(VICTIM)
    with faults.SlowClient(
        "127.0.0.1", node.ports.client, SLOW_TOPIC, client_id=SLOW_CLIENT_ID, stall_ms=600
    ):
        yield


class Bursts:
    """Bursts on top of the base load: every ``period_s``, ``rate_per_s`` more Zipf-keyed
    messages for ``burst_s`` (the soak's load: several times the base rate, now and then)."""

    def __init__(
        self, bootstrap: str, topic: str, rate_per_s: float, burst_s: float, period_s: float
    ) -> None:
        self.args = (bootstrap, topic, rate_per_s)
        self.burst_s, self.period_s = burst_s, period_s
        self.bursts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bursts", daemon=True)

    def __enter__(self) -> Bursts:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.burst_s + 15)

    def _run(self) -> None:
        bootstrap, topic, rate = self.args
        while not self._stop.wait(self.period_s - self.burst_s):
            load = ProducerLoad(bootstrap, topic, rate, KeyDistribution("zipf", 1000, 1.3), acks=1, seed=11)
            load.start()
            self._stop.wait(self.burst_s)
            load.stop()
            self.bursts += 1


def _b(subject_rule: str, stage: str | None, broker: int = VICTIM) -> Expect:
    return Expect(subject_rule, f"broker:{broker}", stage)


QUEUES = "requestQueue|responseQueue"
PAUSE_NOTE = (
    "a stopped JVM stretches whichever stage a request is in: any stage is right. Its effect is"
    " the leaders waiting on it as their follower (acks=all): a paused broker times a request only"
    " from when it reads it, so its own stages barely move"
)
SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "leader_pause_400",
            lambda c: _pause(c, 400),
            (_b("slow_broker", None), _b("degraded_broker", None)),
            (
                _b("LinkwatchSlowBroker", None),
                _b("LinkwatchSlowBrokerFinding", None),
                _b("LinkwatchDegradedBroker", None),
                _b("LinkwatchDegradedBrokerFinding", None),
            ),
            Effect(R.PRODUCE, ("remote",), "waiters"),
            PAUSE_NOTE,
        ),
        Scenario(
            "leader_pause_900",
            lambda c: _pause(c, 900),
            (_b("slow_broker", None), _b("degraded_broker", None)),
            (
                _b("LinkwatchSlowBroker", None),
                _b("LinkwatchSlowBrokerFinding", None),
                _b("LinkwatchDegradedBroker", None),
                _b("LinkwatchDegradedBrokerFinding", None),
            ),
            Effect(R.PRODUCE, ("remote",), "waiters"),
            PAUSE_NOTE,
        ),
        Scenario(
            "stalled_follower",
            lambda c: faults.stall_follower(
                c.admin, VICTIM, c.pid(VICTIM), [ACKS_ALL_TOPIC], pause_ms=400, own_process=True
            ),
            # Below the slow line (its leaders' p99 under 300 ms) the early warning is right.
            (_b("slow_broker", "remote"), _b("degraded_broker", "remote")),
            # The alert rules read the same (Rule 12: the broker that serves few is the one its
            # peers wait on, LinkwatchDegradedBroker stage remote below the line).
            (
                _b("LinkwatchSlowBroker", "remote"),
                _b("LinkwatchSlowBrokerFinding", "remote"),
                _b("LinkwatchDegradedBroker", "remote"),
                _b("LinkwatchDegradedBrokerFinding", "remote"),
            ),
            Effect(R.PRODUCE, ("remote",), "waiters"),
            "broker 2 paused 400/1000 ms while it follows every fm-all partition and leads none",
        ),
        Scenario(
            "slow_disk",
            _slow_disk,
            (_b("slow_broker", "local"), _b("degraded_broker", "local")),
            (
                _b("LinkwatchSlowBroker", "local"),
                _b("LinkwatchSlowBrokerFinding", "local"),
                _b("LinkwatchDegradedBroker", "local"),
                _b("LinkwatchDegradedBrokerFinding", "local"),
            ),
            Effect(R.PRODUCE, ("local",)),
        ),
        Scenario(
            "cpu_starved",
            lambda c: faults.starve_cpu(c.pid(VICTIM), busy_processes=6),
            # A starved CPU delays the request handler threads and the network threads alike:
            # either queue names it (the "queue → CPU / handler threads").
            (_b("slow_broker", QUEUES), _b("degraded_broker", QUEUES)),
            (
                _b("LinkwatchSlowBroker", QUEUES),
                _b("LinkwatchDegradedBroker", QUEUES),
                _b("LinkwatchDegradedBrokerFinding", QUEUES),
            ),
            Effect(R.PRODUCE, ("requestQueue", "local")),
        ),
        Scenario(
            "handlers_starved",
            _handlers_starved,
            (_b("slow_broker", "requestQueue"), _b("degraded_broker", "requestQueue")),
            (
                _b("LinkwatchSlowBroker", "requestQueue"),
                _b("LinkwatchSlowBrokerFinding", "requestQueue"),
                _b("LinkwatchDegradedBroker", "requestQueue"),
                _b("LinkwatchDegradedBrokerFinding", "requestQueue"),
            ),
            Effect(R.PRODUCE, ("requestQueue",)),
        ),
        Scenario(
            "slow_client",
            _slow_client,
            (Expect("slow_client", f"client:{SLOW_CLIENT_ID}", "send"),),
            (
                _b("LinkwatchSlowClient", "send"),
                Expect("LinkwatchSlowClientFinding", f"client:{SLOW_CLIENT_ID}", "send"),
            ),
            Effect(R.FETCH_CONSUMER, ("send",)),
            "the metrics carry no client id: the agents' alert names the broker it reads from, the"
            " analyzer's finding the client",
        ),
        Scenario(
            "all_paused",
            _all_paused,
            (Expect("cluster_slow", f"cluster:{CLUSTER}", None),),
            (Expect("LinkwatchClusterSlowdown", f"cluster:{CLUSTER}", None),),
            Effect(R.PRODUCE, ("total",), "all"),
            "every broker paused 400/1000 ms, staggered by 1/3 s; no slow_broker for anyone",
        ),
        Scenario("soak", lambda c: contextlib.nullcontext(), (), (), None, "no fault; Zipf bursts of 4x"),
    )
}


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Phases:
    marks: dict[str, dict[str, tuple[float, float]]] = field(default_factory=lambda: defaultdict(dict))
    errors: dict[str, str] = field(default_factory=dict)  # scenario -> why its fault failed

    @contextlib.contextmanager
    def phase(self, scenario: str, name: str) -> Iterator[None]:
        t0 = time.time()
        print(f"{time.strftime('%H:%M:%S')} {scenario}: {name}", flush=True)
        try:
            yield
        finally:
            self.marks[scenario][name] = (t0, time.time())


class TimedSink(FindingSink):
    """Every emitted finding with the wall-clock time it reached the sink."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.emitted: list[tuple[float, R.Finding]] = []
        self.clock = clock

    def emit(self, finding: R.Finding) -> None:
        self.emitted.append((self.clock(), finding))


@dataclass
class Ticker:
    """Runs the service's evaluations in a thread, as ``AnalysisService.run`` paces them, and
    records each one's duration and how old its newest window was when it ran."""

    service: AnalysisService
    ticks: list[tuple[float, float, float | None]] = field(default_factory=list)  # start, s, age s
    # Per evaluation with rows: the newest window's start (ms) and its stage rows then: a window
    # read with fewer rows than a later evaluation read of it was evaluated half-filled.
    newest_rows: list[tuple[int, int]] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name="analyzer-ticks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.time()
            try:
                self.service.tick()
            except Exception as e:  # counted and printed; the next tick goes on
                self.errors += 1
                print(f"analyzer tick failed: {e!r}", flush=True)
            rows = self.service.last.broker_stages if self.service.last else ()
            newest = max((r.window_start_ms for r in rows), default=None)
            age = None if newest is None else started - (newest / 1000 + self.service.cfg.window_s)
            self.ticks.append((started, time.time() - started, age))
            if newest is not None:
                self.newest_rows.append((newest, sum(1 for r in rows if r.window_start_ms == newest)))
            self.service.wait_next(self._stop, time.monotonic() - (time.time() - started))


ANALYZER_MODES = {
    "defaults": "the service's own timings (lookback, interval, trigger, watermark, window settle)",
    "e2e": "tests/analyzer/test_cluster_e2e.py's timings (lookback 90 windows, interval 1 s, trigger 4 s, watermark 60 s)",
}


def analyzer_config(
    state: ClusterState, root: Path, evaluation: str, window_s: int, mode: str = "defaults"
) -> AnalyzerConfig:
    info_too = {"info": Decision.ALERT, "warning": Decision.ALERT, "critical": Decision.ALERT}
    timings: dict[str, Any] = {}
    if mode == "e2e":
        # As tests/analyzer/test_cluster_e2e.py: the archive read back wider than the stream's
        # latency plus one evaluation on a loaded machine.
        timings = {"lookback_windows": 90, "interval_s": 1.0, "trigger_s": 4.0, "watermark": "60 seconds"}
    return AnalyzerConfig(
        cluster=CLUSTER,
        bootstrap=state.bootstrap,
        window_s=window_s,
        **timings,
        evaluation=evaluation,
        state_dir=root / "analyzer",
        publish_findings=False,
        spark_log=root / "spark.log",
        detectors={"slow_broker": None},
        policy=PolicyConfig(by_severity=info_too),
        prometheus=PrometheusConfig(enabled=True, port=0),  # the service's metrics_port says which
    )


def fill_slow_topic(admin: Any, bootstrap: str) -> None:
    """``SLOW_TOPIC``'s one partition, led by the victim, with 1.2 MB: more than the slow client's
    receive buffer plus the broker's send buffer, so its stalls hold the broker's send."""
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    admin.create_topics([NewTopic(SLOW_TOPIC, replica_assignments={0: [VICTIM, 1, 3]})])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for _ in range(1200):
        producer.send(SLOW_TOPIC, value=b"z" * 1000, partition=0)
    producer.flush(60)
    producer.close()


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


@dataclass
class Run:
    phases: Phases
    live: list[tuple[float, R.Finding]]
    alerts: list[dict[str, Any]]
    ticks: list[tuple[float, float, float | None]]
    records: list[R.Record]
    window_s: int  # the agents' windows
    newest_rows: list[tuple[int, int]] = field(default_factory=list)  # Ticker.newest_rows


def save_run(result: Run, path: Path) -> None:
    """The run as one JSON document; records and findings in their wire form (``to_json``)."""
    doc = {
        "window_s": result.window_s,
        "marks": result.phases.marks,
        "errors": result.phases.errors,
        "live": [(t, f.to_json().decode()) for t, f in result.live],
        "alerts": result.alerts,
        "ticks": result.ticks,
        "newest_rows": result.newest_rows,
        "records": [r.to_json().decode() for r in result.records],
    }
    path.write_text(json.dumps(doc))


def load_run(path: Path) -> Run:
    doc = json.loads(path.read_text())
    phases = Phases(errors=doc["errors"])
    for scenario, spans in doc["marks"].items():
        phases.marks[scenario] = {name: (a, b) for name, (a, b) in spans.items()}
    live = [(t, R.decode(raw)) for t, raw in doc["live"]]
    return Run(
        phases,
        [(t, f) for t, f in live if isinstance(f, R.Finding)],
        doc["alerts"],
        [tuple(x) for x in doc["ticks"]],
        [R.decode(raw) for raw in doc["records"]],
        int(doc.get("window_s", 2)),  # runs saved before the option had 2 s windows
        [tuple(x) for x in doc.get("newest_rows", [])],  # runs saved before run 24 have none
    )


PROMETHEUS_MODES = {
    "shipped": "the shipped rules, for: and Alertmanager waits, the agents scraped every 2 s and the analyzer every 1 s (config/prometheus.example.yml)",
    "fast": "FAST mode: every for: 10 s, minute ranges 30s/20s/40s, Alertmanager waits 1-2 s, scrape 1 s",
}


def alert_stack(workdir: Path, targets: list[ScrapeTarget], mode: str) -> AlertStack:
    """The Prometheus path: ``shipped`` (what an operator runs) or ``fast`` (:data:`PROMETHEUS_MODES`)."""
    if mode == "fast":
        return AlertStack(workdir, targets, fast=True, scrape_s=1, eval_s=1, for_s=10)
    return AlertStack(workdir, targets, scrape_s=SHIPPED_SCRAPE_S)


def run(chosen: list[Scenario], args: argparse.Namespace) -> Run:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    root = Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    print(f"work dir {root} (Spark's log: {root / 'spark.log'})", flush=True)
    cluster = LocalCluster(
        ClusterSpec(brokers=3, root=root / "kafka", base_port=find_free_base_port(3, start=32000))
    )
    state = cluster.up()
    phases = Phases()
    stops: list[Callable[[], object]] = []
    sink = TimedSink()
    stack: AlertStack | None = None
    ticker: Ticker | None = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="fault-matrix")
        stops.append(admin.close)
        ensure_topic(admin, R.SAMPLES_TOPIC, 3, 1)
        for topic in TOPICS:
            ensure_topic(admin, topic, 6, 3)
        fill_slow_topic(admin, state.bootstrap)
        admin.create_topics(
            [NewTopic(HOT_TOPIC, replica_assignments={k: [VICTIM] for k in range(HOT_PARTITIONS)})]
        )
        configs = [
            config_for_node(
                n,
                cluster=CLUSTER,
                request_log={"window_s": args.window_s, "start_at": "end"},
                kafka={
                    "enabled": True,
                    "bootstrap_servers": state.bootstrap,
                    "spool_dir": str(root / f"spool{n.node_id}"),
                },
            )
            for n in state.nodes
        ]
        agents = start_agents_in_process(configs)
        stops += [a.stop for a, _ in agents]
        loads = [
            ProducerLoad(state.bootstrap, "fm-uniform", 300.0, acks=1).start(),
            ProducerLoad(
                state.bootstrap, "fm-zipf", 300.0, KeyDistribution("zipf", 1000, 1.3), acks=1, seed=7
            ).start(),
            ProducerLoad(state.bootstrap, ACKS_ALL_TOPIC, 50.0, acks="all", seed=3).start(),
        ]
        stops += [x.stop for x in loads]
        stops.append(ConsumerLoad(state.bootstrap, "fm-uniform", "fm-group").start().stop)
        cfg = analyzer_config(state, root, args.evaluation, args.window_s, args.analyzer)
        t0 = time.time()
        service = AnalysisService(cfg, sinks=[sink]).start()
        stops.append(service.stop)
        print(f"analyzer started in {time.time() - t0:.0f}s", flush=True)
        targets = agent_targets(
            {c.broker_id: a.metrics_port for (a, _), c in zip(agents, configs, strict=True)}, CLUSTER
        )
        targets.append(
            ScrapeTarget("linkwatch-analyzer", f"127.0.0.1:{service.metrics_port}", {"cluster": CLUSTER})
        )
        stack = alert_stack(root / "alerts", targets, args.prometheus).start()
        stops.append(stack.stop)
        ticker = Ticker(service).start()
        stops.append(ticker.stop)
        # The JVMs', agents' and stream's first minute is not the cluster's normal.
        time.sleep(args.warmup_s)
        ctx = Ctx(state, admin)
        for s in chosen:
            try:
                faults.restore_preferred_leaders(admin, [*TOPICS, SLOW_TOPIC])
            except Exception as e:  # said, and the scenario runs on the leaders there are
                print(f"preferred leaders not restored before {s.name}: {e!r}", flush=True)
            dropped_before = [a.health.drops() for a, _ in agents]
            with phases.phase(s.name, "before"):
                time.sleep(args.before_s)
            fault = (
                Bursts(state.bootstrap, "fm-zipf", 900.0, 10.0, 60.0) if s.name == "soak" else s.fault(ctx)
            )
            try:
                with phases.phase(s.name, "fault"), fault:
                    time.sleep(args.soak_s if s.name == "soak" else args.fault_s)
            except Exception as e:  # one fault that cannot be set up or undone is that row's error
                phases.errors[s.name] = f"{type(e).__name__}: {e}"
                print(f"{s.name}: fault failed: {phases.errors[s.name]}", flush=True)
                faults.revert_all()
            with phases.phase(s.name, "after"):
                time.sleep(args.after_s)
            # What the agents dropped (late lines among them: a window closed before they came).
            dropped = {
                c.broker_id: dict(a.health.drops() - was)
                for (a, _), c, was in zip(agents, configs, dropped_before, strict=True)
            }
            print(f"{s.name}: agents' drops by broker: {dropped}", flush=True)
        for stop in reversed(stops):
            stop()
        stops = []
        alerts = stack.received_all()
        records = read_samples(state.bootstrap)
        return Run(phases, sink.emitted, alerts, ticker.ticks, records, args.window_s, ticker.newest_rows)
    finally:
        faults.revert_all()
        for stop in reversed(stops):
            with contextlib.suppress(Exception):
                stop()
        cluster.down()


# --- the replay -----------------------------------------------------------------------------


def replay(
    records: list[R.Record], spans: list[tuple[float, float]], window_s: int
) -> tuple[list[tuple[float, R.Finding]], WindowState]:
    """The analyzer's engine over the agents' windows, at every window end within ``spans``:
    what the rules say without the pipeline's delay. Returns the emitted findings (at the
    evaluation's time) and the state (for the effect checks)."""
    state = WindowState(CLUSTER, window_s, horizon_ms=1 << 40, max_records=1 << 30)
    state.add(records)
    sink = TimedSink()
    info_too = PolicyConfig(
        by_severity={"info": Decision.ALERT, "warning": Decision.ALERT, "critical": Decision.ALERT}
    )
    engine = Engine(load_detectors({"slow_broker": None}), sinks=[sink], policy=SeverityPolicy(info_too))
    step = window_s * 1000
    for lo, hi in spans:
        now = int(lo * 1000) // step * step
        while now <= hi * 1000 + step:
            engine.evaluate(state.aggregates(now, now - REPLAY_LOOKBACK_WINDOWS * step), now)
            now += step
    return [(f.ts_ms / 1000, f) for _, f in sink.emitted], state


# --- judging ----------------------------------------------------------------------------------


@dataclass
class Interval:
    """One finding (or alert) from its appearance to its clearing (None: still on at the end)."""

    rule: str
    subject: str
    start: float
    end: float | None = None
    stages: list[str] = field(default_factory=list)  # in the order they were named
    detail: str = ""  # request type, the named follower or client, the waiting leaders

    def label(self, onset: float) -> str:
        stages = "/".join(self.stages) or "-"
        return f"{self.rule} {self.subject} {stages}{self.detail} @{self.start - onset:+.0f}s"


def _detail(evidence: dict[str, Any]) -> str:
    parts = [f" {evidence['request']}"] if evidence.get("request") else []
    follower = evidence.get("slow_follower", evidence.get("follower"))  # a finding's, an alert's label
    if follower not in (None, ""):
        parts.append(f"follower={follower}")
    if evidence.get("leaders_waiting"):
        parts.append(f"waiting={','.join(map(str, evidence['leaders_waiting']))}")
    if "client_id" in evidence:
        parts.append(f"client={evidence['client_id']}")
    return " ".join(parts)


def finding_intervals(emitted: list[tuple[float, R.Finding]]) -> list[Interval]:
    open_: dict[tuple[str, str], Interval] = {}
    out: list[Interval] = []
    for t, f in sorted(emitted, key=lambda x: x[0]):
        key = (f.rule, f.subject)
        stage = f.evidence.get("stage")
        if f.active:
            iv = open_.get(key)
            if iv is None:
                iv = open_[key] = Interval(f.rule, f.subject, t, detail=_detail(f.evidence))
                out.append(iv)
            if stage and stage not in iv.stages:
                iv.stages.append(str(stage))
        elif key in open_:
            open_.pop(key).end = t
    return out


def _alert_key(alertname: str, labels: dict[str, str]) -> tuple[str, str]:
    """(rule, subject) of an alert: an analyzer finding's own for ``LinkwatchFinding``, the client
    for a slow-client finding (``subject`` ``client:<id>``), else the broker it names, else the
    cluster."""
    if alertname == "LinkwatchFinding":
        return f"{alertname}:{labels.get('rule', '?')}", labels.get("subject", "?")
    if labels.get("subject", "").startswith("client:"):
        return alertname, labels["subject"]
    if labels.get("broker"):
        return alertname, f"broker:{labels['broker']}"
    return alertname, f"cluster:{labels.get('cluster', '?')}"


def alert_intervals(alerts: list[dict[str, Any]]) -> list[Interval]:
    open_: dict[tuple[str, str], Interval] = {}
    out: list[Interval] = []
    for a in sorted(alerts, key=lambda x: x["ts"]):
        labels, notes = a.get("labels", {}), a.get("annotations", {})
        key = _alert_key(a["alertname"], labels)
        stage = notes.get("stage") or labels.get("stage")
        if a["status"] == "firing":
            iv = open_.get(key)
            if iv is None:
                iv = open_[key] = Interval(*key, a["ts"], detail=_detail(labels))
                out.append(iv)
            if stage and stage not in iv.stages:
                iv.stages.append(stage)
        elif key in open_:
            open_.pop(key).end = a["ts"]
    return out


@dataclass
class PathResult:
    verdict: str
    fire_s: float | None
    clear_s: float | None
    found: list[str]
    others: list[str]


def _eligible(path: str, i: Interval) -> bool:
    """A finding a remediation may act on. Not a leader waiting in ``remote`` on another broker it
    names as the follower: the default policy only notifies of it (``remediation.policy``: its
    excess is a follower's, not its own), and what it names is the follower."""
    if i.rule not in ELIGIBLE[path]:
        return False
    follower = next((x.split("=", 1)[1] for x in i.detail.split() if x.startswith("follower=")), None)
    return not (i.stages == ["remote"] and follower is not None and i.subject != f"broker:{follower}")


def judge(
    path: str, expects: tuple[Expect, ...], intervals: list[Interval], span: dict[str, tuple[float, float]]
) -> PathResult:
    """Findings that appeared during the scenario's phases, against what is right for it."""
    start, onset, fault_end, end = span["before"][0], span["fault"][0], span["fault"][1], span["after"][1]
    mine = [i for i in intervals if start <= i.start <= end]
    latency = [i for i in mine if i.rule.split(":")[0] in LATENCY_ALERTS] if path == "prometheus" else mine
    subject_ok = [i for i in mine if any(e.matches(i.rule, i.subject) for e in expects) and i.start >= onset]
    good = [
        i for i in subject_ok if any(e.matches(i.rule, i.subject) and e.stage_ok(i.stages) for e in expects)
    ]
    eligible_wrong = [i for i in mine if _eligible(path, i) and i not in subject_ok]
    others = [i for i in mine if i not in subject_ok]
    if not expects:
        verdict = "false alarm" if latency else "right"
    elif good:
        verdict = "false alarm" if eligible_wrong else "right"
    elif subject_ok:
        verdict = "wrong stage"
    elif eligible_wrong or [i for i in latency if i.start >= onset]:
        verdict = "wrong subject"
    else:
        verdict = "missed"
    hits = good or subject_ok
    fire = min((i.start for i in hits), default=None)
    ends = [i.end for i in hits]
    clear = None if not hits or None in ends else max(e for e in ends if e is not None) - fault_end
    return PathResult(
        verdict,
        None if fire is None else fire - onset,
        clear,
        [i.label(onset) for i in subject_ok],
        [i.label(onset) for i in others],
    )


def effect(
    state: WindowState, e: Effect | None, span: dict[str, tuple[float, float]], window_s: int
) -> tuple[str, bool | None]:
    """The stage(s) the fault should move, median over the fault windows of each broker's p99;
    for waiters, of the requests that waited at all (``nonzero_p99_ms``, 0 when none did): most
    of the load is acks=1, which never waits, and the acks=all requests' wait shows in a mixed
    p99 only now and then (run 11's 400/1000 pause: 3.6 ms against 4.3 ms mixed, 361-400 ms
    against 4-34 ms waited)."""
    if e is None:
        return "no fault", None
    onset, fault_end = span["fault"]
    before = span["before"]

    def medians(lo: float, hi: float) -> dict[tuple[str, int], float]:
        rows: list[StageWindow] = state.aggregates(
            int(hi * 1000), int(lo * 1000) + window_s * 1000
        ).broker_stages
        per: dict[tuple[str, int], list[float]] = defaultdict(list)
        for r in rows:
            if (
                r.request == e.request
                and r.stage in e.stages
                and r.p99_ms is not None
                and r.window_start_ms >= lo * 1000
            ):
                waited = r.nonzero_p99_ms if r.nonzero_p99_ms is not None else 0.0
                per[(r.stage, r.broker)].append(waited if e.mode == "waiters" else r.p99_ms)
        return {k: statistics.median(v) for k, v in per.items()}

    during = medians(onset, fault_end)
    parts, took = [], False
    for stage in e.stages:
        mine = {b: v for (st, b), v in during.items() if st == stage}
        if e.mode == "all":
            was = medians(*before)
            pairs = {b: (v, was.get((stage, b), 0.0)) for b, v in mine.items()}
            ok = len(pairs) == 3 and all(v >= 2 * w or v >= w + 2 for v, w in pairs.values())
            text = ", ".join(f"b{b} {v:.0f} (before {w:.0f})" for b, (v, w) in sorted(pairs.items()))
        else:
            peers = [v for b, v in mine.items() if b != VICTIM]
            victim = mine.get(VICTIM)
            if victim is None or not peers:
                parts.append(f"{e.request} {stage}: no rows")
                continue
            peer = statistics.median(peers)
            hi_, lo_ = (peer, victim) if e.mode == "waiters" else (victim, peer)
            ok = hi_ >= 2 * lo_ or hi_ >= lo_ + 2
            who = "waiting peers/victim" if e.mode == "waiters" else "victim/peers"
            each = ", ".join(f"b{b} {v:.1f}" for b, v in sorted(mine.items()))
            text = f"{who} {hi_:.1f}/{lo_:.1f} ({each})"
            if e.mode == "waiters" and not ok:
                # A leader paused most of the time waits out its own pauses too (its acks=all
                # requests, Rule 10's case: run 24's 900/1000 pause, 907 ms on every broker): the
                # peers' wait against their own before the fault then shows the effect.
                was = medians(*before)
                peer_was = statistics.median([was.get((stage, b), 0.0) for b in mine if b != VICTIM])
                ok = peer >= 2 * peer_was and peer >= peer_was + 50
                text += f", the peers before the fault {peer_was:.1f}"
        took |= ok
        parts.append(f"{e.request} {stage} {text} ms")
    line = "; ".join(parts) + (
        " (median p99 of the requests that waited)" if e.mode == "waiters" else " (median p99)"
    )
    return (line if took else line + " -- fault did NOT take effect"), took


# --- the table ----------------------------------------------------------------------------------


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def table(
    chosen: list[Scenario], result: Run, replayed: list[tuple[float, R.Finding]], state: WindowState
) -> list[dict[str, Any]]:
    paths = {
        "analyzer": finding_intervals(result.live),
        "replay": finding_intervals(replayed),
        "prometheus": alert_intervals(result.alerts),
    }
    rows = []
    for s in chosen:
        span = result.phases.marks[s.name]
        text, took = effect(state, s.effect, span, result.window_s)
        row: dict[str, Any] = {
            "scenario": s.name,
            "note": s.note,
            "fault_error": result.phases.errors.get(s.name),
            "effect": text,
            "took_effect": took,
            "expected_analyzer": [str(e) for e in s.analyzer] or ["nothing"],
            "expected_prometheus": [str(e) for e in s.prometheus] or ["nothing"],
        }
        for path, intervals in paths.items():
            expects = s.prometheus if path == "prometheus" else s.analyzer
            kind = "analyzer" if path == "replay" else path
            row[path] = asdict(judge(kind, expects, intervals, span))
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'scenario':17s} {'path':10s} {'verdict':13s} {'fire s':>6s} {'clear s':>7s}  found (rule subject stage @onset+s)"
    )
    for r in rows:
        print(
            f"{r['scenario']:17s} expected: analyzer {r['expected_analyzer']}; prometheus {r['expected_prometheus']}"
        )
        if r["note"]:
            print(f"{'':17s} ({r['note']})")
        if r["fault_error"]:
            print(f"{'':17s} FAULT FAILED: {r['fault_error']}")
        print(f"{'':17s} effect: {r['effect']}")
        for path in ("analyzer", "replay", "prometheus"):
            p = r[path]
            print(
                f"{'':17s} {path:10s} {p['verdict']:13s} {_s(p['fire_s']):>6s} {_s(p['clear_s']):>7s}  {p['found'] or '-'}"
            )
            if p["others"]:
                print(f"{'':46s} others: {p['others']}")


def print_half_filled(newest_rows: list[tuple[int, int]]) -> None:
    """How often the live analyzer's first evaluation of a window read it with fewer stage rows
    than a later evaluation of the same window (a window evaluated before all had arrived)."""
    first: dict[int, int] = {}
    most: dict[int, int] = {}
    for start, n in newest_rows:
        first.setdefault(start, n)
        most[start] = max(most.get(start, 0), n)
    if not first:
        return
    short = sorted(start for start, n in first.items() if n < most[start])
    print(
        f"windows first evaluated half-filled (fewer stage rows than a later evaluation read): "
        f"{len(short)} of {len(first)}"
    )


def print_ticks(ticks: list[tuple[float, float, float | None]]) -> None:
    """The live analyzer's evaluations that had rows (before the archive holds any, a tick
    takes milliseconds and says nothing about the pipeline's speed)."""
    timed = [(d, a) for _, d, a in ticks if a is not None]
    if not timed:
        print(f"analyzer: {len(ticks)} evaluations, none with rows")
        return
    took = sorted(d for d, _ in timed)
    ages = sorted(a for _, a in timed)
    # The first evaluation that holds a window: how long after its end the pipeline (grace,
    # poll, samples topic, the window stream's micro-batch) delivered it.
    first: dict[int, float] = {}
    for started, _, age in ticks:
        if age is not None:
            first.setdefault(round(started - age), age)
    fresh = sorted(first.values())
    print(
        f"analyzer evaluations with rows: {len(timed)} of {len(ticks)}; duration median "
        f"{statistics.median(took):.1f}s max {took[-1]:.1f}s; newest window's age at the evaluation's "
        f"start median {statistics.median(ages):.0f}s max {ages[-1]:.0f}s; a window's end to the first "
        f"evaluation that holds it: median {statistics.median(fresh):.1f}s, "
        f"p90 {fresh[int(0.9 * (len(fresh) - 1))]:.1f}s over {len(fresh)} windows"
    )


def main() -> None:
    global SLOW_DISK_WRITE_IOPS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}"
    )
    ap.add_argument(
        "--warmup-s", type=float, default=60.0, help="load and pipeline running before the first scenario"
    )
    ap.add_argument("--before-s", type=float, default=40.0)
    ap.add_argument("--fault-s", type=float, default=60.0)
    ap.add_argument("--after-s", type=float, default=50.0)
    ap.add_argument("--soak-s", type=float, default=900.0, help="the soak's fault phase (no fault, bursts)")
    ap.add_argument(
        "--evaluation",
        choices=("reread", "incremental"),
        default=AnalyzerConfig().evaluation,
        help="the live analyzer's evaluation (default: the service's default)",
    )
    ap.add_argument(
        "--prometheus",
        choices=tuple(PROMETHEUS_MODES),
        default="shipped",
        help="the Prometheus path's rules and timings (default: the shipped ones)",
    )
    ap.add_argument(
        "--window-s",
        type=int,
        default=DEFAULT_WINDOW_S,
        help="the agents' and the analyzer's window (default: 10, theirs)",
    )
    ap.add_argument(
        "--analyzer",
        choices=tuple(ANALYZER_MODES),
        default="defaults",
        help="the live analyzer's timings (default: the service's own)",
    )
    ap.add_argument(
        "--slow-disk-iops",
        type=int,
        default=SLOW_DISK_WRITE_IOPS,
        help=f"slow_disk: the victim's disk writes a second (default: {SLOW_DISK_WRITE_IOPS})",
    )
    ap.add_argument("--json", type=Path, help="also write the table here")
    ap.add_argument(
        "--save-run", type=Path, help="write the run (phases, findings, alerts, the agents' records) here"
    )
    ap.add_argument(
        "--from-run",
        type=Path,
        help="judge a saved run again instead of running (the replay uses the rules as they are now)",
    )
    args = ap.parse_args()
    unknown = [n for n in args.scenarios.split(",") if n and n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    chosen = [SCENARIOS[n] for n in args.scenarios.split(",") if n]
    SLOW_DISK_WRITE_IOPS = args.slow_disk_iops
    print(f"start: {load_line()}", flush=True)
    print(f"analyzer evaluation: {args.evaluation}", flush=True)
    if not args.from_run:
        print(
            f"windows: {args.window_s} s; analyzer timings: {args.analyzer}: {ANALYZER_MODES[args.analyzer]}",
            flush=True,
        )
    if not args.from_run:
        print(f"Prometheus path: {args.prometheus}: {PROMETHEUS_MODES[args.prometheus]}", flush=True)
    if args.from_run:
        result = load_run(args.from_run)
        # A saved run holds the scenarios it ran: judge those (of the ones asked for).
        chosen = [s for s in chosen if s.name in result.phases.marks]
    else:
        result = run(chosen, args)
        if args.save_run:
            save_run(result, args.save_run)
    spans = [(m["before"][0], m["after"][1]) for m in result.phases.marks.values()]
    replayed, state = replay(result.records, spans, result.window_s)
    rows = table(chosen, result, replayed, state)
    print_table(rows)
    print_ticks(result.ticks)
    print_half_filled(result.newest_rows)
    print(f"end: {load_line()}")
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "ticks": result.ticks, "argv": sys.argv[1:]}, indent=2)
        )


if __name__ == "__main__":
    main()
