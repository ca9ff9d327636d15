"""The sketch arithmetic, written once: merge latency sketches per group and read count, logged
requests, quantiles and mean.

Both aggregation paths call :func:`merge`: the Spark path (:mod:`spark_metrics.sketch_merge`,
one call per Spark partition through ``mapInArrow``) and the incremental window state
(:mod:`aggregation.window_state`, one call per evaluation). So a ``StageWindow`` or a probe's
quantile cannot differ between them.

Input: sketch rows (:class:`SketchRows`, flat numpy columns; a row is one sketch as
:meth:`linkwatch.sketch.LatencySketch.to_dict` writes it) and a group id per row. Per group:

* the zero counts, the sums and the bucket counts per log-bucket key are summed;
  ``count = zero + Σ counts``;
* quantile ``q`` (:data:`QUANTILES`): ``0.0`` when its rank ``floor(q · (count − 1))`` falls among
  the zeros, else the value (:func:`key_to_value`) of the first key, ascending, whose cumulative
  count after the zeros passes the rank; ``None`` when the group saw nothing (or, with negative
  counts in bad data, no key passes). The sketch's own rule (DDSketch's lower quantile).
* the nonzero quantiles (:data:`NONZERO_QUANTILES`): the same over the bucket counts alone, the
  ``n = count − zero`` values above zero; ``None`` when ``n`` is not positive;
* ``mean = sum / count``, ``None`` when ``count`` is 0;
* ``logged`` (rows with a capture ratio): per row ``floor(row count × capture_ratio + 0.5)``,
  the requests a sampled sketch rests on (its counts are already scaled by ``1 / ratio``),
  summed per group.
* the row totals (:data:`ROW_TOTALS`, rows that carry them): each summed per group, a missing
  value (an older agent's record) as 0 — a stage sketch's ``connections`` and
  ``saturated_connections`` (``linkwatch.records.StageSketch``).

Null semantics follow Spark's ``SUM`` (``valid`` masks, a False meaning null): a null zero or sum
adds nothing, and a group whose zero counts are all null has a null count and null quantiles
(whose sums are all null, a null mean); a null bucket count adds nothing; a row whose buckets are
null adds no entry and no logged requests.

Contract: pure numpy (no Spark, no Arrow), so the analyzer's state and the benchmarks call it
without a session; never raises on counts of any sign or size that fit in int64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from linkwatch.sketch import _MAPPING

# The quantiles a StageWindow carries, by field name.
QUANTILES: dict[str, float] = {"p50_ms": 0.5, "p99_ms": 0.99, "p999_ms": 0.999}
# Read over the values above the sketch's zero bucket alone (StageWindow.nonzero_p99_ms).
NONZERO_QUANTILES: dict[str, float] = {"nonzero_p99_ms": 0.99}
# The quantiles a ProbeBrokerWindow carries of each of its sketches.
PROBE_QUANTILES: dict[str, float] = {"p50_ms": 0.5, "p90_ms": 0.9, "p99_ms": 0.99}

# Per-row counts a sketch row may carry beside its sketch, summed per group (StageWindow fields).
ROW_TOTALS = ("connections", "saturated_connections")

_NO_HIT = np.iinfo(np.int64).max


def key_to_value(keys: np.ndarray) -> np.ndarray:
    """Milliseconds of log buckets: numpy form of :func:`linkwatch.sketch.key_to_value` (the
    same mapping's constants)."""
    m = _MAPPING
    return np.power(2.0, (keys.astype(np.float64) - m._offset) / m._multiplier) * (2.0 / (1 + m.gamma))


def logged_requests(row_counts: np.ndarray, capture_ratios: np.ndarray) -> np.ndarray:
    """Requests each sketch rests on: ``floor(count × capture_ratio + 0.5)`` in doubles (the
    count already scaled by ``1 / capture_ratio`` under sampled capture, :mod:`agent.capture`)."""
    return np.floor(row_counts.astype(np.float64) * capture_ratios + 0.5).astype(np.int64)


@dataclass(frozen=True)
class SketchRows:
    """Sketch rows as flat columns. Row ``i`` has ``lengths[i]`` bucket entries, laid end to end
    in ``keys``/``counts`` in row order. Null values are passed as 0 with a False in their mask.
    ``capture_ratio`` None: no logged requests are computed."""

    zero: np.ndarray  # int64
    zero_valid: np.ndarray  # bool
    sum_ms: np.ndarray  # float64
    sum_valid: np.ndarray  # bool
    lengths: np.ndarray  # int64
    keys: np.ndarray  # int64
    counts: np.ndarray  # int64
    buckets_valid: np.ndarray  # bool: False where the row's bucket map is null
    capture_ratio: np.ndarray | None = None  # float64
    totals: Mapping[str, np.ndarray] | None = None  # ROW_TOTALS name -> int64 per row (null as 0)

    @classmethod
    def of(
        cls,
        rows: Sequence[tuple[int, float, np.ndarray, np.ndarray]],
        capture_ratio: Sequence[float] | None = None,
        totals: Mapping[str, Sequence[int]] | None = None,
    ) -> SketchRows:
        """From ``(zero, sum_ms, keys, counts)`` per row, none of them null."""
        n = len(rows)
        valid = np.ones(n, dtype=bool)
        empty = np.zeros(0, dtype=np.int64)
        return cls(
            zero=np.fromiter((r[0] for r in rows), np.int64, n),
            zero_valid=valid,
            sum_ms=np.fromiter((r[1] for r in rows), np.float64, n),
            sum_valid=valid,
            lengths=np.fromiter((len(r[2]) for r in rows), np.int64, n),
            keys=np.concatenate([r[2] for r in rows]) if n else empty,
            counts=np.concatenate([r[3] for r in rows]) if n else empty,
            buckets_valid=valid,
            capture_ratio=None if capture_ratio is None else np.asarray(capture_ratio, np.float64),
            totals=None if totals is None else {k: np.asarray(v, np.int64) for k, v in totals.items()},
        )

    def logged(self) -> np.ndarray:
        """Per row: the logged requests (:func:`logged_requests`), 0 where the buckets are null."""
        assert self.capture_ratio is not None
        prefix = np.concatenate([[0], np.cumsum(self.counts)])
        ends = np.cumsum(self.lengths)
        row_counts = np.where(self.zero_valid, self.zero, 0) + (prefix[ends] - prefix[ends - self.lengths])
        return np.where(self.buckets_valid, logged_requests(row_counts, self.capture_ratio), 0)


@dataclass(frozen=True)
class Merged:
    """One entry per group; a False in a ``valid`` mask means null (Spark's null)."""

    count: np.ndarray  # int64
    count_valid: np.ndarray  # bool
    quantiles: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (float64 value, valid)
    mean: np.ndarray  # float64
    mean_valid: np.ndarray  # bool
    logged: np.ndarray | None = None  # int64 (never null), when the rows had capture ratios
    totals: Mapping[str, np.ndarray] | None = None  # int64 (never null), when the rows had them

    def values(self, name: str) -> list:
        """Column ``name`` (``count``, ``logged``, ``mean_ms``, a quantile's or a row total's)
        as Python values, None where null."""
        if name == "logged":
            assert self.logged is not None
            return self.logged.tolist()
        if self.totals is not None and name in self.totals:
            return self.totals[name].tolist()
        value, valid = {
            "count": (self.count, self.count_valid),
            "mean_ms": (self.mean, self.mean_valid),
        }.get(name) or self.quantiles[name]
        return [v if ok else None for v, ok in zip(value.tolist(), valid.tolist(), strict=True)]


def merge(
    rows: SketchRows,
    group: np.ndarray,
    n_groups: int,
    quantiles: Mapping[str, float] = QUANTILES,
    nonzero_quantiles: Mapping[str, float] = NONZERO_QUANTILES,
) -> Merged:
    """Merge the rows into ``n_groups`` groups (``group[i]``: row ``i``'s id, ``0 … n_groups −
    1``, each id with at least one row; rows in any order) and read count, quantiles, mean and
    logged requests per group (see the module docstring)."""
    group = np.asarray(group, dtype=np.int64)
    logged = rows.logged() if rows.capture_ratio is not None else None
    totals = dict(rows.totals) if rows.totals is not None else None
    if len(group) > 1 and bool(np.any(group[1:] < group[:-1])):
        order = np.argsort(group, kind="stable")
        entries = _entry_index(rows.lengths, order)
        rows = SketchRows(
            rows.zero[order],
            rows.zero_valid[order],
            rows.sum_ms[order],
            rows.sum_valid[order],
            rows.lengths[order],
            rows.keys[entries],
            rows.counts[entries],
            rows.buckets_valid[order],
        )
        group = group[order]
        logged = logged[order] if logged is not None else None
        totals = {k: v[order] for k, v in totals.items()} if totals is not None else None
    merged = _merge_sorted(group, n_groups, rows, quantiles, nonzero_quantiles)
    if n_groups == 0:
        empty = np.zeros(0, dtype=np.int64)
        return replace(
            merged,
            logged=None if logged is None else empty,
            totals=None if totals is None else dict.fromkeys(totals, empty),
        )
    row_starts = np.searchsorted(group, np.arange(n_groups), side="left")
    return replace(
        merged,
        logged=None if logged is None else np.add.reduceat(logged, row_starts),
        totals=None if totals is None else {k: np.add.reduceat(v, row_starts) for k, v in totals.items()},
    )


def _entry_index(lengths: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Indices of the flat entries of rows taken in ``order``."""
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    n = lengths[order]
    total = int(n.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    starts = offsets[:-1][order]
    # For each output entry: its row's start + its position within the row.
    row_start_out = np.repeat(np.cumsum(n) - n, n)
    return np.repeat(starts, n) + (np.arange(total, dtype=np.int64) - row_start_out)


def _merge_sorted(
    group: np.ndarray,
    n_groups: int,
    rows: SketchRows,
    quantiles: Mapping[str, float],
    nonzero_quantiles: Mapping[str, float],
) -> Merged:
    """:func:`merge` for rows sorted by ``group``."""
    if n_groups == 0:
        none, no = np.zeros(0), np.zeros(0, dtype=bool)
        names = [*quantiles, *nonzero_quantiles]
        return Merged(none.astype(np.int64), no, {n: (none, no) for n in names}, none, no)
    row_starts = np.searchsorted(group, np.arange(n_groups), side="left")
    zero_g = np.add.reduceat(np.where(rows.zero_valid, rows.zero, 0).astype(np.int64), row_starts)
    zero_ok = np.add.reduceat(rows.zero_valid.astype(np.int64), row_starts) > 0
    # Spark adds the doubles in its own order; ours may differ in the last bit.
    sum_g = np.add.reduceat(np.where(rows.sum_valid, rows.sum_ms, 0.0), row_starts)
    sum_ok = np.add.reduceat(rows.sum_valid.astype(np.int64), row_starts) > 0

    mkeys, mcounts, bounds = _merge_entries(
        group,
        n_groups,
        rows.lengths,
        rows.keys.astype(np.int64, copy=False),
        rows.counts.astype(np.int64, copy=False),
    )
    # Group g's merged entries are [bounds[g], bounds[g + 1]), keys ascending.
    starts, ends = bounds[:-1], bounds[1:]
    prefix = np.concatenate([[0], np.cumsum(mcounts)])  # prefix[i]: counts before entry i
    before = prefix[starts]
    count = zero_g + (prefix[ends] - before)
    monotone = not len(mcounts) or mcounts.min() >= 0
    first_passing = _first_passing_sorted if monotone else _first_passing
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for name, q in quantiles.items():
        # FLOOR(q * (count - 1)) in doubles, a long; compared with zero + cum as longs.
        rank = np.floor(q * (count - 1).astype(np.float64)).astype(np.int64)
        in_zeros = rank < zero_g
        # The first merged entry (keys ascending) whose count after the zeros passes the rank.
        first = first_passing(prefix, before, rank - zero_g, starts, ends)
        hit = first < ends
        value = np.zeros(n_groups, dtype=np.float64)
        take = hit & ~in_zeros
        value[take] = key_to_value(mkeys[first[take]])
        out[name] = (value, zero_ok & (count != 0) & (in_zeros | hit))
    above = count - zero_g  # the values above the zero bucket
    for name, q in nonzero_quantiles.items():
        rank = np.floor(q * (above - 1).astype(np.float64)).astype(np.int64)
        first = first_passing(prefix, before, rank, starts, ends)
        hit = (first < ends) & (above > 0)
        value = np.zeros(n_groups, dtype=np.float64)
        value[hit] = key_to_value(mkeys[first[hit]])
        out[name] = (value, zero_ok & hit)
    mean_valid = zero_ok & sum_ok & (count > 0)
    mean = np.divide(sum_g, count, out=np.zeros(n_groups), where=mean_valid)
    return Merged(count, zero_ok, out, mean, mean_valid)


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
