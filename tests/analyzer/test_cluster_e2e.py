"""On the real 3-broker cluster: request logs → samples topic → Spark stream → archive →
detectors. One run: a quiet phase (no slow-broker finding may appear), then broker 2 paused in
a duty cycle (a slow-broker finding for broker 2 naming a stage, within a measured delay).
Throughout, a Zipf-keyed topic must be reported skewed with its hot partitions and hot keys,
and a uniform-keyed topic beside it must not."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from analyzer.base import InMemorySink
from analyzer.service import AnalysisService, AnalyzerConfig, HotKeySampling, PrometheusConfig
from linkwatch.records import SAMPLES_TOPIC
from linkwatch.testbed import faults
from linkwatch.testbed.load import KeyDistribution, ProducerLoad, ensure_topic
from tests.analyzer.request_log_feed import RequestLogFeed

pytestmark = pytest.mark.cluster

QUIET_S = 20.0
# Generous bounds: on a loaded 2-core machine the first micro-batch alone can take minutes.
FIRST_DATA_WITHIN_S = 420.0
SKEW_WITHIN_S = 180.0
DETECT_WITHIN_S = 300.0
WINDOW_S = 2


def _config(cluster, state_dir: Path, zipf_topic: str) -> AnalyzerConfig:
    return AnalyzerConfig(
        cluster="e2e",
        bootstrap=cluster.bootstrap,
        window_s=WINDOW_S,
        lookback_windows=10,
        interval_s=1.0,
        trigger_s=3.0,
        watermark="30 seconds",
        state_dir=state_dir,
        publish_findings=True,
        detectors={
            "slow_broker": {"min_requests": 10, "history_windows": 10},
            "skewed_partitions": {"max_imbalance": 0.5, "measures": ["bytes_in"], "recent_windows": 4},
            "hot_keys": {"min_sampled": 500},
        },
        hot_keys=HotKeySampling(topics=[zipf_topic]),
        prometheus=PrometheusConfig(enabled=False),
    )


def _tick(service: AnalysisService) -> None:
    started = time.monotonic()
    service.tick()
    data = service.last
    print(
        f"tick {time.monotonic() - started:.1f}s: {len(data.broker_stages)} stage rows, "
        f"{len(data.partitions)} partition rows, active {sorted(service.engine.tracker.active)}"
    )


@pytest.mark.timeout(1500)
@pytest.mark.skipif(
    os.environ.get("LINKWATCH_E2E_ANALYZER") != "1",
    reason="known open failure (issue 4): under a duty-cycle pause the streaming job's second "
    "evaluation does not finish on a 2-core machine; run with LINKWATCH_E2E_ANALYZER=1",
)
def test_slow_broker_and_skew_on_real_cluster(cluster3, admin, tmp_path: Path) -> None:
    zipf, uniform = f"zipf-{tmp_path.name[-8:]}", f"uniform-{tmp_path.name[-8:]}"
    ensure_topic(admin, SAMPLES_TOPIC, 3, 1)
    for topic in (zipf, uniform):
        ensure_topic(admin, topic, 6, 3)
    feed = RequestLogFeed(cluster3, "e2e", WINDOW_S, size_topics=(zipf, uniform)).start()
    loads = [
        ProducerLoad(cluster3.bootstrap, zipf, 400, KeyDistribution("zipf", 1000, 1.3), acks=1).start(),
        ProducerLoad(
            cluster3.bootstrap, uniform, 400, KeyDistribution("uniform", 1000), acks=1, seed=2
        ).start(),
    ]
    sink = InMemorySink()
    service = AnalysisService(_config(cluster3, tmp_path / "analyzer", zipf), sinks=[sink]).start()
    try:
        # Quiet phase: once stage data flows, no slow broker may be reported.
        deadline = time.monotonic() + FIRST_DATA_WITHIN_S
        while time.monotonic() < deadline and not (service.last and service.last.broker_stages):
            _tick(service)
        assert service.last.broker_stages, "no stage rows reached the analyzer"
        quiet_until = time.monotonic() + QUIET_S
        while (
            time.monotonic() < quiet_until or len({r.window_start_ms for r in service.last.broker_stages}) < 6
        ):
            _tick(service)
        deadline = time.monotonic() + SKEW_WITHIN_S
        while (
            time.monotonic() < deadline
            and ("skewed_partitions", f"topic:{zipf}") not in service.engine.tracker.active
        ):
            _tick(service)
        assert [f.subject for f in sink.emitted if f.rule in ("slow_broker", "cluster_slow")] == []
        active = service.engine.tracker.active
        skew = active.get(("skewed_partitions", f"topic:{zipf}"))
        assert skew is not None, f"no skew finding for {zipf}; active: {list(active)}"
        assert ("skewed_partitions", f"topic:{uniform}") not in active
        assert skew.evidence["hot_partitions"], skew.evidence
        hot_keys = [k["key"] for k in skew.evidence["hot_keys"]]
        assert hot_keys[:1] == ["key-000000"], hot_keys
        assert ("hot_keys", f"topic:{zipf}") in active

        # Fault phase: broker 2 paused 400 ms of every 1000 ms.
        victim = cluster3.node(2)
        onset = time.monotonic()
        found = None
        with faults.PauseDutyCycle(victim.pid, 400, 1000):
            while time.monotonic() - onset < DETECT_WITHIN_S and found is None:
                _tick(service)
                found = service.engine.tracker.active.get(("slow_broker", "broker:2"))
        delay = time.monotonic() - onset
        print(f"\nslow-broker detection delay: {delay:.1f}s; evidence: {found and found.evidence['stage']}")
        assert found is not None, f"no slow-broker finding for broker 2 within {DETECT_WITHIN_S}s"
        assert found.evidence["stage"] in ("requestQueue", "local", "remote", "responseQueue", "send")
        assert [f.subject for f in sink.emitted if f.rule == "slow_broker"].count("broker:2") >= 1
        assert {f.subject for f in sink.emitted if f.rule == "slow_broker"} == {"broker:2"}
    finally:
        service.stop()
        for load in loads:
            load.stop()
        feed.stop()
