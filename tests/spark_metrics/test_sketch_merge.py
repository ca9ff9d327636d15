"""The Spark side of the one aggregation (:mod:`spark_metrics.sketch_merge`): Arrow rows handed to
:func:`aggregation.sketch_math.merge` keep Spark's nulls, and the merged rows per broker, per any
grouping and over the cluster equal the plain rule (:mod:`tests.aggregation.reference`, to 1e-9
relative) on generated record sets and edge shapes. The recorded captures are pinned in
``tests/aggregation/test_captured_aggregates.py``."""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from aggregation.sketch_math import NONZERO_QUANTILES, QUANTILES
from linkwatch import records as R
from linkwatch.sketch import LatencySketch
from spark_metrics import transforms as tf
from spark_metrics.sketch_merge import (
    STAGE_DIMS,
    merged_quantiles,
    quantile_table,
    sketch_columns,
    stage_windows,
)
from tests.aggregation.reference import close, merged_row, quantile_from_buckets
from tests.spark_metrics.conftest import raw_frame

T0 = 1_700_000_000_000
WINDOW_S = 10

# Latencies as the agents see them: exact zeros, negatives and sub-microsecond values (all
# counted as zero by the sketch), ordinary and very large times.
latency = st.one_of(
    st.sampled_from([0.0, -1.0, 0.0005, 1.0, 300.0]),
    st.floats(min_value=-10.0, max_value=0.01),
    st.floats(min_value=0.001, max_value=3.6e6),
)
# (broker, window, request, stage, offset within the window, values, reverse bucket order)
cell = st.tuples(
    st.integers(0, 4),
    st.integers(0, 3),
    st.sampled_from(["Produce", "FetchConsumer"]),
    st.sampled_from(["total", "local"]),
    st.sampled_from([0, 3_000]),
    st.lists(latency, max_size=25),
    st.booleans(),
)


def sketch_dict(values: list[float], reverse: bool = False) -> dict:
    sk = LatencySketch()
    for v in values:
        sk.add(v)
    d = sk.to_dict()
    if reverse:  # map order as another writer might send it
        d["buckets"] = dict(reversed(list(d["buckets"].items())))  # type: ignore[union-attr]
    return d


# Sampled capture marks a sketch with the share of requests logged; a cell's ratio follows
# from its broker and window, so every generated set mixes full and sampled sketches.
RATIOS = [1.0, 0.5, 1 / 6, 0.3, 1.0]


def records(cells: Iterable[tuple]) -> list[R.StageSketch]:
    return [
        R.StageSketch(
            cluster="c1",
            source=f"broker-{b}",
            ts_ms=T0 + w * WINDOW_S * 1000 + off,
            broker=b,
            request=req,
            stage=stage,
            window_s=WINDOW_S,
            sketch=sketch_dict(values, rev),
            capture_ratio=RATIOS[(b + w) % len(RATIOS)],
        )
        for b, w, req, stage, off, values, rev in cells
    ]


def expected(recs: list[R.StageSketch], dims: list[str], level: list[str]) -> dict[tuple, dict]:
    """The plain rule's row per group of ``level`` (the other dimensions None), keyed by
    ``dims``; a record's dimensions by :func:`dim_of`."""
    groups: dict[tuple, list[tuple[dict, float]]] = {}
    for r in recs:
        key = tuple(dim_of(r, d) if d in level else None for d in dims)
        groups.setdefault(key, []).append((r.sketch, r.capture_ratio))
    return {key: merged_row(members) for key, members in groups.items()}


def dim_of(r: R.StageSketch, dim: str) -> object:
    if dim == "window_start_ms":
        return r.ts_ms - r.ts_ms % (WINDOW_S * 1000)
    if dim == "rack":
        return r.broker % 3
    return getattr(r, dim)


def assert_rows(actual: DataFrame, want: dict[tuple, dict], dims: list[str]) -> int:
    """Same keys; count and logged equal; quantiles and mean equal to 1e-9 relative (None
    where None)."""
    got: dict[tuple, dict] = {}
    for row in actual.collect():
        d = row.asDict()
        key = tuple(d[k] for k in dims)
        assert key not in got, f"two rows for {key}"
        got[key] = d
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        assert (g["count"], g["logged"]) == (w["count"], w["logged"]), key
        for name in [*QUANTILES, *NONZERO_QUANTILES, "mean_ms"]:
            assert close(g[name], w[name]), (key, name, g[name], w[name])
    return len(want)


def both_levels(recs: list[R.StageSketch]) -> dict[tuple, dict]:
    return expected(recs, STAGE_DIMS, STAGE_DIMS) | expected(recs, STAGE_DIMS, STAGE_DIMS[1:])


def typed(spark: SparkSession, recs: list[R.StageSketch]) -> DataFrame:
    return tf.records_of(raw_frame(spark, recs), R.StageSketch)


# --- Arrow → the arithmetic, no Spark ---------------------------------------------------------

ARROW_SCHEMA = pa.schema(
    [
        ("broker", pa.int64()),
        ("request", pa.string()),
        ("stage", pa.string()),
        ("window_start_ms", pa.int64()),
        ("zero", pa.int64()),
        ("sum_ms", pa.float64()),
        ("keys", pa.list_(pa.int32())),
        ("counts", pa.list_(pa.int64())),
        ("capture_ratio", pa.float64()),
    ]
)


def test_arrow_nulls_follow_spark_sums() -> None:
    """A null zero count (all rows of the group) makes count and quantiles null; a null bucket
    count adds nothing; a null bucket map is no buckets and no logged requests; a null capture
    ratio is a full capture."""
    rows = [
        {"broker": 1, "request": "P", "stage": "t", "window_start_ms": 0, "zero": None, "sum_ms": 5.0,
         "keys": [10], "counts": [3], "capture_ratio": 0.5},
        {"broker": 2, "request": "P", "stage": "t", "window_start_ms": 0, "zero": 1, "sum_ms": None,
         "keys": [10, 20], "counts": [None, 2], "capture_ratio": None},
        {"broker": 3, "request": "P", "stage": "t", "window_start_ms": 0, "zero": 2, "sum_ms": 1.0,
         "keys": None, "counts": None, "capture_ratio": 1.0},
    ]  # fmt: skip
    out = quantile_table(pa.Table.from_pylist(rows, ARROW_SCHEMA), [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS)
    got = {o["broker"]: o for o in out.to_pylist()}
    assert (got[1]["count"], got[1]["p99_ms"], got[1]["mean_ms"], got[1]["logged"]) == (None, None, None, 2)
    assert (got[2]["count"], got[2]["p50_ms"], got[2]["mean_ms"], got[2]["logged"]) == (
        3,
        quantile_from_buckets(1, [(20, 2)], 0.5),
        None,
        3,
    )
    assert (got[3]["count"], got[3]["p999_ms"], got[3]["mean_ms"], got[3]["logged"]) == (2, 0.0, 0.5, 0)
    # Cluster row: zeros 1 + 2 (the null ignored), buckets {10: 3, 20: 2}, sums 5 + 1.
    assert (got[None]["count"], got[None]["mean_ms"], got[None]["logged"]) == (8, 6.0 / 8, 5)
    assert got[None]["p99_ms"] == quantile_from_buckets(3, [(10, 3), (20, 2)], 0.99)


# --- Spark ------------------------------------------------------------------------------------


# Each example is a Spark job, and a job's fixed cost is most of its time; so one example holds
# CELL_SETS_PER_EXAMPLE independent cell lists, each in its own four windows (every row is keyed
# by its window, per broker and cluster-wide), checked in one job.
CELL_SETS_PER_EXAMPLE = 3


def side_by_side(cell_sets: list[list[tuple]]) -> list[tuple]:
    """The cell lists one after the other in time: list ``k``'s window ``w`` becomes ``4k + w``."""
    return [(b, 4 * k + w, *rest) for k, cells in enumerate(cell_sets) for b, w, *rest in cells]


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.lists(st.lists(cell, max_size=25), min_size=CELL_SETS_PER_EXAMPLE, max_size=CELL_SETS_PER_EXAMPLE))
def test_stage_windows_follow_the_plain_rule(spark: SparkSession, cell_sets: list[list[tuple]]) -> None:
    recs = records(side_by_side(cell_sets))
    assert_rows(stage_windows(typed(spark, recs), WINDOW_S), both_levels(recs), STAGE_DIMS)


def test_edge_shapes(spark: SparkSession) -> None:
    """One broker; only empty sketches; only zeros; windows some brokers miss; several sketches
    of one broker in one window; bucket maps in descending key order."""
    cells = [
        (0, 0, "Produce", "total", 0, [], False),
        (0, 1, "Produce", "total", 0, [0.0, -3.0, 0.0], False),
        (0, 2, "Produce", "total", 0, [1.0, 2.0, 500.0], True),
        (0, 2, "Produce", "total", 3_000, [0.0, 2.0, 7_000.0], False),
        (1, 2, "Produce", "total", 0, [0.5, 40.0], True),
        (2, 3, "Produce", "total", 0, [], False),
        (2, 3, "FetchConsumer", "local", 0, [0.0], False),
    ]
    recs = records(cells)
    sketches = typed(spark, recs)
    assert assert_rows(stage_windows(sketches, WINDOW_S), both_levels(recs), STAGE_DIMS) == 6 + 5
    assert stage_windows(sketches.limit(0), WINDOW_S).count() == 0


def test_several_racks_and_the_cluster_in_one_pass(spark: SparkSession) -> None:
    """Levels are any groupings: per broker, per rack and over the cluster, one shuffle."""
    cells = [
        (b, w, "Produce", "total", 0, [float(b + 1) * (i + 1) for i in range(10 + b)], b % 2 == 0)
        for b in range(6)
        for w in range(3)
        if (b, w) != (4, 1)  # a window one broker missed
    ]
    recs = records(cells)
    rack = (F.col("broker") % 3).alias("rack")
    base = typed(spark, recs).select(
        "broker", rack, "request", "stage", tf.window_start("ts_ms", WINDOW_S).alias("window_start_ms"),
        *sketch_columns(), "capture_ratio",
    )  # fmt: skip
    dims = ["broker", "rack", "request", "stage", "window_start_ms"]
    per = ["request", "stage", "window_start_ms"]
    levels = [["broker", "rack", *per], ["rack", *per], per]
    out = merged_quantiles(base, dims, levels, per).cache()
    try:
        by_rack = out.where(F.col("broker").isNull() & F.col("rack").isNotNull())
        assert assert_rows(by_rack, expected(recs, dims, ["rack", *per]), dims) == 9
        by_broker = out.where(F.col("broker").isNotNull())
        assert assert_rows(by_broker, expected(recs, dims, levels[0]), dims) == 17
        cluster = out.where(F.col("rack").isNull())
        assert assert_rows(cluster, expected(recs, dims, per), dims) == 3
    finally:
        out.unpersist()


def test_shuffle_keys_must_lie_within_every_level(spark: SparkSession) -> None:
    base = typed(spark, records([(0, 0, "Produce", "total", 0, [1.0], False)]))
    with pytest.raises(ValueError, match="not within level"):
        merged_quantiles(base, STAGE_DIMS, [STAGE_DIMS[1:]], ["broker"])
