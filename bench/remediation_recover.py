"""Time to recover from a paused leader: with the findings pipeline demoting it, and without.

On one local 3-broker cluster with the agents and the Spark analyzer (the demo's pieces,
``testbed.demo``): a Zipf-keyed acks=all load (the analyzer sees a stalled broker
through the leaders waiting on it) and an acks=1 producer on its own 6-partition topic (its
clients wait on the leader only: the producer whose p99 recovery is measured). Each round
pauses broker 2's JVM in a duty cycle (``--pause-ms`` of every 1000 ms, 500 by default) and measures, from the onset:

* ``finding``: the analyzer's slow_broker finding for broker 2 is active;
* ``demoted``: broker 2 leads no partition of the acks=1 topic;
* ``recovered``: the acks=1 producer's ack p99 over the last 5 s is under 300 ms for 3 s in a row.

Baseline rounds run first with the analyzer acting on nothing (notify only), each for
``--baseline-fault-s`` seconds: the fault is never outlived, so their time to recover is the fault's
length (reported as "> fault-s"). Then the analyzer restarts with the demo's remediation
(demote, restore after a 20 s hold) and runs the remediation rounds; after each, the fault is
removed and the round waits for leadership to be restored before the next. Every round starts
once the previous round's finding has cleared and with broker 2 leading its preferred
partitions again.

    python bench/remediation_recover.py --rounds 3 --fault-s 90 [--analyzer default] [--save-run F]
    python bench/remediation_recover.py --draws 8 --seed 7 [--fault-s 90] [--kinds leader_pause,...]

``--draws N --seed S`` times the fault matrix's random draws instead (``bench/fault_matrix.py``'s
``draws()``: a kind, a victim, intensities and a load mix each; by default only the kinds a
slow-broker remediation answers). Each draw runs twice, in two passes over the same draws:
without remediation (the analyzer notifies only), then with it (the demo's remediation: demote on
``slow_broker``). Per draw, from the onset: the finding, the demotion, the worst running
producer's ack p99 first over 300 ms (``crossed``) and back under it for 3 s (``recovered``).
Reported: median and p90 of ``recovered`` per pass over the draws whose p99 crossed the line
without remediation (a draw that never crossed it has nothing to recover from). Each draw also
prints the producers' p99 per ``topic@leader`` in the 5 s before the fault: how far the
machine's own load already holds them from the line.

``--save-run F`` writes the rounds (with their onset and removal, wall clock ms), the agents'
windows from the samples topic and the analyzer's findings from the findings topic as one JSON
document, to replay the rules over the same windows (``bench/fault_matrix.py``'s ``replay``);
with ``--draws``, a run in ``bench/fault_matrix.py``'s own form, so that its ``--from-run F
--explain DRAW`` walks the model over one draw's windows. ``--only NAMES`` re-runs named draws
of a run (the same draws: they depend on ``--draws``, ``--seed`` and ``--kinds``). Each draw's
row lists the findings active during it and how far behind the analyzer's newest window was.

``--load-client librdkafka`` runs the producers on librdkafka (confluent-kafka), which times each
ack itself, in C, from ``produce()`` to the broker's answer. With kafka-python's loads (the
default, the fault matrix's) the producers stood at 175-764 ms before any fault on this 2-core
machine, over the 300 ms line: the load generator's own CPU and GIL waits, which a recovery cannot
bring down; on librdkafka, 11-47 ms (``bench/results/remediation.md``, 2026-12-03). Not yet the
default: the rounds' smoke on it raised no finding within 120 s in its one run, cause not read;
a second run (2026-12-05, at 800 + 300 msg/s) the same, with the machine saturated (1.6 cores
busy, the pauses resuming up to 527 ms late).

Run it alone: ``../shared/bin/quiet -- .venv/bin/python bench/remediation_recover.py``.
``--cluster-dir DIR`` uses a running 3-broker ``linkwatch cluster up`` cluster; ``--smoke`` is one
round with remediation only, on 2 s windows (``--window-s``), at 200 + 100 msg/s, a short quiet
time, a 5 s restore hold and a 10 s impact watch (``--settle-s``; the product's is 60 s), the
fault held until the producer recovers (120 s at most) and leadership's return awaited (about
two minutes, most of it the analyzer's start and the finding's clearing): the suite's test of the
whole loop (tests/bench/test_bench_smoke.py checks the order of its figures); its figures are
not a measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from _kit import read_samples  # bench/ is on sys.path (run as a script)

from analyzer.service import AnalyzerConfig, AnalyzerMetricsConfig
from linkwatch import records as R
from linkwatch.errors import SetupError
from testbed import faults
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from testbed.demo.agents import AgentsComponent
from testbed.demo.analyzer import RESTORE_HOLD_S, AnalyzerComponent, demo_config
from testbed.demo.probe import ProbeComponent
from testbed.load import CLIENTS, KeyDistribution, ProducerLoad, ensure_topic
from testbed.recovery import PAUSE_MS, fault_round, one_round, p99_by_leader, wait_restored, wait_whole

VICTIM = 2
DEMO_WINDOW_S = 5  # the demo's agents' window (testbed.demo)
# The smoke checks the loop's order, not its times: on 2 s windows the slow-broker rule's history
# and its clearing take windows of 2 s, not 5 s (the live e2e's windows, once in the suite).
SMOKE_WINDOW_S = 2
# The rounds' loads, msg/s: the acks=all Zipf topic and the measured acks=1 producer. The smoke
# checks the loop's order on a slowed leader, which any steady traffic shows (a paused broker
# delays every request it leads, whatever the rate); its lower rates spare the suite's machine
# the load generator's CPU (kafka-python: about a third of a core per 150 msg/s).
ORDERS_RATE, SERVE_RATE = 800.0, 300.0
SMOKE_ORDERS_RATE, SMOKE_SERVE_RATE = 200.0, 100.0
SMOKE_SETTLE_S = 10.0


def finding_active(analyzer: AnalyzerComponent) -> bool:
    """The analyzer's slow_broker finding for the victim is active."""
    svc = analyzer.service
    return svc is not None and ("slow_broker", f"broker:{VICTIM}") in svc.engine.tracker.active


def cleared_then_restored(
    admin: Any, analyzer: AnalyzerComponent, timeout_s: float
) -> tuple[float | None, float | None]:
    """Seconds from now (the fault just removed) until the victim's finding cleared and until it
    leads a partition of ``serve`` again (the remediator restores it a hold time after the clear);
    None for a step not reached within ``timeout_s``. Both are printed, so a late restore says
    whether the analyzer or the remediator was late."""
    cleared: list[float] = []

    def note_clear(waited_s: float) -> None:
        if not cleared and not finding_active(analyzer):
            cleared.append(waited_s)

    restored = wait_restored(admin, "serve", VICTIM, timeout_s, on_poll=note_clear)
    return (cleared[0] if cleared else None), restored


def default_config(window_s: int | None = None) -> AnalyzerConfig:
    """The service's defaults (windows unless ``window_s`` is given, lookback, evaluation,
    detectors and their thresholds), with only what the bench's cluster needs: its name, findings
    published, no extra listening port, no Spark progress bars."""
    return AnalyzerConfig(
        cluster="demo",
        window_s=window_s or AnalyzerConfig().window_s,
        publish_findings=True,
        metrics=AnalyzerMetricsConfig(enabled=False),
        spark_conf={"spark.ui.showConsoleProgress": "false"},
    )


# The fault matrix's kinds whose right finding is a slow broker (a demotion may answer them).
REMEDIABLE = (
    "leader_pause",
    "follower_pause",
    "safepoint_storm",
    "slow_disk",
    "cpu_starved",
    "handlers_starved",
    "congested_link",
)


def run_draws(args: argparse.Namespace) -> None:
    import fault_matrix as fm  # bench/ is on sys.path (run as a script)

    chosen = fm.draws(args.draws, args.seed, args.fault_s, tuple(args.kinds.split(",")))
    if args.only:
        wanted = set(args.only.split(","))
        if unknown := wanted - {s.name for s in chosen}:
            raise SystemExit(
                f"--only: no draw {', '.join(sorted(unknown))} among {', '.join(s.name for s in chosen)}"
            )
        chosen = [s for s in chosen if s.name in wanted]
    print(
        f"with remediation: demote_leadership, followers: {args.followers}; producers on {args.load_client}",
        flush=True,
    )
    root = Path(tempfile.mkdtemp(prefix="linkwatch-bench-recover-draws-"))
    cluster = LocalCluster(
        ClusterSpec(brokers=3, root=root / "cluster", base_port=find_free_base_port(3, start=19400))
    )
    agents = AgentsComponent()
    # The probe, as the fault matrix runs it: a leader paused between reads looks fast to its own
    # request timings, and only the clients' view finds it (--no-probe: the agents' view alone).
    probe = ProbeComponent(agents.window_s) if args.probe else None
    loads: fm.Loads | None = None
    analyzer: AnalyzerComponent | None = None
    rows: list[tuple[str, fm.Scenario, dict]] = []
    try:
        state = cluster.up()
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="bench-recover")
        for topic in fm.TOPICS:
            ensure_topic(admin, topic, 6, 3)
        fm.victim_topics(admin, state.bootstrap, {v for s in chosen for v in s.victims})
        agents.start(state)
        if probe is not None:
            probe.start(state)
        loads = fm.Loads(state.bootstrap, client=args.load_client)
        loads.set(fm.BOTH)
        ctx = fm.Ctx(state, admin, cluster)
        for mode in args.modes.split(","):
            analyzer = AnalyzerComponent(
                demo_config(agents.window_s),
                remediate_topics=list(fm.TOPICS) if mode == "with" else None,
                cooldown_s=5.0,
                followers=args.followers,
                restore_hold_s=args.restore_hold_s,
                settle_s=args.settle_s,
            )
            analyzer.start(state)
            warm_up(analyzer)
            for s in chosen:
                r = draw_round(admin, analyzer, loads, ctx, s, mode, args)
                rows.append((mode, s, r))
                print(
                    f"{mode:>7} {s.name:<28} {s.params} load {s.load['mix']}: finding {fmt(r['finding'], s.fault_s)} s,"
                    f" demoted {fmt(r['demoted'], s.fault_s)} s, crossed {fmt(r['crossed'], s.fault_s)} s,"
                    f" recovered {fmt(r['recovered'], s.fault_s)} s, peak p99 {r['peak_p99_ms']:.0f} ms"
                    + f", p99 before the fault by topic@leader {_ms(r.get('before_p99_ms'))}"
                    + (
                        ""
                        if r["recovered"] is not None
                        else f", p99 at the end by topic@leader {_ms(r.get('last_p99_ms'))}"
                    )
                    + (f", error {r['error']}" if r.get("error") else "")
                    + (f"; {r['watch']}" if r.get("watch") else ""),
                    flush=True,
                )
            analyzer.stop()
            analyzer = None
        admin.close()
        if args.save_run is not None:
            save_draws(args.save_run, state.bootstrap, agents.window_s, chosen, rows)
    finally:
        faults.revert_all()
        if analyzer is not None:
            analyzer.stop()
        if loads is not None:
            loads.stop()
        if probe is not None:
            probe.stop()
        agents.stop()
        audit = root / "cluster" / "acting" / "remediation" / "audit.jsonl"  # before down() removes it
        if args.keep_audit is not None and audit.exists():
            shutil.copyfile(audit, args.keep_audit)
            print(f"the remediator's audit log: {args.keep_audit}", flush=True)
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    summarize_draws(rows)


def save_draws(
    path: Path, bootstrap: str, window_s: int, chosen: list[Any], rows: list[tuple[str, Any, dict]]
) -> None:
    """The draws as a run of ``bench/fault_matrix.py`` (``save_run``): the agents' windows from
    the samples topic, the analyzer's findings from the findings topic and each draw's spans,
    named as the draw (``+remediation`` in the pass with it), so that ``fault_matrix.py
    --from-run F --explain NAME`` walks the model over a draw's windows."""
    import fault_matrix as fm

    phases = fm.Phases()
    for mode, s, r in rows:
        if "marks" in r:
            phases.marks[s.name if mode == "without" else f"{s.name}+remediation"] = r["marks"]
    findings = read_samples(bootstrap, R.FINDINGS_TOPIC)
    live = [(f.ts_ms / 1000, f) for f in findings if isinstance(f, R.Finding)]
    run = fm.Run(
        phases,
        live,
        [],
        [],
        read_samples(bootstrap),
        window_s,
        scenarios=chosen,
        cluster="demo",  # the demo's agents (testbed.demo.agents)
    )
    fm.save_run(run, path)
    print(f"run saved to {path} (bench/fault_matrix.py --from-run {path} --explain DRAW)", flush=True)


def warm_up(analyzer: AnalyzerComponent) -> None:
    warm = time.monotonic()
    while (
        analyzer.service is None or analyzer.service.last is None or not analyzer.service.last.broker_stages
    ):
        if time.monotonic() - warm > 420:
            raise SystemExit("the analyzer saw no stage rows within 420 s")
        time.sleep(2)
    time.sleep(20)


@dataclasses.dataclass
class DrawWatch:
    """What the analyzer said during a draw, beside the row's times, until the victim's
    slow_broker: every finding active at some point (``rule subject stage`` → seconds from the
    onset it was first seen; one active before the onset at +0 s), and how far behind the wall
    clock its newest window with a broker's rows was at worst (a fault that slows the cluster
    its own samples ride on can leave it blind)."""

    onset: float
    findings: dict[str, float] = dataclasses.field(default_factory=dict)
    worst_behind_s: float = 0.0

    def observe(self, analyzer: AnalyzerComponent) -> None:
        svc = analyzer.service
        if svc is None:
            return
        for (rule, subject), f in list(svc.engine.tracker.active.items()):
            self.findings.setdefault(
                f"{rule} {subject} {f.evidence.get('stage', '-')}", time.monotonic() - self.onset
            )
        last = svc.last
        if last is not None and last.broker_stages:
            newest_end_s = (max(w.window_start_ms for w in last.broker_stages) + last.window_s * 1000) / 1000
            self.worst_behind_s = max(self.worst_behind_s, time.time() - newest_end_s)

    def __str__(self) -> str:
        found = "; ".join(f"{k} +{v:.0f} s" for k, v in sorted(self.findings.items(), key=lambda kv: kv[1]))
        return f"findings {found or 'none'}; the analyzer's newest window at worst {self.worst_behind_s:.0f} s behind"


def any_slow_broker(
    analyzer: AnalyzerComponent, victims: tuple[int, ...], watch: DrawWatch | None = None
) -> bool:
    """A ``slow_broker`` finding for a victim is active (``watch``, if given, observes too)."""
    if watch is not None:
        watch.observe(analyzer)
    svc = analyzer.service
    active = svc.engine.tracker.active if svc is not None else {}
    return any(("slow_broker", f"broker:{v}") in active for v in victims)


def draw_round(admin, analyzer, loads, ctx, s, mode: str, args: argparse.Namespace) -> dict:
    import fault_matrix as fm

    cleared = time.monotonic() + args.clear_timeout_s
    while time.monotonic() < cleared and any(
        rule in ("slow_broker", "cluster_slow") for rule, _ in analyzer.service.engine.tracker.active
    ):
        time.sleep(1)
    if mode == "with":
        for v in s.victims:
            wait_restored(admin, "fm-uniform", v, args.restore_timeout_s)
        try:
            wait_whole(admin, list(fm.TOPICS), 3, args.restore_timeout_s)
        except SetupError as e:  # said; the draw's own set-up then says what it lacks
            print(f"before {s.name}: {e}", flush=True)
    try:
        faults.restore_preferred_leaders(admin, list(fm.TOPICS))
    except Exception as e:  # said; the draw runs on the leaders there are
        print(f"preferred leaders not restored before {s.name}: {e!r}", flush=True)
    loads.set(s.load)
    before_t = time.time()
    time.sleep(args.before_s)
    # The line is absolute (300 ms): what the producers ack in before the fault says how far the
    # machine's own load already is from it.
    before = p99_by_leader(admin, loads.running)
    watch = DrawWatch(time.monotonic())
    onset_t = time.time()
    try:
        r = fault_round(
            admin,
            lambda: loads.running,
            functools.partial(any_slow_broker, analyzer, s.victims, watch),
            s.victims,
            s.fault(ctx),
            s.fault_s,
            topics=list(fm.TOPICS),
        )
    except Exception as e:  # a fault that cannot be set up is that row's error
        faults.revert_all()
        return {
            "finding": None,
            "demoted": None,
            "crossed": None,
            "recovered": None,
            "peak_p99_ms": 0.0,
            "before_p99_ms": before,
            "error": repr(e),
        }
    end_t = time.time()
    # The spans bench/fault_matrix.py's --explain reads from a saved run (its Phases.marks).
    marks = {"before": (before_t, onset_t), "fault": (onset_t, end_t), "after": (end_t, end_t + 30.0)}
    return {**r, "before_p99_ms": before, "watch": str(watch), "marks": marks}


def _ms(p99: dict[str, float | None] | None) -> str:
    """Each producer's ack p99 (ms) over the last 5 s, by ``topic@leader`` (``-``: too few acks)."""
    return ", ".join(f"{t} {'-' if v is None else f'{v:.0f}'}" for t, v in (p99 or {}).items()) or "-"


def summarize_draws(rows: list[tuple[str, Any, dict]]) -> None:
    base = {s.name: r for m, s, r in rows if m == "without"}
    crossed = {name for name, r in base.items() if r["crossed"] is not None}
    if base:
        print(f"\ndraws whose producer p99 crossed 300 ms without remediation: {len(crossed)} of {len(base)}")
    else:  # --modes with: no baseline in this run, so every draw counts
        crossed = {s.name for m, s, r in rows}
        print(f"\nno run without remediation here (--modes): all {len(crossed)} draws counted")
    print("time from fault onset to the worst producer's ack p99 back under 300 ms (3 s calm):")
    for mode in ("without", "with"):
        got = [(s, r) for m, s, r in rows if m == mode and s.name in crossed]
        if not got:
            continue
        values = [r["recovered"] for _, r in got]
        cap = max(s.fault_s for s, _ in got)
        missed = sum(1 for v in values if v is None)
        print(
            f"  {mode:>7} remediation: median {fmt(rank_quantile(values, 0.5), cap).strip()} s, "
            f"p90 {fmt(rank_quantile(values, 0.9), cap).strip()} s over {len(values)} draws "
            f"({missed} not recovered within the fault)"
        )
    by_kind: dict[str, list[str]] = {}
    for m, s, r in rows:
        if s.name in crossed:
            by_kind.setdefault(s.kind, []).append(f"{m}:{fmt(r['recovered'], s.fault_s).strip()}")
    for kind, vals in sorted(by_kind.items()):
        print(f"  {kind:<18} {', '.join(vals)}")


def rank_quantile(values: list[float | None], q: float) -> float | None:
    """The ``q`` quantile by nearest rank (the smallest value with at least ``q`` of them at or
    below it: never beyond the data); for ``q`` 0.5 the usual median (the mean of the middle two
    of an even count). None stands for a draw not recovered within its fault, which ranks above
    every time: a quantile that falls on one is None (printed "> fault")."""
    ranked = sorted(values, key=lambda v: math.inf if v is None else v)
    n = len(ranked)
    if q == 0.5 and n % 2 == 0:
        low, high = ranked[n // 2 - 1], ranked[n // 2]
        return None if low is None or high is None else (low + high) / 2
    return ranked[max(math.ceil(q * n), 1) - 1]


def fmt(v: float | None, cap: float) -> str:
    return f"{v:6.1f}" if v is not None else f"  >{cap:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fault-s", type=float, default=90.0)
    ap.add_argument("--baseline-fault-s", type=float, default=45.0)
    ap.add_argument("--restore-timeout-s", type=float, default=180.0)
    ap.add_argument(
        "--restore-hold-s",
        type=float,
        default=RESTORE_HOLD_S,
        help=f"the remediator's hold after a clear before leadership returns (the demo's {RESTORE_HOLD_S:g} s)",
    )
    ap.add_argument(
        "--clear-timeout-s",
        type=float,
        default=180.0,
        help="before a round, wait at most this long for the previous round's finding to clear",
    )
    ap.add_argument(
        "--analyzer",
        choices=("demo", "default"),
        default="demo",
        help="the analyzer's settings: the demo's (5 s windows, slow-broker history 8) or the "
        "service's defaults (10 s windows, history 12; the agents' windows too)",
    )
    ap.add_argument(
        "--window-s",
        type=int,
        help="the agents' and the analyzer's window (default: --analyzer's, 5 s or 10 s; the smoke's "
        f"{SMOKE_WINDOW_S} s)",
    )
    ap.add_argument(
        "--pause-ms",
        type=int,
        default=PAUSE_MS,
        help="broker 2 is paused this long of every 1000 ms (400: its leaders' acks=all p99 sits on the 300 ms line)",
    )
    ap.add_argument(
        "--save-run",
        type=Path,
        help="write rounds (or draws), windows and findings here (JSON; the draws in bench/fault_matrix.py's "
        "form, for its --from-run F --explain DRAW)",
    )
    ap.add_argument(
        "--keep-audit", type=Path, help="--draws: copy the remediator's audit log here at the end"
    )
    ap.add_argument("--draws", type=int, default=0, help="time N random fault draws instead of rounds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(REMEDIABLE), help="fault kinds to draw from")
    ap.add_argument(
        "--only",
        help="with the draws: run only these of them, by name (comma-separated, e.g. d02-slow_disk-b1): "
        "one draw of a run again, the same as in it (the draws depend on --draws, --seed and --kinds)",
    )
    ap.add_argument(
        "--followers",
        choices=("keep", "drop"),
        default="keep",
        help="with the draws: demote_leadership's followers setting (drop: the slow broker also leaves "
        "the replica sets it follows; default keep, the product's)",
    )
    ap.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="with the draws: run the probe beside the agents, as the fault matrix does (default)",
    )
    ap.add_argument(
        "--load-client",
        choices=CLIENTS,
        default="kafka-python",
        help="the producers' client: kafka-python (default) or librdkafka, whose acks are timed in "
        "C threads, so their latency is the cluster's and their CPU small (kafka-python's loads took "
        "a third of a core per 150 msg/s and read an ack's latency when the Python thread got to it)",
    )
    ap.add_argument(
        "--orders-rate",
        type=float,
        help="the acks=all Zipf load, msg/s (default 800; the smoke's 200)",
    )
    ap.add_argument(
        "--serve-rate",
        type=float,
        help="the measured acks=1 producer, msg/s (default 300; the smoke's 100)",
    )
    ap.add_argument(
        "--settle-s",
        type=float,
        help="the impact guard's watch after a demotion, before a restore may start (default the "
        "product's, 60 s; the smoke's 10 s)",
    )
    ap.add_argument("--before-s", type=float, default=15.0)
    ap.add_argument(
        "--modes",
        default="without,with",
        help="the analyzer without remediation, with it, or both (default; the draws' table needs "
        "'without' to know which draws crossed the line)",
    )
    ap.add_argument("--quiet-s", type=float, default=20.0, help="quiet history before the first fault")
    ap.add_argument(
        "--cluster-dir", type=Path, help="a running 3-broker testbed cluster (else one is started)"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="about two minutes: one round with remediation on 2 s windows (the fault held until the "
        "producers recover, 120 s at most) and leadership's return after a 5 s hold",
    )
    args = ap.parse_args()
    if args.draws:
        run_draws(args)
        return
    if args.smoke:
        # The round runs its whole loop (finding, demotion, recovery, restore): the suite's test
        # of the loop (tests/bench/test_bench_smoke.py checks the order of the figures).
        # A 5 s hold: the restore's order is checked (after the clear, no sooner than the hold);
        # the demo's 20 s would only add its difference to the suite.
        args.rounds, args.modes, args.fault_s, args.quiet_s = 1, "with", 120.0, 2.0
        args.restore_timeout_s, args.clear_timeout_s, args.restore_hold_s = 150.0, 30.0, 5.0
        args.window_s = args.window_s or SMOKE_WINDOW_S
        args.orders_rate = args.orders_rate or SMOKE_ORDERS_RATE
        args.serve_rate = args.serve_rate or SMOKE_SERVE_RATE
        # The restore waits out the impact guard's watch of the demotion (60 s by default): the
        # smoke checks that the watch ends and the restore follows, not its length. (0 is a
        # setting: no watch.)
        args.settle_s = SMOKE_SETTLE_S if args.settle_s is None else args.settle_s
    args.orders_rate = args.orders_rate or ORDERS_RATE
    args.serve_rate = args.serve_rate or SERVE_RATE

    print(f"restore hold {args.restore_hold_s:g} s", flush=True)
    print(f"producers on {args.load_client}", flush=True)
    root = Path(tempfile.mkdtemp(prefix="linkwatch-bench-recover-"))
    cluster = None
    if args.cluster_dir is None:
        cluster = LocalCluster(
            ClusterSpec(brokers=3, root=root / "cluster", base_port=find_free_base_port(3, start=19400))
        )
    loads: list[ProducerLoad] = []
    agents = AgentsComponent(
        window_s=args.window_s or (DEMO_WINDOW_S if args.analyzer == "demo" else AnalyzerConfig().window_s)
    )
    analyzer: AnalyzerComponent | None = None
    rows: list[tuple[str, dict]] = []
    try:
        state = cluster.up() if cluster is not None else ClusterState.load(args.cluster_dir)
        if state is None:
            raise SystemExit(f"no cluster state under {args.cluster_dir}")
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="bench-recover")
        ensure_topic(admin, "orders", 12, 3)
        ensure_topic(admin, "serve", 6, 3)
        agents.start(state)
        loads = [
            ProducerLoad(
                state.bootstrap,
                "orders",
                args.orders_rate,
                KeyDistribution("zipf", 1000, 1.2),
                acks="all",
                client=args.load_client,
            ).start(),
            ProducerLoad(
                state.bootstrap,
                "serve",
                args.serve_rate,
                KeyDistribution("uniform", 1000),
                seed=3,
                client=args.load_client,
            ).start(),
        ]
        serve = loads[1]
        pid = state.node(VICTIM).pid
        cfg = demo_config(agents.window_s) if args.analyzer == "demo" else default_config(agents.window_s)
        for mode in args.modes.split(","):
            analyzer = AnalyzerComponent(
                cfg,
                remediate_topics=["orders", "serve"] if mode == "with" else None,
                cooldown_s=5.0,
                restore_hold_s=args.restore_hold_s,
                settle_s=args.settle_s,
            )
            analyzer.start(state)
            warm = time.monotonic()
            while (
                analyzer.service is None
                or analyzer.service.last is None
                or not analyzer.service.last.broker_stages
            ):
                if time.monotonic() - warm > 420:
                    raise SystemExit("the analyzer saw no stage rows within 420 s")
                time.sleep(2)
            time.sleep(args.quiet_s)  # some quiet history windows before the first fault
            for i in range(args.rounds):
                fault_s = args.fault_s if mode == "with" else args.baseline_fault_s
                # Every round starts alike: no finding still active from the round before, and
                # broker 2 leading its preferred partitions (pauses can move leadership away).
                # A restarted analyzer rebuilds its history from the archive, so the baseline's
                # last fault can raise a finding (and a demotion) at once: wait for it to clear
                # and for the remediator to restore broker 2 (its replica order) after its hold.
                cleared = time.monotonic() + args.clear_timeout_s
                while finding_active(analyzer) and time.monotonic() < cleared:
                    time.sleep(1)
                if mode == "with":
                    wait_restored(admin, "serve", VICTIM, args.restore_timeout_s)
                faults.restore_preferred_leaders(admin, ["orders", "serve"])
                r = one_round(
                    admin,
                    serve,
                    functools.partial(finding_active, analyzer),
                    VICTIM,
                    pid,
                    fault_s,
                    pause_ms=args.pause_ms,
                )
                r["fault_s"] = fault_s
                if mode == "with":
                    r["cleared_after_s"], r["restored_after_s"] = cleared_then_restored(
                        admin, analyzer, args.restore_timeout_s
                    )
                rows.append((mode, r))
                print(
                    f"{mode:>7} remediation round {i + 1}: finding {fmt(r['finding'], fault_s)} s, "
                    f"demoted {fmt(r['demoted'], fault_s)} s, recovered {fmt(r['recovered'], fault_s)} s, "
                    f"peak acks=1 p99 {r['peak_p99_ms']:.0f} ms, {r['pause_cycles']} pauses "
                    f"(latest resume {r['pause_max_late_ms']:.0f} ms late)"
                    + (
                        f", finding cleared {fmt(r['cleared_after_s'], args.restore_timeout_s)} s and "
                        f"leadership restored {fmt(r['restored_after_s'], args.restore_timeout_s)} s "
                        "after the fault"
                        if mode == "with"
                        else ""
                    ),
                    flush=True,
                )
            analyzer.stop()
            analyzer = None
        admin.close()
        if args.save_run is not None:
            doc = {
                "analyzer": args.analyzer,
                "window_s": agents.window_s,
                "rounds": [{"mode": m, **r} for m, r in rows],
                "records": [r.to_json().decode() for r in read_samples(state.bootstrap)],
                "findings": [f.to_json().decode() for f in read_samples(state.bootstrap, R.FINDINGS_TOPIC)],
            }
            args.save_run.write_text(json.dumps(doc))
            print(f"run saved to {args.save_run}")
    finally:
        faults.revert_all()
        if analyzer is not None:
            analyzer.stop()
        for load in loads:
            load.stop()
        agents.stop()
        if cluster is not None:
            cluster.down()
        shutil.rmtree(root, ignore_errors=True)

    print("\ntime from fault onset to acks=1 producer p99 < 300 ms (median of rounds)")
    for mode in ("without", "with"):
        got = [r for m, r in rows if m == mode]
        cap = got[0]["fault_s"] if got else 0
        rec = [r["recovered"] for r in got]
        done = [v for v in rec if v is not None]
        med = statistics.median(done) if len(done) == len(rec) and done else None
        finding = [r["finding"] for r in got if r["finding"] is not None]
        print(
            f"  {mode:>7} remediation: {fmt(med, cap)} s  (rounds: {', '.join(fmt(v, cap).strip() for v in rec)}; "
            f"finding median {statistics.median(finding) if finding else float('nan'):.1f} s)"
        )


if __name__ == "__main__":
    main()
