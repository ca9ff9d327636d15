"""The one implementation of the sketch arithmetic (:mod:`aggregation.sketch_math`) without Spark:
against the plain rule (:mod:`tests.aggregation.reference`) on generated sketches, for counts of
any sign, with Spark's null semantics, in any row order, by both merge strategies."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation import sketch_math
from aggregation.sketch_math import (
    NONZERO_QUANTILES,
    QUANTILES,
    Merged,
    SketchRows,
    key_to_value,
    logged_requests,
    merge,
)
from linkwatch import sketch
from linkwatch.sketch import LatencySketch
from tests.aggregation.reference import close, merged_row, quantile_from_buckets

# Latencies as the agents see them: exact zeros, negatives and sub-microsecond values (all
# counted as zero by the sketch), ordinary and very large times.
latency = st.one_of(
    st.sampled_from([0.0, -1.0, 0.0005, 1.0, 300.0]),
    st.floats(min_value=-10.0, max_value=0.01),
    st.floats(min_value=0.001, max_value=3.6e6),
)
# (group, values, capture ratio, reverse bucket order)
sketch_cell = st.tuples(
    st.integers(0, 5),
    st.lists(latency, max_size=25),
    st.sampled_from([1.0, 0.5, 1 / 6, 0.3]),
    st.booleans(),
)
COLUMNS = ["count", "logged", *QUANTILES, *NONZERO_QUANTILES, "mean_ms"]


def sketch_dict(values: list[float], reverse: bool = False) -> dict:
    sk = LatencySketch()
    for v in values:
        sk.add(v)
    d = sk.to_dict()
    if reverse:  # map order as another writer might send it
        d["buckets"] = dict(reversed(list(d["buckets"].items())))  # type: ignore[union-attr]
    return d


def rows_of(sketches: list[dict], ratios: list[float]) -> SketchRows:
    return SketchRows.of(
        [
            (
                d["zero"],
                d["sum"],
                np.array([int(k) for k in d["buckets"]], np.int64),
                np.array(list(d["buckets"].values()), np.int64),
            )
            for d in sketches
        ],
        ratios,
    )


def as_rows(m: Merged) -> list[dict]:
    cols = {name: m.values(name) for name in COLUMNS}
    return [dict(zip(COLUMNS, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]


def assert_rows_close(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g["count"], g["logged"]) == (w["count"], w["logged"]), (g, w)
        for name in COLUMNS[2:]:
            assert close(g[name], w[name]), (name, g, w)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(st.lists(sketch_cell, min_size=1, max_size=30))
def test_merge_follows_the_plain_rule(cells: list[tuple]) -> None:
    sketches = [sketch_dict(values, rev) for _, values, _, rev in cells]
    ratios = [ratio for _, _, ratio, _ in cells]
    ids = sorted({g for g, *_ in cells})
    group = np.array([ids.index(g) for g, *_ in cells])
    got = as_rows(merge(rows_of(sketches, ratios), group, len(ids)))
    want = [
        merged_row([(s, r) for (g, *_), s, r in zip(cells, sketches, ratios, strict=True) if g == gid])
        for gid in ids
    ]
    assert_rows_close(got, want)


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(sketch_cell, min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_row_order_and_merge_strategy_do_not_change_the_result(
    cells: list[tuple], rnd: random.Random
) -> None:
    """Rows in any order give the same groups; the sort-based merge (used when a dense
    group × key table would be too large) gives what the dense one gives."""
    sketches = [sketch_dict(values, rev) for _, values, _, rev in cells]
    ratios = [ratio for _, _, ratio, _ in cells]
    group = np.array([g for g, *_ in cells])
    ids, group = np.unique(group, return_inverse=True)
    want = as_rows(merge(rows_of(sketches, ratios), group, len(ids)))
    order = list(range(len(cells)))
    rnd.shuffle(order)
    shuffled = rows_of([sketches[i] for i in order], [ratios[i] for i in order])
    assert_rows_close(as_rows(merge(shuffled, group[order], len(ids))), want)
    saved = sketch_math._DENSE_CELLS_MIN, sketch_math._DENSE_CELLS_PER_ENTRY
    sketch_math._DENSE_CELLS_MIN = sketch_math._DENSE_CELLS_PER_ENTRY = 0
    try:
        assert_rows_close(as_rows(merge(shuffled, group[order], len(ids))), want)
    finally:
        sketch_math._DENSE_CELLS_MIN, sketch_math._DENSE_CELLS_PER_ENTRY = saved


def counted_rule(zero: int, pairs: list[tuple[int, int]], q: float) -> float | None:
    """The rule written out for any counts: the first key (ascending) whose cumulative count
    after the zeros passes the rank, None when none does."""
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
            return float(key_to_value(np.array([k]))[0])
    return None


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3), st.integers(-2, 3), st.lists(st.tuples(st.integers(-5, 5), st.integers(-3, 6)))
        ),
        min_size=1,
        max_size=8,
    )
)
def test_counts_of_any_sign_follow_the_rule(rows: list[tuple]) -> None:
    """Counts the sketch never writes (negative, zero) still follow the rule."""
    ids = sorted({g for g, _, _ in rows})
    sketch_rows = SketchRows.of(
        [
            (z, 1.0, np.array([k for k, _ in b], np.int64), np.array([c for _, c in b], np.int64))
            for _, z, b in rows
        ]
    )
    m = merge(sketch_rows, np.array([ids.index(g) for g, _, _ in rows]), len(ids))
    for i, g in enumerate(ids):
        zero = sum(z for g2, z, _ in rows if g2 == g)
        pairs = [p for g2, _, b in rows if g2 == g for p in b]
        for name, q in QUANTILES.items():
            assert close(m.values(name)[i], counted_rule(zero, pairs, q)), (g, name)
        above = sum(c for _, c in pairs)
        for name, q in NONZERO_QUANTILES.items():
            assert close(m.values(name)[i], counted_rule(0, pairs, q) if above > 0 else None), (g, name)


def test_null_fields_follow_spark_sums() -> None:
    """A null zero count in every row of a group makes its count and quantiles null; a null sum
    adds nothing (all null: a null mean); a null bucket map is no buckets and no logged requests."""
    rows = SketchRows(
        zero=np.array([0, 1, 2, 4]),  # row 3's 4 is behind a null: never read
        zero_valid=np.array([False, True, True, False]),
        sum_ms=np.array([5.0, 0.0, 1.0, 2.0]),
        sum_valid=np.array([True, False, True, True]),
        lengths=np.array([1, 2, 0, 1]),
        keys=np.array([10, 10, 20, 30]),
        counts=np.array([3, 0, 2, 1]),  # row 1's first count was null: passed as 0
        buckets_valid=np.array([True, True, False, True]),
        capture_ratio=np.array([1.0, 1.0, 1.0, 0.5]),
    )
    # groups: each row alone (0-3), then rows 0-2 together, then all four
    alone = merge(rows, np.arange(4), 4)
    assert alone.values("count") == [None, 3, 2, None]
    assert alone.values("p99_ms")[0] is None and alone.values("mean_ms") == [None, None, 0.5, None]
    assert alone.values("p50_ms")[1] == quantile_from_buckets(1, [(20, 2)], 0.5)
    assert alone.values("logged") == [3, 3, 0, 1]  # row 3: its null zero adds nothing, floor(1 × 0.5 + 0.5)
    together = merge(rows, np.array([0, 0, 0, 1]), 2)
    # Group 0: zeros 1 + 2 (the null ignored), buckets {10: 3, 20: 2}, sums 5 + 1.
    assert (together.values("count")[0], together.values("mean_ms")[0]) == (8, 6.0 / 8)
    assert together.values("p99_ms")[0] == quantile_from_buckets(3, [(10, 3), (20, 2)], 0.99)


@pytest.mark.parametrize(
    ("count", "ratio", "logged"),
    [
        (0, 1.0, 0),
        (6, 1 / 6, 1),  # one logged request scaled by 6
        (5, 0.5, 3),  # 2.5 rounds half up
        (7, 1 / 3, 2),  # 2.33… rounds down
        (10**12, 1.0, 10**12),
    ],
)
def test_logged_requests_round_half_up(count: int, ratio: float, logged: int) -> None:
    assert logged_requests(np.array([count]), np.array([ratio])).tolist() == [logged]
    assert logged == math.floor(count * ratio + 0.5)


def test_bucket_values_are_the_sketch_mapping() -> None:
    keys = np.arange(-2000, 2000)
    want = np.array([sketch.key_to_value(int(k)) for k in keys])
    np.testing.assert_allclose(key_to_value(keys), want, rtol=1e-12)


def test_no_rows_no_groups() -> None:
    m = merge(SketchRows.of([], []), np.zeros(0, np.int64), 0)
    assert as_rows(m) == []


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=30
    ),
    st.randoms(use_true_random=False),
)
def test_row_totals_are_summed_per_group_in_any_row_order(rows: list[tuple], rnd: random.Random) -> None:
    """``connections`` and ``saturated_connections`` beside each sketch: summed per group, as
    Spark's SUM, whatever order the rows come in."""
    ids, group = np.unique(np.array([g for g, _, _ in rows]), return_inverse=True)
    order = list(range(len(rows)))
    rnd.shuffle(order)
    totals = {
        "connections": [rows[i][1] for i in order],
        "saturated_connections": [rows[i][2] for i in order],
    }
    sketches = SketchRows.of(
        [(1, 1.0, np.zeros(0, np.int64), np.zeros(0, np.int64))] * len(rows), None, totals
    )
    m = merge(sketches, group[order], len(ids))
    for k, name in ((1, "connections"), (2, "saturated_connections")):
        want = [sum(r[k] for r in rows if r[0] == gid) for gid in ids]
        assert m.values(name) == want
    empty = merge(SketchRows.of([], None, {"connections": []}), np.zeros(0, np.int64), 0)
    assert empty.values("connections") == []
