"""The sketch transforms of the Spark path: sketch rows merged per group by the one
implementation of the arithmetic, :func:`aggregation.sketch_math.merge`, over Arrow batches —
one Python call per Spark partition (``mapInArrow``).

* :func:`stage_windows` — StageSketch records → per-broker and cluster-wide rows (the columns of
  :class:`linkwatch.aggregates.StageWindow`; ``broker`` null for the cluster row), one pass.
* :func:`probe_windows` — ProbeSample records → per leader broker and window (the columns of
  :class:`linkwatch.aggregates.ProbeBrokerWindow`).
* :func:`merged_quantiles` — the Spark wrapper both use: shuffles sketch rows (not bucket rows)
  so each coarsest group sits in one partition, then ``mapInArrow``.
* :func:`quantile_table` / :func:`quantile_batches` — Arrow sketch rows → Arrow result rows, at
  one or more grouping levels (e.g. per broker and over all brokers) in one pass.

Arrow's nulls become the validity masks of :class:`~aggregation.sketch_math.SketchRows`, so the
results follow Spark's ``SUM`` (see :mod:`aggregation.sketch_math`).

Why not exploding the bucket maps in Spark SQL: that turns every bucket into a row carrying all
its dimensions (40× the sketch rows for a typical sketch) and shuffles, sorts and windows those
rows; here a sketch row crosses the shuffle once with its buckets as two arrays, and the merge is
a sort and a few cumulative sums over flat int64 arrays.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from aggregation.sketch_math import (
    NONZERO_QUANTILES,
    PROBE_QUANTILES,
    QUANTILES,
    ROW_TOTALS,
    SketchRows,
    merge,
)
from spark_metrics.transforms import window_start

STAGE_DIMS = ["broker", "request", "stage", "window_start_ms"]
PROBE_DIMS = ["broker", "window_start_ms"]
# Input columns besides the dimensions (see merged_quantiles); ``capture_ratio`` optional.
SKETCH_COLUMNS = ["zero", "sum_ms", "keys", "counts"]
RATIO_COLUMN = "capture_ratio"


# --- Arrow ------------------------------------------------------------------------------------


def _group_ids(table: pa.Table, dims: Sequence[str]) -> tuple[np.ndarray, int, np.ndarray]:
    """(group id per row, number of groups, first row of each group); groups numbered in the
    order of their dimension values, nulls included as a value of their own."""
    code = np.zeros(table.num_rows, dtype=np.int64)
    for dim in dims:
        col = table.column(dim)
        encoded = pc.dictionary_encode(col).combine_chunks()
        # Null dimension values get their own code (Spark's GROUP BY keeps them as a group).
        idx = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        # Order codes by value so groups come out sorted (stable, testable order).
        rank_of = np.argsort(pc.array_sort_indices(encoded.dictionary).to_numpy())
        ranked = np.where(idx < 0, 0, rank_of[np.maximum(idx, 0)] + 1) if len(rank_of) else idx + 1
        code = code * (len(rank_of) + 1) + ranked
        _, code = np.unique(code, return_inverse=True)
    uniq, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    return inverse.astype(np.int64), len(uniq), first


def _flat(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(lengths per row, flat values, valid per row) of a list column; a null list is empty,
    a null item 0."""
    col = table.column(name).combine_chunks()
    lengths = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths, values, col.is_valid().to_numpy(zero_copy_only=False)


def _numbers(table: pa.Table, name: str, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    col = table.column(name).combine_chunks()
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return col.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype), valid


def sketch_rows(table: pa.Table) -> SketchRows:
    """The :data:`SKETCH_COLUMNS` (and ``capture_ratio``, a null read as 1.0) of Arrow rows."""
    zero, zero_valid = _numbers(table, "zero", np.int64)
    sum_ms, sum_valid = _numbers(table, "sum_ms", np.float64)
    lengths, keys, buckets_valid = _flat(table, "keys")
    count_lengths, counts, _ = _flat(table, "counts")
    if not np.array_equal(lengths, count_lengths):
        raise ValueError("keys and counts differ in length on some row")
    ratio = None
    if RATIO_COLUMN in table.column_names:
        col = table.column(RATIO_COLUMN).combine_chunks()
        ratio = col.fill_null(1.0).to_numpy(zero_copy_only=False).astype(np.float64)
    totals = {name: _numbers(table, name, np.int64)[0] for name in ROW_TOTALS if name in table.column_names}
    return SketchRows(
        zero, zero_valid, sum_ms, sum_valid, lengths, keys, counts, buckets_valid, ratio, totals or None
    )


def quantile_table(
    table: pa.Table,
    levels: Sequence[Sequence[str]],
    dims: Sequence[str],
    quantiles: dict[str, float] = QUANTILES,
    nonzero_quantiles: dict[str, float] = NONZERO_QUANTILES,
) -> pa.Table:
    """Sketch rows (``dims`` + :data:`SKETCH_COLUMNS`, optionally ``capture_ratio`` and the
    :data:`~aggregation.sketch_math.ROW_TOTALS`) → result rows for every level, a level being the
    dimensions it groups by (the others are null in its rows): ``dims``, ``count``, ``logged``
    (with a capture ratio), the quantiles, ``mean_ms``, the row totals (with them)."""
    rows = sketch_rows(table)
    out = []
    for level in levels:
        group, n_groups, first = _group_ids(table, level)
        m = merge(rows, group, n_groups, quantiles, nonzero_quantiles)
        cols = {}
        picked = table.take(pa.array(first))
        for d in dims:
            cols[d] = picked.column(d) if d in level else pa.nulls(n_groups, table.schema.field(d).type)
        cols["count"] = pa.array(m.count, pa.int64(), mask=~m.count_valid)
        if m.logged is not None:
            cols["logged"] = pa.array(m.logged, pa.int64())
        for name, (value, valid) in m.quantiles.items():
            cols[name] = pa.array(value, pa.float64(), mask=~valid)
        cols["mean_ms"] = pa.array(m.mean, pa.float64(), mask=~m.mean_valid)
        for name, value in (m.totals or {}).items():
            cols[name] = pa.array(value, pa.int64())
        out.append(pa.table(cols))
    return pa.concat_tables(out)


def quantile_batches(
    batches: Iterator[pa.RecordBatch],
    levels: Sequence[Sequence[str]],
    dims: Sequence[str],
    quantiles: dict[str, float] = QUANTILES,
    nonzero_quantiles: dict[str, float] = NONZERO_QUANTILES,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the whole partition at once (a group never spans partitions)."""
    got = list(batches)
    table = pa.Table.from_batches(got) if got else None
    if table is not None and table.num_rows:
        yield from quantile_table(table, levels, dims, quantiles, nonzero_quantiles).to_batches()


# --- Spark ------------------------------------------------------------------------------------


def merged_quantiles(
    base: DataFrame,
    dims: Sequence[str],
    levels: Sequence[Sequence[str]],
    shuffle_by: Sequence[str],
    quantiles: dict[str, float] = QUANTILES,
    nonzero_quantiles: dict[str, float] = NONZERO_QUANTILES,
) -> DataFrame:
    """``base``: ``dims`` columns, :data:`SKETCH_COLUMNS` (``keys`` array<int>, ``counts``
    array<long>, one element per bucket) and optionally ``capture_ratio``. Returns ``dims`` +
    count, logged (with ``capture_ratio``), the quantiles and mean per group of each level.
    ``shuffle_by`` must be a subset of every level (so each group is whole in one partition)."""
    for level in levels:
        if not set(shuffle_by) <= set(level):
            raise ValueError(f"shuffle_by {list(shuffle_by)} is not within level {list(level)}")
    logged = RATIO_COLUMN in base.columns
    totals = [name for name in ROW_TOTALS if name in base.columns]
    fields = [base.schema[d] for d in dims]
    schema = T.StructType(
        [T.StructField(f.name, f.dataType, True) for f in fields]
        + [T.StructField("count", T.LongType(), True)]
        + ([T.StructField("logged", T.LongType(), False)] if logged else [])
        + [T.StructField(n, T.DoubleType(), True) for n in [*quantiles, *nonzero_quantiles, "mean_ms"]]
        + [T.StructField(n, T.LongType(), False) for n in totals]
    )
    dims_, levels_ = list(dims), [list(lv) for lv in levels]
    q, nz = dict(quantiles), dict(nonzero_quantiles)
    inputs = [*dims_, *SKETCH_COLUMNS, *([RATIO_COLUMN] if logged else []), *totals]
    # AQE may coalesce these partitions but never splits one, so a group stays whole.
    shuffled = base.select(*inputs).repartition(*shuffle_by)
    return shuffled.mapInArrow(lambda it: quantile_batches(it, levels_, dims_, q, nz), schema)


def sketch_columns(sketch: str = "sketch", null_as_empty: bool = False) -> list[Column]:
    """The sketch struct column → :data:`SKETCH_COLUMNS` (bucket keys, JSON strings, as ints).
    ``null_as_empty``: a missing zero count or sum reads 0 (a sketch that is ``{}``: empty)."""
    zero, total = F.col(f"{sketch}.zero"), F.col(f"{sketch}.sum")
    if null_as_empty:
        zero, total = F.coalesce(zero, F.lit(0).cast("long")), F.coalesce(total, F.lit(0.0))
    return [
        zero.alias("zero"),
        total.alias("sum_ms"),
        F.map_keys(f"{sketch}.buckets").cast("array<int>").alias("keys"),
        F.map_values(f"{sketch}.buckets").alias("counts"),
    ]


def stage_windows(sketches: DataFrame, window_s: int) -> DataFrame:
    """StageSketch records → one row per (broker, request, stage, window) with count, logged
    requests, p50/p99/p999, the p99 of the values above zero and mean in ms, and one per
    (request, stage, window) over all brokers (``broker`` null): the columns of
    :class:`linkwatch.aggregates.StageWindow`, both levels in one pass."""
    base = sketches.select(
        F.col("broker"),
        F.col("request"),
        F.col("stage"),
        window_start("ts_ms", window_s).alias("window_start_ms"),
        *sketch_columns(),
        F.col("capture_ratio"),
        *(F.coalesce(F.col(name), F.lit(0)).cast("long").alias(name) for name in ROW_TOTALS),
    )
    return merged_quantiles(base, STAGE_DIMS, [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS[1:])


def _probe_quantiles(base: DataFrame, column: str) -> DataFrame:
    """p50/p99 of one sketch column of probe samples merged per (broker, window). A sketch that
    is ``{}`` or absent (commit_latency of a broker coordinating no commit, or of an older
    writer) counts as empty, so its quantiles are null."""
    rows = base.select(*PROBE_DIMS, *sketch_columns(column, null_as_empty=True))
    q = merged_quantiles(rows, PROBE_DIMS, [PROBE_DIMS], PROBE_DIMS, PROBE_QUANTILES, {})
    return q.select(*PROBE_DIMS, *(F.col(n).alias(f"{column}_{n}") for n in PROBE_QUANTILES))


def probe_windows(samples: DataFrame, window_s: int) -> DataFrame:
    """ProbeSample records → per (leader broker, window): probes sent, ok, decided, availability,
    p50/p90/p99 of produce and end-to-end latency and p99 of the commits this broker coordinated,
    from the merged sketches (columns of :class:`linkwatch.aggregates.ProbeBrokerWindow`).
    Availability is summed counts' ratio, never an average of ratios."""
    base = samples.select(
        "broker",
        window_start("ts_ms", window_s).alias("window_start_ms"),
        "sent",
        "ok",
        F.aggregate(F.map_values("unavailable"), F.lit(0).cast("long"), lambda acc, x: acc + x).alias("bad"),
        "produce",
        "end_to_end",
        "commit_latency",
    )
    counts = base.groupBy(*PROBE_DIMS).agg(
        F.sum("sent").alias("sent"), F.sum("ok").alias("ok"), F.sum("bad").alias("bad")
    )
    decided = F.col("ok") + F.col("bad")
    out = (
        counts.join(_probe_quantiles(base, "produce"), PROBE_DIMS, "left")
        .join(_probe_quantiles(base, "end_to_end"), PROBE_DIMS, "left")
        .join(_probe_quantiles(base, "commit_latency"), PROBE_DIMS, "left")
        .withColumn("decided", decided)
    )
    return out.select(
        F.col("broker").cast("long").alias("broker"),
        "window_start_ms",
        F.col("sent").cast("long").alias("sent"),
        F.col("ok").cast("long").alias("ok"),
        F.col("decided").cast("long").alias("decided"),
        F.when(F.col("decided") > 0, F.col("ok") / F.col("decided")).cast("double").alias("availability"),
        "produce_p50_ms",
        "produce_p99_ms",
        "end_to_end_p50_ms",
        "end_to_end_p99_ms",
        F.col("commit_latency_p99_ms").alias("commit_p99_ms"),
        "produce_p90_ms",
        "end_to_end_p90_ms",
    )
