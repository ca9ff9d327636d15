"""Sketch merge and quantiles over whole columns: numpy on Arrow buffers, one Python call per
Spark partition (``mapInArrow``) instead of one row per log bucket.

The arithmetic is :func:`spark_metrics.transforms._quantiles` (the reference, kept for the test
that compares the two): per group, sum the zero counts, the sums and the bucket counts per
log-bucket key; ``count = zero + Σ counts``; the quantile ``q`` is ``0.0`` when its rank
``floor(q · (count − 1))`` falls among the zeros, else the value of the first key (ascending)
whose cumulative count after the zeros passes the rank; ``None`` when the group saw nothing.
The nonzero quantiles read the same over the bucket counts alone (rank ``floor(q · (n − 1))`` of
the ``n = count − zero`` values above zero; ``None`` when ``n`` is 0).
Null semantics follow Spark's ``SUM``: a null bucket count adds nothing, and a group whose
zero counts are all null has a null count and null quantiles.

* :func:`merge_quantiles` — the numpy core: rows (each a sketch) with a group id → one result
  per group. It holds no Spark and no Arrow; the bench's numpy floor calls it directly.
* :func:`quantile_batches` — Arrow batches of sketch rows → Arrow batches of result rows, at
  one or more grouping levels (e.g. per broker and over all brokers) in one pass.
* :func:`merged_quantiles` — the Spark wrapper: shuffles sketch rows (not bucket rows) so each
  coarsest group sits in one partition, then ``mapInArrow``.
* :func:`stage_windows` — StageSketch records → per-broker and cluster-wide rows (the columns
  of :class:`linkwatch.aggregates.StageWindow`; ``broker`` null for the cluster row).

Why: the exploding path turns every bucket into a row carrying all its dimensions (40× the
sketch rows for a typical sketch) and shuffles, sorts and windows those rows; here a sketch
row crosses the shuffle once with its buckets as two arrays, and the merge is a sort and a
few cumulative sums over flat int64 arrays.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from linkwatch.aggregates import NONZERO_QUANTILES, QUANTILES
from linkwatch.sketch import _MAPPING

STAGE_DIMS = ["broker", "request", "stage", "window_start_ms"]
# Input columns besides the dimensions (see merged_quantiles).
SKETCH_COLUMNS = ["zero", "sum_ms", "keys", "counts"]

_NO_HIT = np.iinfo(np.int64).max


def key_to_value(keys: np.ndarray) -> np.ndarray:
    """numpy form of :func:`linkwatch.sketch.key_to_value` (same constants, same arithmetic as
    :func:`spark_metrics.transforms.key_to_value`)."""
    m = _MAPPING
    return np.power(2.0, (keys.astype(np.float64) - m._offset) / m._multiplier) * (2.0 / (1 + m.gamma))


@dataclass(frozen=True)
class Merged:
    """One entry per group; a False in ``valid`` means null (Spark's null)."""

    count: np.ndarray  # int64
    count_valid: np.ndarray  # bool
    quantiles: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (float64 value, valid)
    mean: np.ndarray  # float64
    mean_valid: np.ndarray  # bool


def merge_quantiles(
    group: np.ndarray,
    n_groups: int,
    zero: np.ndarray,
    zero_valid: np.ndarray,
    sum_ms: np.ndarray,
    sum_valid: np.ndarray,
    lengths: np.ndarray,
    keys: np.ndarray,
    counts: np.ndarray,
) -> Merged:
    """Merge sketch rows into ``n_groups`` groups and read count, quantiles and mean.

    Rows come sorted by ``group`` (ids ``0 … n_groups − 1``, each with at least one row). Per
    row: ``zero``/``sum_ms`` with validity masks (null values passed as 0), and ``lengths[i]``
    bucket entries laid end to end in ``keys``/``counts`` (a null count passed as 0).
    """
    group = group.astype(np.int64, copy=False)
    if n_groups == 0:
        none, no = np.zeros(0), np.zeros(0, dtype=bool)
        names = [*QUANTILES, *NONZERO_QUANTILES]
        return Merged(none.astype(np.int64), no, {n: (none, no) for n in names}, none, no)
    row_starts = np.searchsorted(group, np.arange(n_groups), side="left")
    zero_g = np.add.reduceat(np.where(zero_valid, zero, 0).astype(np.int64), row_starts)
    zero_ok = np.add.reduceat(zero_valid.astype(np.int64), row_starts) > 0
    # Spark adds the doubles in its own order; ours may differ in the last bit (inside 1e-9).
    sum_g = np.add.reduceat(np.where(sum_valid, sum_ms, 0.0), row_starts)
    sum_ok = np.add.reduceat(sum_valid.astype(np.int64), row_starts) > 0

    mkeys, mcounts, bounds = _merge_entries(
        group, n_groups, lengths, keys.astype(np.int64, copy=False), counts.astype(np.int64, copy=False)
    )
    # Group g's merged entries are [bounds[g], bounds[g + 1]), keys ascending.
    starts, ends = bounds[:-1], bounds[1:]
    prefix = np.concatenate([[0], np.cumsum(mcounts)])  # prefix[i]: counts before entry i
    before = prefix[starts]
    count = zero_g + (prefix[ends] - before)
    monotone = not len(mcounts) or mcounts.min() >= 0
    first_passing = _first_passing_sorted if monotone else _first_passing
    quantiles: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, q in QUANTILES.items():
        # Spark: FLOOR(q * (count - 1)) in doubles, a long; compared with zero + cum as longs.
        rank = np.floor(q * (count - 1).astype(np.float64)).astype(np.int64)
        in_zeros = rank < zero_g
        # The first merged entry (keys ascending) whose count after the zeros passes the rank.
        first = first_passing(prefix, before, rank - zero_g, starts, ends)
        hit = first < ends
        value = np.zeros(n_groups, dtype=np.float64)
        take = hit & ~in_zeros
        value[take] = key_to_value(mkeys[first[take]])
        quantiles[name] = (value, zero_ok & (count != 0) & (in_zeros | hit))
    above = count - zero_g  # the values above the zero bucket
    for name, q in NONZERO_QUANTILES.items():
        rank = np.floor(q * (above - 1).astype(np.float64)).astype(np.int64)
        first = first_passing(prefix, before, rank, starts, ends)
        hit = (first < ends) & (above > 0)
        value = np.zeros(n_groups, dtype=np.float64)
        value[hit] = key_to_value(mkeys[first[hit]])
        quantiles[name] = (value, zero_ok & hit)
    mean_valid = zero_ok & sum_ok & (count > 0)
    mean = np.divide(sum_g, count, out=np.zeros(n_groups), where=mean_valid)
    return Merged(count, zero_ok, quantiles, mean, mean_valid)


def _first_passing_sorted(
    prefix: np.ndarray, before: np.ndarray, need: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """Per group, the first entry ``i`` in ``[start, end)`` with ``prefix[i + 1] − before > need``
    (``ends`` where none), for non-negative counts: ``prefix`` is then non-decreasing, so one
    binary search over all groups at once. Groups with ``need < 0`` are not asked about (the
    rank lies among the zeros)."""
    pos = np.searchsorted(prefix[1:], before + need, side="right")
    return np.minimum(np.maximum(pos, starts), ends)


def _first_passing(
    prefix: np.ndarray, before: np.ndarray, need: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> np.ndarray:
    """The same for any counts (a negative count in bad data): one pass over every entry."""
    n_groups = len(starts)
    group = np.repeat(np.arange(n_groups), ends - starts)
    passes = (prefix[1:] - before[group]) > need[group]
    idx = np.where(passes, np.arange(len(group), dtype=np.int64), _NO_HIT)
    first = ends.copy()
    nonempty = ends > starts
    if len(group):
        first[nonempty] = np.minimum(np.minimum.reduceat(idx, starts[nonempty]), ends[nonempty])
    return first


# A dense (group × key) table is used for the merge while it holds at most this many cells
# per bucket entry (plus a fixed allowance); past it, a sort.
_DENSE_CELLS_PER_ENTRY = 4
_DENSE_CELLS_MIN = 1 << 20


def _merge_entries(
    group: np.ndarray, n_groups: int, lengths: np.ndarray, keys: np.ndarray, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Bucket entries sorted by (group, key), equal keys of a group summed: (keys, counts,
    bounds), group ``g``'s entries being ``[bounds[g], bounds[g + 1])``. Entries whose merged
    count is 0 may be left out: a bucket adding nothing to the cumulative count is never the
    first to pass a rank that the entries before it did not pass."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    if not len(keys):
        return keys, counts, np.zeros(n_groups + 1, dtype=np.int64)
    ascending = keys[1:] > keys[:-1]
    row_starts = offsets[1:-1]
    ascending[row_starts[(row_starts > 0) & (row_starts < len(keys))] - 1] = True  # a new row
    # One sketch per group, keys ascending within it (what the agents write): nothing to do.
    if len(group) == n_groups and bool(np.all(ascending)):
        return keys, counts, offsets
    entry_group = np.repeat(group, lengths)
    lo, hi = int(keys.min()), int(keys.max())
    width = hi - lo + 1
    cells = n_groups * width
    exact = float(np.abs(counts).sum()) < 2.0**53  # float64 bincount sums stay exact
    if exact and cells <= _DENSE_CELLS_PER_ENTRY * len(keys) + _DENSE_CELLS_MIN:
        table = np.bincount(entry_group * width + (keys - lo), weights=counts, minlength=cells)
        present = np.flatnonzero(table)  # row-major: sorted by (group, key)
        mkeys, mcounts, mgroup = present % width + lo, table[present].astype(np.int64), present // width
    else:
        order = np.lexsort((keys, entry_group))
        k, c, g = keys[order], counts[order], entry_group[order]
        new_run = np.ones(len(k), dtype=bool)
        new_run[1:] = (k[1:] != k[:-1]) | (g[1:] != g[:-1])
        run_starts = np.flatnonzero(new_run)
        mkeys, mcounts, mgroup = k[run_starts], np.add.reduceat(c, run_starts), g[run_starts]
    return mkeys, mcounts, np.searchsorted(mgroup, np.arange(n_groups + 1), side="left")


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


def _flat(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(lengths per row, flat values) of a list column; a null list is empty, a null item 0."""
    col = table.column(name).combine_chunks()
    lengths = pc.list_value_length(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = pc.list_flatten(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    return lengths, values


def _numbers(table: pa.Table, name: str, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    col = table.column(name).combine_chunks()
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    return col.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype), valid


def quantile_table(
    table: pa.Table, levels: Sequence[Sequence[str]], dims: Sequence[str], sums: Sequence[str] = ()
) -> pa.Table:
    """Sketch rows (``dims`` + :data:`SKETCH_COLUMNS` + ``sums``) → result rows for every level,
    a level being the dimensions it groups by (the others are null in its rows). Each of
    ``sums`` (integer columns) is summed per group, a null adding nothing."""
    zero, zero_valid = _numbers(table, "zero", np.int64)
    sum_ms, sum_valid = _numbers(table, "sum_ms", np.float64)
    lengths, keys = _flat(table, "keys")
    count_lengths, counts = _flat(table, "counts")
    if not np.array_equal(lengths, count_lengths):
        raise ValueError("keys and counts differ in length on some row")
    out = []
    for level in levels:
        group, n_groups, first = _group_ids(table, level)
        # Rows in group order, so each group's entries are contiguous for the merge.
        order = np.argsort(group, kind="stable")
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        entry_idx = _entry_index(offsets, order, lengths)
        m = merge_quantiles(
            group[order],
            n_groups,
            zero[order],
            zero_valid[order],
            sum_ms[order],
            sum_valid[order],
            lengths[order],
            keys[entry_idx],
            counts[entry_idx],
        )
        cols = {}
        picked = table.take(pa.array(first))
        for d in dims:
            cols[d] = picked.column(d) if d in level else pa.nulls(n_groups, table.schema.field(d).type)
        cols["count"] = pa.array(m.count, pa.int64(), mask=~m.count_valid)
        for name in sums:
            acc = np.zeros(n_groups, dtype=np.int64)
            np.add.at(acc, group, _numbers(table, name, np.int64)[0])
            cols[name] = pa.array(acc, pa.int64())
        for name, (value, valid) in m.quantiles.items():
            cols[name] = pa.array(value, pa.float64(), mask=~valid)
        cols["mean_ms"] = pa.array(m.mean, pa.float64(), mask=~m.mean_valid)
        out.append(pa.table(cols))
    return pa.concat_tables(out)


def _entry_index(offsets: np.ndarray, order: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indices of the flat entries of rows taken in ``order``."""
    n = lengths[order]
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = offsets[:-1][order]
    # For each output entry: its row's start + its position within the row.
    row_start_out = np.repeat(np.cumsum(n) - n, n)
    return np.repeat(starts, n) + (np.arange(total, dtype=np.int64) - row_start_out)


def quantile_batches(
    batches: Iterator[pa.RecordBatch],
    levels: Sequence[Sequence[str]],
    dims: Sequence[str],
    sums: Sequence[str] = (),
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the whole partition at once (a group never spans partitions)."""
    got = list(batches)
    table = pa.Table.from_batches(got) if got else None
    if table is not None and table.num_rows:
        yield from quantile_table(table, levels, dims, sums).to_batches()


# --- Spark ------------------------------------------------------------------------------------


def merged_quantiles(
    base: DataFrame,
    dims: Sequence[str],
    levels: Sequence[Sequence[str]],
    shuffle_by: Sequence[str],
    sums: Sequence[str] = (),
) -> DataFrame:
    """``base``: ``dims`` columns, :data:`SKETCH_COLUMNS` (``keys`` array<int>, ``counts``
    array<long>, one element per bucket) and ``sums`` (long columns). Returns ``dims`` + count,
    ``sums`` summed, p50/p99/p999, the nonzero p99 and mean per group of each level. ``shuffle_by`` must be a
    subset of every level (so each group is whole in one partition)."""
    for level in levels:
        if not set(shuffle_by) <= set(level):
            raise ValueError(f"shuffle_by {list(shuffle_by)} is not within level {list(level)}")
    fields = [base.schema[d] for d in dims]
    schema = T.StructType(
        [T.StructField(f.name, f.dataType, True) for f in fields]
        + [T.StructField("count", T.LongType(), True)]
        + [T.StructField(n, T.LongType(), False) for n in sums]
        + [T.StructField(n, T.DoubleType(), True) for n in [*QUANTILES, *NONZERO_QUANTILES, "mean_ms"]]
    )
    dims_, levels_, sums_ = list(dims), [list(lv) for lv in levels], list(sums)
    # AQE may coalesce these partitions but never splits one, so a group stays whole.
    shuffled = base.select(*dims_, *SKETCH_COLUMNS, *sums_).repartition(*shuffle_by)
    return shuffled.mapInArrow(lambda it: quantile_batches(it, levels_, dims_, sums_), schema)


def sketch_columns(sketch: str = "sketch") -> list:
    """The sketch struct column → :data:`SKETCH_COLUMNS` (keys cast as the exploding path does)."""
    return [
        F.col(f"{sketch}.zero").alias("zero"),
        F.col(f"{sketch}.sum").alias("sum_ms"),
        F.map_keys(f"{sketch}.buckets").cast("array<int>").alias("keys"),
        F.map_values(f"{sketch}.buckets").alias("counts"),
    ]


def stage_windows(sketches: DataFrame, window_s: int) -> DataFrame:
    """StageSketch records → one row per (broker, request, stage, window) and one per
    (request, stage, window) over all brokers (``broker`` null): the union of
    :func:`spark_metrics.transforms.stage_quantiles` and
    :func:`~spark_metrics.transforms.cluster_quantiles`, computed in one pass."""
    from spark_metrics.transforms import logged_requests, window_start

    base = sketches.select(
        F.col("broker"),
        F.col("request"),
        F.col("stage"),
        window_start("ts_ms", window_s).alias("window_start_ms"),
        *sketch_columns(),
        logged_requests().alias("logged"),
    )
    return merged_quantiles(base, STAGE_DIMS, [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS[1:], ["logged"])
