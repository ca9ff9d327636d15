"""Time to recover from a paused leader: with the findings pipeline demoting it, and without.

On one local 3-broker cluster with the agents and the Spark analyzer (the demo's pieces,
``linkwatch.testbed.demo``): a Zipf-keyed acks=all load (the analyzer sees a stalled broker
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

``--save-run F`` writes the rounds (with their onset and removal, wall clock ms), the agents'
windows from the samples topic and the analyzer's findings from the findings topic as one JSON
document, to replay the rules over the same windows (``bench/fault_matrix.py``'s ``replay``).

Run it alone: ``../shared/bin/quiet -- .venv/bin/python bench/remediation_recover.py``.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from _kit import read_samples  # bench/ is on sys.path (run as a script)

from analyzer.service import AnalyzerConfig, PrometheusConfig
from linkwatch import records as R
from linkwatch.testbed import faults
from linkwatch.testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port
from linkwatch.testbed.demo.agents import AgentsComponent
from linkwatch.testbed.demo.analyzer import AnalyzerComponent, demo_config
from linkwatch.testbed.load import KeyDistribution, ProducerLoad, ensure_topic
from linkwatch.testbed.recovery import PAUSE_MS, one_round, wait_restored

VICTIM = 2


def finding_active(analyzer: AnalyzerComponent) -> bool:
    """The analyzer's slow_broker finding for the victim is active."""
    svc = analyzer.service
    return svc is not None and ("slow_broker", f"broker:{VICTIM}") in svc.engine.tracker.active


def default_config() -> AnalyzerConfig:
    """The service's defaults (windows, lookback, evaluation, detectors and their thresholds),
    with only what the bench's cluster needs: its name, findings published, no extra listening
    port, no Spark progress bars."""
    return AnalyzerConfig(
        cluster="demo",
        publish_findings=True,
        prometheus=PrometheusConfig(enabled=False),
        spark_conf={"spark.ui.showConsoleProgress": "false"},
    )


def fmt(v: float | None, cap: float) -> str:
    return f"{v:6.1f}" if v is not None else f"  >{cap:.0f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fault-s", type=float, default=90.0)
    ap.add_argument("--baseline-fault-s", type=float, default=45.0)
    ap.add_argument("--restore-timeout-s", type=float, default=180.0)
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
        "--pause-ms",
        type=int,
        default=PAUSE_MS,
        help="broker 2 is paused this long of every 1000 ms (400: its leaders' acks=all p99 sits on the 300 ms line)",
    )
    ap.add_argument("--save-run", type=Path, help="write rounds, windows and findings here (JSON)")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="linkwatch-bench-recover-"))
    cluster = LocalCluster(
        ClusterSpec(brokers=3, root=root / "cluster", base_port=find_free_base_port(3, start=19400))
    )
    loads: list[ProducerLoad] = []
    agents = (
        AgentsComponent() if args.analyzer == "demo" else AgentsComponent(window_s=AnalyzerConfig().window_s)
    )
    analyzer: AnalyzerComponent | None = None
    rows: list[tuple[str, dict]] = []
    try:
        state = cluster.up()
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="bench-recover")
        ensure_topic(admin, "orders", 12, 3)
        ensure_topic(admin, "serve", 6, 3)
        agents.start(state)
        loads = [
            ProducerLoad(
                state.bootstrap, "orders", 800, KeyDistribution("zipf", 1000, 1.2), acks="all"
            ).start(),
            ProducerLoad(state.bootstrap, "serve", 300, KeyDistribution("uniform", 1000), seed=3).start(),
        ]
        serve = loads[1]
        pid = state.node(VICTIM).pid
        cfg = demo_config(agents.window_s) if args.analyzer == "demo" else default_config()
        for mode in ("without", "with"):
            analyzer = AnalyzerComponent(
                cfg, remediate_topics=["orders", "serve"] if mode == "with" else None, cooldown_s=5.0
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
            time.sleep(20)  # some quiet history windows before the first fault
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
                    r["restored_after_s"] = wait_restored(admin, "serve", VICTIM, args.restore_timeout_s)
                rows.append((mode, r))
                print(
                    f"{mode:>7} remediation round {i + 1}: finding {fmt(r['finding'], fault_s)} s, "
                    f"demoted {fmt(r['demoted'], fault_s)} s, recovered {fmt(r['recovered'], fault_s)} s, "
                    f"peak acks=1 p99 {r['peak_p99_ms']:.0f} ms, {r['pause_cycles']} pauses "
                    f"(latest resume {r['pause_max_late_ms']:.0f} ms late)"
                    + (
                        f", leadership restored {fmt(r['restored_after_s'], 0)} s after the fault"
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
