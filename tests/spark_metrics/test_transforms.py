"""Transforms on inline frames built from the record classes, compared whole-frame."""

from __future__ import annotations

import dataclasses
import json
import random

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from linkwatch import records as R
from linkwatch.aggregates import (
    ImbalanceWindow,
    LogDirWindow,
    PartitionWindow,
    ProbeBrokerWindow,
    StageWindow,
)
from linkwatch.sketch import LatencySketch, exact_quantile
from spark_metrics import transforms as tf
from spark_metrics.schema import record_schema
from spark_metrics.sketch_merge import probe_windows, stage_windows
from tests.aggregation.reference import quantile_from_buckets
from tests.spark_metrics.conftest import raw_frame

T0 = 1_700_000_000_000
Q = {"p50_ms": 0.5, "p99_ms": 0.99, "p999_ms": 0.999}


def sketch_of(values: list[float]) -> dict:
    sk = LatencySketch()
    for v in values:
        sk.add(v)
    return sk.to_dict()


def stage_record(
    broker: int, ts_ms: int, values: list[float], stage: str = "total", request: str = "Produce"
):
    return R.StageSketch(
        cluster="c1",
        source=f"broker-{broker}",
        ts_ms=ts_ms,
        broker=broker,
        request=request,
        stage=stage,
        window_s=2,
        sketch=sketch_of(values),
    )


def expected_row(broker: int | None, window: int, sketches: list[dict], stage: str = "total") -> Row:
    """What the merge must give, by the Python reference arithmetic."""
    zero = sum(s["zero"] for s in sketches)
    pairs = [(int(k), c) for s in sketches for k, c in s["buckets"].items()]
    count = zero + sum(c for _, c in pairs)
    qs = {name: quantile_from_buckets(zero, pairs, q) for name, q in Q.items()}
    qs["nonzero_p99_ms"] = quantile_from_buckets(0, pairs, 0.99)  # the values above zero alone
    mean = sum(s["sum"] for s in sketches) / count if count else None
    return Row(
        broker=broker,
        request="Produce",
        stage=stage,
        window_start_ms=window,
        count=count,
        logged=count,  # full captures: every request logged
        **qs,
        mean_ms=mean,
    )


def test_schema_is_derived_from_the_record_classes() -> None:
    for cls in R.KINDS.values():
        names = [f.name for f in dataclasses.fields(cls)]
        assert record_schema(cls).fieldNames() == ["v", "kind", "key", *names]


def test_stage_windows_merge_windows_dedup_and_skew(spark) -> None:
    rng = random.Random(7)
    heavy = [rng.lognormvariate(3, 1.2) for _ in range(20_000)]  # broker 0 carries most samples
    b0a, b0b = stage_record(0, T0, heavy[:15_000]), stage_record(0, T0 + 2_000, heavy[15_000:])
    b1 = stage_record(1, T0 + 4_000, [rng.uniform(1, 9) for _ in range(50)] + [0.0] * 10)
    zeros = stage_record(2, T0, [0.0] * 5)
    empty = stage_record(2, T0 + 10_000, [])
    recs = [b0a, b0b, b0a, b1, zeros, empty]  # b0a re-sent: dropped by dedup
    sketches = tf.dedup(tf.records_of(raw_frame(spark, recs), R.StageSketch))
    actual = stage_windows(sketches, window_s=10).where("broker IS NOT NULL")
    assert actual.columns == [f.name for f in dataclasses.fields(StageWindow)]
    expected = [
        expected_row(0, T0, [b0a.sketch, b0b.sketch]),  # two 2 s agent windows in one 10 s window
        expected_row(1, T0, [b1.sketch]),
        Row(
            broker=2,
            request="Produce",
            stage="total",
            window_start_ms=T0,
            count=5,
            logged=5,
            p50_ms=0.0,
            p99_ms=0.0,
            p999_ms=0.0,
            nonzero_p99_ms=None,  # only zeros
            mean_ms=0.0,
        ),
        Row(
            broker=2,
            request="Produce",
            stage="total",
            window_start_ms=T0 + 10_000,
            count=0,
            logged=0,
            p50_ms=None,
            p99_ms=None,
            p999_ms=None,
            nonzero_p99_ms=None,
            mean_ms=None,
        ),
    ]
    assertDataFrameEqual(actual, expected, rtol=1e-9)


def test_cluster_merge_is_within_one_percent_of_exact(spark) -> None:
    rng = random.Random(3)
    per_broker = {b: [rng.lognormvariate(2 + b / 2, 1) for _ in range(3_000 + 2_000 * b)] for b in range(4)}
    recs = [stage_record(b, T0, vals) for b, vals in per_broker.items()]
    sketches = tf.records_of(raw_frame(spark, recs), R.StageSketch)
    [row] = stage_windows(sketches, 10).where("broker IS NULL").collect()
    everything = [v for vals in per_broker.values() for v in vals]
    assert row["broker"] is None and row["count"] == len(everything)
    for name, q in Q.items():
        exact = exact_quantile(everything, q)
        assert abs(row[name] - exact) <= 0.01 * exact, (name, row[name], exact)


MALFORMED = [
    ("not json", "{", "not_json"),
    ("json array", "[1, 2]", "not_object"),
    ("no version", '{"kind": "stage_sketch"}', "bad_version"),
    ("future version", '{"v": 99, "kind": "stage_sketch"}', "future_version"),
    ("unknown kind", '{"v": 1, "kind": "weather", "key": "k"}', "unknown_kind"),
    (
        "missing field",
        '{"v": 1, "kind": "logdir_usage", "key": "k", "cluster": "c", "source": "s", "ts_ms": 1}',
        "missing_field",
    ),
    (
        "wrong type",
        '{"v": 1, "kind": "logdir_usage", "key": "k", "cluster": "c", "source": "s", "ts_ms": "soon", '
        '"broker": 1, "log_dir": "/d", "capacity_bytes": 1, "used_bytes": 1, "partition_bytes": 1, "partitions": 1}',
        "missing_field",
    ),
    (
        "capture ratio out of range",
        '{"v": 1, "kind": "stage_sketch", "key": "k", "cluster": "c", "source": "s", "ts_ms": 1, '
        '"broker": 1, "request": "Produce", "stage": "total", "window_s": 10, "sketch": {}, "capture_ratio": 0}',
        "bad_value",
    ),
    (
        "sampled sketch",
        '{"v": 1, "kind": "stage_sketch", "key": "k", "cluster": "c", "source": "s", "ts_ms": 1, '
        '"broker": 1, "request": "Produce", "stage": "total", "window_s": 10, "sketch": {}, "capture_ratio": 0.25}',
        None,
    ),
    (
        "good",
        R.LogDirUsage(
            cluster="c",
            source="s",
            ts_ms=1,
            broker=1,
            log_dir="/d",
            capacity_bytes=1,
            used_bytes=1,
            partition_bytes=1,
            partitions=1,
        )
        .to_json()
        .decode(),
        None,
    ),
]


def test_malformed_records_are_dropped_with_a_reason(spark) -> None:
    actual = tf.with_drop_reason(raw_frame(spark, [v for _, v, _ in MALFORMED])).select("json", "drop_reason")
    assertDataFrameEqual(actual, [Row(json=v, drop_reason=r) for _, v, r in MALFORMED])
    # records_of keeps exactly the stage sketches with_drop_reason lets through.
    kept = tf.records_of(raw_frame(spark, [v for _, v, _ in MALFORMED]), R.StageSketch).collect()
    assert [r.capture_ratio for r in kept] == [0.25]
    good = tf.records_of(raw_frame(spark, [v for _, v, _ in MALFORMED]), R.LogDirUsage)
    assert good.count() == 1


def size_record(broker: int, topic: str, p: int, ts: int, size: int, leo: int | None) -> R.PartitionSize:
    return R.PartitionSize(
        cluster="c1",
        source="s",
        ts_ms=ts,
        broker=broker,
        log_dir="/d0",
        topic=topic,
        partition=p,
        size_bytes=size,
        segments=1,
        oldest_segment_ms=0,
        newest_segment_ms=ts,
        log_end_offset=leo,
    )


def test_partition_traffic_size_and_imbalance(spark) -> None:
    recs = [
        # partition 0: leader on broker 0 grows 30 kB per 10 s window, a lagging follower on broker 1
        size_record(0, "a", 0, T0, 100_000, 1000),
        size_record(1, "a", 0, T0, 90_000, 900),
        size_record(0, "a", 0, T0 + 10_000, 130_000, 1300),
        size_record(0, "a", 0, T0 + 20_000, 160_000, 1600),
        # partition 1: 10 kB per window; in window 2 retention deleted a segment (no rate)
        size_record(0, "a", 1, T0, 50_000, None),
        size_record(0, "a", 1, T0 + 10_000, 60_000, None),
        size_record(0, "a", 1, T0 + 20_000, 20_000, None),
    ]
    parts = tf.partition_windows(tf.records_of(raw_frame(spark, recs), R.PartitionSize), 10)
    assert parts.columns == [f.name for f in dataclasses.fields(PartitionWindow)]
    P = PartitionWindow
    expected = [
        P(
            topic="a",
            partition=0,
            window_start_ms=T0,
            size_bytes=100_000,
            bytes_in_per_s=None,
            messages_in_per_s=None,
        ),
        P(
            topic="a",
            partition=0,
            window_start_ms=T0 + 10_000,
            size_bytes=130_000,
            bytes_in_per_s=3000.0,
            messages_in_per_s=30.0,
        ),
        P(
            topic="a",
            partition=0,
            window_start_ms=T0 + 20_000,
            size_bytes=160_000,
            bytes_in_per_s=3000.0,
            messages_in_per_s=30.0,
        ),
        P(
            topic="a",
            partition=1,
            window_start_ms=T0,
            size_bytes=50_000,
            bytes_in_per_s=None,
            messages_in_per_s=None,
        ),
        P(
            topic="a",
            partition=1,
            window_start_ms=T0 + 10_000,
            size_bytes=60_000,
            bytes_in_per_s=1000.0,
            messages_in_per_s=None,
        ),
        P(
            topic="a",
            partition=1,
            window_start_ms=T0 + 20_000,
            size_bytes=20_000,
            bytes_in_per_s=None,
            messages_in_per_s=None,
        ),
    ]
    assertDataFrameEqual(parts, [Row(**dataclasses.asdict(p)) for p in expected])
    imb = tf.imbalance(
        parts,
        scope="topic",
        measure="bytes_in",
        value="bytes_in_per_s",
        member=parts.partition,
        group=parts.topic,
    )
    assert imb.columns == [f.name for f in dataclasses.fields(ImbalanceWindow)]
    IW = ImbalanceWindow
    assertDataFrameEqual(
        imb,
        [
            Row(
                **dataclasses.asdict(
                    IW(
                        scope="topic",
                        measure="bytes_in",
                        group="a",
                        window_start_ms=T0 + 10_000,
                        members=2,
                        max_value=3000.0,
                        avg_value=2000.0,
                        ratio=0.5,
                        max_member="0",
                    )
                )
            ),
            Row(
                **dataclasses.asdict(
                    IW(
                        scope="topic",
                        measure="bytes_in",
                        group="a",
                        window_start_ms=T0 + 20_000,
                        members=1,
                        max_value=3000.0,
                        avg_value=3000.0,
                        ratio=0.0,
                        max_member="0",
                    )
                )
            ),
        ],
    )


def test_logdir_usage_last_reading_per_window(spark) -> None:
    def usage(broker: int, d: str, ts: int, used: int, io: float | None) -> R.LogDirUsage:
        return R.LogDirUsage(
            cluster="c1",
            source="s",
            ts_ms=ts,
            broker=broker,
            log_dir=d,
            capacity_bytes=1000,
            used_bytes=used,
            partition_bytes=used,
            partitions=3,
            io_util=io,
        )

    recs = [
        usage(0, "/a", T0 + 1000, 100, 0.1),
        usage(0, "/a", T0 + 9000, 300, None),
        usage(1, "/b", T0, 0, 0.5),
    ]
    dirs = tf.logdir_windows(tf.records_of(raw_frame(spark, recs), R.LogDirUsage), 10)
    assert dirs.columns == [f.name for f in dataclasses.fields(LogDirWindow)]
    L = LogDirWindow
    assertDataFrameEqual(
        dirs,
        [
            Row(
                **dataclasses.asdict(
                    L(
                        broker=0,
                        log_dir="/a",
                        window_start_ms=T0,
                        capacity_bytes=1000,
                        used_bytes=300,
                        usage_ratio=0.3,
                        io_util=None,
                    )
                )
            ),
            Row(
                **dataclasses.asdict(
                    L(
                        broker=1,
                        log_dir="/b",
                        window_start_ms=T0,
                        capacity_bytes=1000,
                        used_bytes=0,
                        usage_ratio=0.0,
                        io_util=0.5,
                    )
                )
            ),
        ],
    )


def test_window_start(spark) -> None:
    df = spark.createDataFrame([(T0 + 1999,), (T0 + 2000,), (T0 + 10_000,)], "ts_ms long")
    got = df.select(
        tf.window_start("ts_ms", 2).alias("w2"), tf.window_start("ts_ms", 10).alias("w10")
    ).collect()
    assert [tuple(r) for r in got] == [(T0, T0), (T0 + 2000, T0), (T0 + 10_000, T0 + 10_000)]


def probe_record(
    source: str,
    broker: int,
    ts_ms: int,
    e2e: list[float],
    ok: int,
    unavailable: dict,
    commits: list[float] | None = None,
) -> R.ProbeSample:
    """``commits``: the commit latencies this broker coordinated (``None``: none, ``{}``)."""
    return R.ProbeSample(
        cluster="c1",
        source=source,
        ts_ms=ts_ms,
        broker=broker,
        topic="linkwatch.probe",
        window_s=2,
        deadline_ms=1000,
        sent=len(e2e),
        acked=len(e2e),
        ok=ok,
        unavailable=unavailable,
        produce=sketch_of([v / 2 for v in e2e]),
        end_to_end=sketch_of(e2e),
        commit_ok=len(commits or []),
        commit_latency=sketch_of(commits) if commits is not None else {},
    )


def without_commit_fields(rec: R.ProbeSample) -> str:
    """The record as a writer from before the commit fields sent it (keys absent)."""
    doc = json.loads(rec.to_json())
    for name in ("commit_ok", "commit_errors", "commit_latency"):
        del doc[name]
    return json.dumps(doc)


def test_probe_windows_merge_instances_and_windows(spark) -> None:
    """Two probe instances and two 2 s windows per broker merge into one 10 s row: counts summed,
    availability from the sums, quantiles from the merged sketches (the Python reference).
    Commit latency: broker 1 coordinated commits in both samples (merged), broker 2 in one
    sample only (the other is ``{}``), broker 3 in none and its second sample predates the field
    (absent keys): its commit p99 is null, the rest of its row is unaffected."""
    rng = random.Random(3)
    fast = [[rng.uniform(2, 20) for _ in range(40)] for _ in range(2)]
    slow = [
        [rng.uniform(2, 20) for _ in range(30)] + [rng.uniform(900, 5000) for _ in range(10)]
        for _ in range(2)
    ]
    commits = [[rng.uniform(5, 40) for _ in range(9)] + [rng.uniform(300, 600)] for _ in range(2)]
    recs: list[R.ProbeSample | str] = [
        probe_record("p1", 1, T0, fast[0], 40, {}, commits[0]),
        probe_record("p2", 1, T0 + 2_000, fast[1], 40, {}, commits[1]),
        probe_record("p1", 2, T0, slow[0], 30, {"deadline": 10}, commits[1]),
        probe_record("p2", 2, T0 + 2_000, slow[1], 28, {"deadline": 10, "send_error": 2}),
        probe_record("p1", 3, T0, fast[0], 40, {}),
        without_commit_fields(probe_record("p2", 3, T0 + 2_000, fast[1], 40, {})),
    ]
    recs.append(recs[0])  # re-sent: dropped by dedup
    samples = tf.dedup(tf.records_of(raw_frame(spark, recs), R.ProbeSample))
    actual = probe_windows(samples, window_s=10)
    assert actual.columns == [f.name for f in dataclasses.fields(ProbeBrokerWindow)]

    def q(values: list[float], p: float) -> float | None:
        sk = LatencySketch()
        for v in values:
            sk.add(v)
        return sk.quantile(p)

    def expected(
        broker: int, values: list[list[float]], ok: int, decided: int, commit: list[float] | None
    ) -> Row:
        allv = values[0] + values[1]
        half = [v / 2 for v in allv]
        return Row(
            broker=broker,
            window_start_ms=T0,
            sent=len(allv),
            ok=ok,
            decided=decided,
            availability=ok / decided,
            produce_p50_ms=q(half, 0.5),
            produce_p99_ms=q(half, 0.99),
            end_to_end_p50_ms=q(allv, 0.5),
            end_to_end_p99_ms=q(allv, 0.99),
            commit_p99_ms=q(commit, 0.99) if commit is not None else None,
        )

    assertDataFrameEqual(
        actual,
        [
            expected(1, fast, 80, 80, commits[0] + commits[1]),
            expected(2, slow, 58, 80, commits[1]),
            expected(3, fast, 80, 80, None),
        ],
        rtol=1e-9,
    )
    # The expectation is not vacuous: 1 of 20 merged commits is slow, so the p99 is a slow one.
    assert actual.where("broker = 1").first()["commit_p99_ms"] > 290
