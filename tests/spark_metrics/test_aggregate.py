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
