"""The vectorised sketch merge (:mod:`spark_metrics.sketch_merge`) against the exploding path it
replaces (:func:`spark_metrics.transforms.stage_quantiles` and
:func:`~spark_metrics.transforms.cluster_quantiles`, kept as the reference): equal to 1e-9
relative on every row, on generated record sets and on sketches the agent builds from the
committed request-log captures.

The numpy core is also checked without Spark against :func:`linkwatch.sketch.quantile_from_buckets`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from agent.health import Health
from agent.requestlog.parse import LineParser
from agent.requestlog.source import ingest_lines
from agent.requestlog.window import WindowAggregator
from linkwatch import records as R
from linkwatch.aggregates import NONZERO_QUANTILES, QUANTILES, StageWindow
from linkwatch.sketch import LatencySketch, quantile_from_buckets
from spark_metrics import sketch_merge
from spark_metrics import transforms as tf
from spark_metrics.aggregate import aggregate, collect
from spark_metrics.sketch_merge import (
    STAGE_DIMS,
    merged_quantiles,
    quantile_table,
    sketch_columns,
    stage_windows,
)
from tests.spark_metrics.conftest import raw_frame

T0 = 1_700_000_000_000
WINDOW_S = 10
FIXTURES = Path(__file__).parents[1] / "agent" / "fixtures"
REL = 1e-9

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


def close(a: float | None, b: float | None) -> bool:
    """Equal to 1e-9 relative, or both None."""
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=REL))


def rows_by_key(df: DataFrame, dims: list[str]) -> dict[tuple, dict]:
    out: dict[tuple, dict] = {}
    for row in df.collect():
        d = row.asDict()
        key = tuple(d[k] for k in dims)
        assert key not in out, f"two rows for {key}"
        out[key] = d
    return out


def assert_same_rows(actual: DataFrame, expected: DataFrame, dims: list[str] = STAGE_DIMS) -> int:
    """Same keys; count and logged equal; quantiles and mean equal to 1e-9 relative (None
    where None)."""
    got, want = rows_by_key(actual, dims), rows_by_key(expected, dims)
    assert got.keys() == want.keys()
    for key, w in want.items():
        g = got[key]
        assert g["count"] == w["count"], key
        assert g["logged"] == w["logged"], key
        for name in [*QUANTILES, *NONZERO_QUANTILES, "mean_ms"]:
            assert close(g[name], w[name]), (key, name, g[name], w[name])
    return len(want)


def reference(sketches: DataFrame) -> DataFrame:
    return tf.stage_quantiles(sketches, WINDOW_S).unionByName(tf.cluster_quantiles(sketches, WINDOW_S))


def typed(spark: SparkSession, recs: list[R.StageSketch]) -> DataFrame:
    return tf.records_of(raw_frame(spark, recs), R.StageSketch)


# --- the numpy core, no Spark -----------------------------------------------------------------

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
    ]
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(cell, max_size=30))
def test_numpy_core_matches_the_python_reference(cells: list[tuple]) -> None:
    rows = [
        {
            "broker": r.broker,
            "request": r.request,
            "stage": r.stage,
            "window_start_ms": r.ts_ms // 10_000 * 10_000,
            "zero": r.sketch["zero"],
            "sum_ms": r.sketch["sum"],
            "keys": [int(k) for k in r.sketch["buckets"]],
            "counts": list(r.sketch["buckets"].values()),
        }
        for r in records(cells)
    ]
    table = pa.Table.from_pylist(rows, ARROW_SCHEMA)
    out = quantile_table(table, [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS)
    # The sort-based merge (used when a dense group × key table would be too large) agrees.
    saved = sketch_merge._DENSE_CELLS_MIN, sketch_merge._DENSE_CELLS_PER_ENTRY
    sketch_merge._DENSE_CELLS_MIN = sketch_merge._DENSE_CELLS_PER_ENTRY = 0
    try:
        assert quantile_table(table, [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS).equals(out)
    finally:
        sketch_merge._DENSE_CELLS_MIN, sketch_merge._DENSE_CELLS_PER_ENTRY = saved
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r[d] for d in STAGE_DIMS), []).append(r)
        groups.setdefault((None, *(r[d] for d in STAGE_DIMS[1:])), []).append(r)
    got = {tuple(o[d] for d in STAGE_DIMS): o for o in out.to_pylist()}
    assert got.keys() == groups.keys()
    for key, members in groups.items():
        zero = sum(m["zero"] for m in members)
        pairs = [(k, c) for m in members for k, c in zip(m["keys"], m["counts"], strict=True)]
        count = zero + sum(c for _, c in pairs)
        assert got[key]["count"] == count
        for name, q in QUANTILES.items():
            want = quantile_from_buckets(zero, pairs, q)
            assert close(got[key][name], want), (key, name, got[key][name], want)
        for name, q in NONZERO_QUANTILES.items():  # the values above zero alone
            want = quantile_from_buckets(0, pairs, q)
            assert close(got[key][name], want), (key, name, got[key][name], want)
        mean = sum(m["sum_ms"] for m in members) / count if count else None
        assert close(got[key]["mean_ms"], mean), key


def test_numpy_core_null_fields_follow_spark_sums() -> None:
    """A null zero count (all rows of the group) makes count and quantiles null; a null bucket
    count adds nothing; a null bucket map is no buckets."""
    rows = [
        {"broker": 1, "request": "P", "stage": "t", "window_start_ms": 0, "zero": None, "sum_ms": 5.0,
         "keys": [10], "counts": [3]},
        {"broker": 2, "request": "P", "stage": "t", "window_start_ms": 0, "zero": 1, "sum_ms": None,
         "keys": [10, 20], "counts": [None, 2]},
        {"broker": 3, "request": "P", "stage": "t", "window_start_ms": 0, "zero": 2, "sum_ms": 1.0,
         "keys": None, "counts": None},
    ]  # fmt: skip
    out = quantile_table(pa.Table.from_pylist(rows, ARROW_SCHEMA), [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS)
    got = {o["broker"]: o for o in out.to_pylist()}
    assert (got[1]["count"], got[1]["p99_ms"], got[1]["mean_ms"]) == (None, None, None)
    assert (got[2]["count"], got[2]["p50_ms"], got[2]["mean_ms"]) == (
        3,
        quantile_from_buckets(1, [(20, 2)], 0.5),
        None,
    )
    assert (got[3]["count"], got[3]["p999_ms"], got[3]["mean_ms"]) == (2, 0.0, 0.5)
    # Cluster row: zeros 1 + 2 (the null ignored), buckets {10: 3, 20: 2}, sums 5 + 1.
    assert (got[None]["count"], got[None]["mean_ms"]) == (8, 6.0 / 8)
    assert got[None]["p99_ms"] == quantile_from_buckets(3, [(10, 3), (20, 2)], 0.99)


def spark_rule(zero: int, pairs: list[tuple[int, int]], q: float) -> float | None:
    """The exploding path's rule written out for any counts: the first key (ascending) whose
    cumulative count after the zeros passes the rank, None when none does."""
    merged: dict[int, int] = {}
    for k, c in pairs:
        merged[k] = merged.get(k, 0) + c
    count = zero + sum(merged.values())
    rank = math.floor(q * (count - 1))
    if count == 0:
        return None
    if rank < zero:
        return 0.0
    seen = zero
    for k in sorted(merged):
        seen += merged[k]
        if seen > rank:
            return sketch_merge.key_to_value(np.array([k]))[0]
    return None


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2), st.integers(0, 3), st.lists(st.tuples(st.integers(-5, 5), st.integers(-3, 6)))
        ),
        min_size=1,
        max_size=8,
    )
)
def test_numpy_core_follows_the_rule_for_any_counts(rows: list[tuple]) -> None:
    """Counts the sketch never writes (negative, zero) still follow the exploding path's rule."""
    table = pa.Table.from_pylist(
        [
            {"broker": 0, "request": "P", "stage": "t", "window_start_ms": w, "zero": z, "sum_ms": 1.0,
             "keys": [k for k, _ in b], "counts": [c for _, c in b]}
            for w, z, b in rows
        ],
        ARROW_SCHEMA,
    )  # fmt: skip
    got = {o["window_start_ms"]: o for o in quantile_table(table, [STAGE_DIMS], STAGE_DIMS).to_pylist()}
    for w in {r[0] for r in rows}:
        zero = sum(z for w2, z, _ in rows if w2 == w)
        pairs = [p for w2, _, b in rows if w2 == w for p in b]
        for name, q in QUANTILES.items():
            assert close(got[w][name], spark_rule(zero, pairs, q)), (w, name)
        above = sum(c for _, c in pairs)
        for name, q in NONZERO_QUANTILES.items():
            assert close(got[w][name], spark_rule(0, pairs, q) if above > 0 else None), (w, name)


# --- Spark: the new path against the exploding one --------------------------------------------


# Each example is a Spark job, and a job's fixed cost is most of its time; so one example holds
# CELL_SETS_PER_EXAMPLE independent cell lists, each in its own four windows (every row is keyed
# by its window, per broker and cluster-wide), checked in one job.
CELL_SETS_PER_EXAMPLE = 3


def side_by_side(cell_sets: list[list[tuple]]) -> list[tuple]:
    """The cell lists one after the other in time: list ``k``'s window ``w`` becomes ``4k + w``."""
    return [(b, 4 * k + w, *rest) for k, cells in enumerate(cell_sets) for b, w, *rest in cells]


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.lists(st.lists(cell, max_size=25), min_size=CELL_SETS_PER_EXAMPLE, max_size=CELL_SETS_PER_EXAMPLE))
def test_stage_windows_equal_the_exploding_path(spark: SparkSession, cell_sets: list[list[tuple]]) -> None:
    sketches = typed(spark, records(side_by_side(cell_sets))).cache()
    try:
        assert_same_rows(stage_windows(sketches, WINDOW_S), reference(sketches))
    finally:
        sketches.unpersist()


def test_edge_shapes_equal_the_exploding_path(spark: SparkSession) -> None:
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
    sketches = typed(spark, records(cells))
    assert assert_same_rows(stage_windows(sketches, WINDOW_S), reference(sketches)) == 6 + 5
    assert stage_windows(sketches.limit(0), WINDOW_S).count() == 0


def test_several_racks_and_the_cluster_in_one_pass(spark: SparkSession) -> None:
    """Levels are any groupings: per broker, per rack and over the cluster, one shuffle. Each
    level equals the exploding path on the same grouping (rack put in the broker column)."""
    cells = [
        (b, w, "Produce", "total", 0, [float(b + 1) * (i + 1) for i in range(10 + b)], b % 2 == 0)
        for b in range(6)
        for w in range(3)
        if (b, w) != (4, 1)  # a window one broker missed
    ]
    sketches = typed(spark, records(cells))
    rack = (F.col("broker") % 3).alias("rack")
    base = sketches.select(
        "broker", rack, "request", "stage", tf.window_start("ts_ms", WINDOW_S).alias("window_start_ms"),
        *sketch_columns(), tf.logged_requests().alias("logged"),
    )  # fmt: skip
    dims = ["broker", "rack", "request", "stage", "window_start_ms"]
    per = ["request", "stage", "window_start_ms"]
    levels = [["broker", "rack", *per], ["rack", *per], per]
    out = merged_quantiles(base, dims, levels, per, ["logged"]).cache()
    try:
        by_rack = out.where(F.col("broker").isNull() & F.col("rack").isNotNull()).drop("broker")
        as_broker = sketches.withColumn("broker", F.col("broker") % 3)
        racks = tf.stage_quantiles(as_broker, WINDOW_S).withColumnRenamed("broker", "rack")
        assert assert_same_rows(by_rack, racks, ["rack", *per]) == 9
        by_broker = out.where(F.col("broker").isNotNull()).drop("rack")
        cluster = out.where(F.col("rack").isNull()).drop("rack")
        assert assert_same_rows(by_broker.unionByName(cluster), reference(sketches)) == 17 + 3
    finally:
        out.unpersist()


def test_shuffle_keys_must_lie_within_every_level(spark: SparkSession) -> None:
    base = typed(spark, records([(0, 0, "Produce", "total", 0, [1.0], False)]))
    with pytest.raises(ValueError, match="not within level"):
        merged_quantiles(base, STAGE_DIMS, [STAGE_DIMS[1:]], ["broker"])


def fixture_sketches() -> list[R.StageSketch]:
    """The agent's own windows (2 s) over both committed captures, as brokers 1 and 2."""
    out = []
    for broker, name in ((1, "kafka-request.log"), (2, "kafka-request-kraft.log")):
        agg = WindowAggregator(cluster="c1", broker=broker, window_s=2)
        lines = (FIXTURES / name).read_bytes().splitlines()
        out += [
            s for w in ingest_lines(lines, LineParser(), agg, Health()) + agg.close_all() for s in w.sketches
        ]
    return out


def test_committed_fixtures_equal_the_exploding_path(spark: SparkSession) -> None:
    recs = fixture_sketches()
    assert len({r.broker for r in recs}) == 2 and len(recs) > 100
    sketches = typed(spark, recs)
    n = assert_same_rows(stage_windows(sketches, 2), _reference_at(sketches, 2))
    assert n > 100


def _reference_at(sketches: DataFrame, window_s: int) -> DataFrame:
    return tf.stage_quantiles(sketches, window_s).unionByName(tf.cluster_quantiles(sketches, window_s))


def test_aggregate_collects_both_stage_levels_from_one_frame(spark: SparkSession) -> None:
    """What the analyzer reads: per-broker and cluster rows, as the exploding path gives them."""
    recs = fixture_sketches()
    raw = raw_frame(spark, recs)
    data = collect(aggregate(raw, 2, cluster="c1"), "c1", 2)
    want = {
        tuple(r[d] for d in STAGE_DIMS): StageWindow(**r.asDict())
        for r in _reference_at(tf.dedup(tf.records_of(raw, R.StageSketch, "c1")), 2).collect()
    }
    got = {
        (r.broker, r.request, r.stage, r.window_start_ms): r for r in data.broker_stages + data.cluster_stages
    }
    assert got.keys() == want.keys()
    assert {r.broker for r in data.cluster_stages} == {None}
    for key, w in want.items():
        g = got[key]
        assert (g.count, g.logged) == (w.count, w.logged)
        for name in [*QUANTILES, *NONZERO_QUANTILES, "mean_ms"]:
            assert close(getattr(g, name), getattr(w, name)), (key, name)
