"""Raw samples → Spark aggregates → analyzer rows → the slow-broker rule, end to end in Spark."""

from __future__ import annotations

import random

from analyzer.slow_broker import SlowBrokerDetector
from linkwatch import records as R
from spark_metrics.aggregate import aggregate, collect
from tests.spark_metrics.conftest import raw_frame
from tests.spark_metrics.test_transforms import T0, sketch_of


def test_slow_broker_found_from_raw_samples(spark) -> None:
    rng = random.Random(5)
    recs = []
    for w in range(6):
        for b in range(3):
            slow = b == 2 and w >= 2
            for stage in ("total", "local", "requestQueue"):
                base = 5.0 if stage != "total" else 12.0
                extra = 700.0 if slow and stage in ("total", "local") else 0.0
                values = [
                    rng.uniform(base, 2 * base) + (extra if rng.random() < 0.05 else 0.0) for _ in range(200)
                ]
                recs.append(
                    R.StageSketch(
                        cluster="c1",
                        source=f"broker-{b}",
                        ts_ms=T0 + w * 10_000,
                        broker=b,
                        request="Produce",
                        stage=stage,
                        window_s=10,
                        sketch=sketch_of(values),
                    )
                )
    other_cluster = R.StageSketch(
        cluster="c2",
        source="x",
        ts_ms=T0,
        broker=9,
        request="Produce",
        stage="total",
        window_s=10,
        sketch=sketch_of([1.0]),
    )
    data = collect(aggregate(raw_frame(spark, [*recs, other_cluster]), 10, cluster="c1"), "c1", 10)
    assert {r.broker for r in data.broker_stages} == {0, 1, 2}
    assert len(data.cluster_stages) == 6 * 3
    [finding] = SlowBrokerDetector().detect(data, T0 + 60_000)
    assert (finding.subject, finding.evidence["stage"], finding.evidence["score"]) == ("broker:2", "local", 4)


def _exemplar(b: int, ts_ms: int, client: str, send_ms: float) -> R.SlowRequest:
    stages = {"requestQueue": 0.1, "local": 0.2, "remote": 500.0, "throttle": 0.0, "responseQueue": 0.1}
    return R.SlowRequest(
        cluster="c1",
        source=f"broker-{b}",
        ts_ms=ts_ms,
        broker=b,
        request="FetchConsumer",
        client_id=client,
        correlation_id=ts_ms % 1000,
        connection=f"127.0.0.1:9092-127.0.0.1:{40000 + ts_ms % 1000}-0",
        stages_ms=stages | {"send": send_ms, "total": 500.4 + send_ms},
        partitions=[{"topic": "t", "partition": 0, "bytes": 1048576}],
    )


def test_slow_client_named_from_exemplars(spark) -> None:
    """A consumer that stops reading its socket: broker 1's FetchConsumer send time grows, and
    the agent's exemplars carry the client id; the finding is the client's, not broker 1's."""
    rng = random.Random(7)
    recs: list[R.Record] = []
    for w in range(6):
        for b in range(3):
            for stage in ("total", "send", "remote"):
                slow = b == 1 and w >= 1 and stage in ("total", "send")
                values = [
                    rng.uniform(2.0, 4.0) + (800.0 if slow and rng.random() < 0.05 else 0.0)
                    for _ in range(200)
                ]
                recs.append(
                    R.StageSketch(
                        cluster="c1",
                        source=f"broker-{b}",
                        ts_ms=T0 + w * 10_000,
                        broker=b,
                        request="FetchConsumer",
                        stage=stage,
                        window_s=10,
                        sketch=sketch_of(values),
                    )
                )
            if b == 1 and w >= 1:
                start = T0 + w * 10_000
                recs += [_exemplar(1, start + 100 * k, "slow-reader", 790.0 + k) for k in range(3)]
                recs.append(_exemplar(1, start + 500, "other", 310.0))
    data = collect(aggregate(raw_frame(spark, [*recs, recs[-1]]), 10, cluster="c1"), "c1", 10)
    last = sorted(
        (r for r in data.client_windows if r.window_start_ms == T0 + 50_000), key=lambda r: r.client_id
    )
    assert [(r.broker, r.request, r.client_id, r.count, r.send_ms_max, r.throttle_ms_max) for r in last] == [
        (1, "FetchConsumer", "other", 1, 310.0, 0.0),  # the re-sent record counted once
        (1, "FetchConsumer", "slow-reader", 3, 792.0, 0.0),
    ]
    [finding] = SlowBrokerDetector().detect(data, T0 + 60_000)
    assert (finding.rule, finding.subject, finding.evidence["broker"], finding.evidence["stage"]) == (
        "slow_client",
        "client:slow-reader",
        1,
        "send",
    )
