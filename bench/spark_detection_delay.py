"""Detection delay on the real cluster: fault onset → slow-broker finding, median over runs.

A local 3-broker cluster, producer load, request logs → ``linkwatch.samples`` (the test feed
that stands in for the agents), the analyzer service (Spark stream → archive → detectors on
``local[2]``). Each run pauses broker 2 in a duty cycle (400 ms of every 1000 ms) until the
slow-broker finding for broker 2 is active, then removes the fault and waits for it to clear.
The baseline printed beside the delays is the detector's own floor: ``fire_score`` windows of
``window_s`` seconds (what an instant pipeline would need).

    .venv/bin/python bench/spark_detection_delay.py --runs 3
    .venv/bin/python bench/spark_detection_delay.py --cluster-dir DIR --smoke   # one run, 20 s limit

``--cluster-dir`` uses a running ``linkwatch cluster up`` cluster (3 brokers) instead of starting one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analyzer.base import InMemorySink
from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from linkwatch.kafka_client import KafkaClientConfig
from testbed import faults
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from testbed.load import KeyDistribution, ProducerLoad, ensure_own_topics, ensure_topic
from tests.analyzer.request_log_feed import RequestLogFeed

KEY = ("slow_broker", "broker:2")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--window-s", type=int, default=2)
    ap.add_argument("--limit-s", type=float, default=600.0, help="give up on one detection after this")
    ap.add_argument(
        "--cluster-dir", type=Path, help="a running 3-broker testbed cluster (else one is started)"
    )
    ap.add_argument("--smoke", action="store_true", help="a size that runs in a minute: one run, 20 s limit")
    args = ap.parse_args()
    if args.smoke:
        args.runs, args.limit_s = 1, 20.0
    root = Path(tempfile.mkdtemp(prefix="lw-delay-"))
    cluster = None
    if args.cluster_dir is not None:
        state = ClusterState.load(args.cluster_dir)
        if state is None:
            raise SystemExit(f"no cluster state under {args.cluster_dir}")
    else:
        cluster = LocalCluster(ClusterSpec(brokers=3, root=root / "kafka", base_port=find_free_base_port(3)))
        state = cluster.up()
    feed = load = service = None
    delays: list[float] = []
    clears: list[float] = []
    try:
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
        # As every test and bench makes it (the session cluster's may exist, with its partitions).
        ensure_own_topics(state.bootstrap)
        ensure_topic(admin, "bench.load", 6, 3)
        admin.close()
        feed = RequestLogFeed(state, "bench", args.window_s).start()
        load = ProducerLoad(
            state.bootstrap, "bench.load", 400, KeyDistribution("uniform", 1000), acks="all"
        ).start()
        cfg = AnalyzerConfig(
            cluster="bench",
            kafka=KafkaClientConfig(bootstrap_servers=state.bootstrap),
            window_s=args.window_s,
            lookback_windows=90,
            interval_s=1.0,
            trigger_s=4.0,
            watermark="60 seconds",
            state_dir=root / "analyzer",
            publish_findings=False,
            detectors={"slow_broker": {"min_requests": 10, "history_windows": 10}},
            metrics=AnalyzerMetricsConfig(enabled=False),
        )
        service = AnalysisService(cfg, sinks=[InMemorySink()]).start()
        floor = service.detectors[0].config.fire_score * args.window_s  # type: ignore[attr-defined]
        ticks: list[float] = []

        def tick() -> None:
            # Paced like AnalysisService.run (an incremental evaluation takes milliseconds).
            t = time.monotonic()
            service.tick()
            ticks.append(time.monotonic() - t)
            time.sleep(max(0.0, cfg.interval_s - ticks[-1]))

        started = time.monotonic()
        while not (service.last and service.last.broker_stages):
            if time.monotonic() - started > max(args.limit_s, 300.0):
                raise SystemExit("no stage rows reached the analyzer")
            tick()
        print(f"first stage rows after {time.monotonic() - started:.0f}s", flush=True)
        for run in range(args.runs):
            for _ in range(3):  # a few quiet evaluations between runs
                tick()
            if KEY in service.engine.tracker.active:
                raise SystemExit("broker 2 is reported slow before the fault")
            onset = time.time()
            with faults.PauseDutyCycle(state.node(2).pid, 400, 1000):
                while KEY not in service.engine.tracker.active and time.time() - onset < args.limit_s:
                    tick()
                delay = time.time() - onset
            if KEY not in service.engine.tracker.active:
                print(f"run {run + 1}: no finding within {args.limit_s:.0f}s", flush=True)
                continue
            delays.append(delay)
            stage = service.engine.tracker.active[KEY].evidence.get("stage")
            removed = time.time()
            while KEY in service.engine.tracker.active and time.time() - removed < args.limit_s:
                tick()
            clears.append(time.time() - removed)
            print(
                f"run {run + 1}: found after {delay:.1f}s (stage {stage}), cleared {clears[-1]:.1f}s "
                f"after the fault was removed",
                flush=True,
            )
        print(f"runs: {args.runs}, found in {len(delays)}")
        print(f"evaluations: {len(ticks)}, median {statistics.median(ticks):.3f}s, max {max(ticks):.3f}s")
        if delays:
            print(
                f"detection delay median over {len(delays)} run(s): {statistics.median(delays):.1f}s "
                f"(min {min(delays):.1f}s, max {max(delays):.1f}s); clear median {statistics.median(clears):.1f}s"
            )
            print(
                f"baseline (detector floor, {floor}s of slow windows): {floor}s; ratio {statistics.median(delays) / floor:.1f}x"
            )
    finally:
        faults.revert_all()
        if service is not None:
            service.stop()
        if load is not None:
            load.stop()
        if feed is not None:
            feed.stop()
        if cluster is not None:
            cluster.down()


if __name__ == "__main__":
    main()
