"""The (group, partition) pairs of a lag pass, per topic, as arrays.

Every pair of a topic is one *column*: :class:`TopicWindows` holds the columns' observation
windows between passes (one row per pass), :class:`TopicResult` what a pass found and decided
for them, :class:`PartitionLags` one group's columns read as :class:`PartitionLag` objects,
built on demand. :class:`TopicView` is what a pass knows of a topic's partitions (leader, end
and log start offsets, indexed by partition number); :class:`GroupColumns` one group's
partitions of a topic before the offsets are known. :mod:`lag.collector` fills and reads them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from lag import array_rules
from lag.rules import Verdict
from lag.timestamps import METHODS, FoundRecord


class PartitionLag:
    """One (group, partition) of a pass. Its ``verdict`` (status, reason in words, numbers) is
    given, or built on first read by ``decide``: a reader of offsets and lag alone (``/metrics``)
    formats no reason."""

    __slots__ = (
        "_decide",
        "_verdict",
        "committed",
        "end",
        "group",
        "lag_messages",
        "lag_seconds",
        "leader",
        "method",
        "partition",
        "topic",
    )

    def __init__(
        self,
        group: str,
        topic: str,
        partition: int,
        committed: int,
        end: int,
        lag_messages: int,
        lag_seconds: float | None,
        method: str,
        leader: int | None,
        verdict: Verdict | None = None,
        decide: Callable[[], Verdict] | None = None,
    ) -> None:
        if (verdict is None) == (decide is None):
            raise ValueError("give a PartitionLag its verdict or a way to decide it, not both")
        self.group, self.topic, self.partition = group, topic, partition
        self.committed, self.end, self.lag_messages = committed, end, lag_messages
        self.lag_seconds, self.method, self.leader = lag_seconds, method, leader
        self._verdict, self._decide = verdict, decide

    @property
    def verdict(self) -> Verdict:
        if self._verdict is None:
            assert self._decide is not None
            self._verdict, self._decide = self._decide(), None
        return self._verdict

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _fields(self) -> tuple:
        return (
            self.group,
            self.topic,
            self.partition,
            self.committed,
            self.end,
            self.lag_messages,
            self.lag_seconds,
            self.method,
            self.leader,
            self.verdict,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PartitionLag) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        return (
            f"PartitionLag({self.group!r}, {self.name!r}, committed={self.committed}, end={self.end}, "
            f"lag={self.lag_messages}, {self.verdict.status.value})"
        )


@dataclass
class TopicResult:
    """One pass over one topic's (group, partition) columns, as arrays (columns sorted by group
    id, then partition). ``end`` is -1 and ``lag`` 0 where the end offset is unknown."""

    topic: str
    partition: np.ndarray
    committed: np.ndarray
    end: np.ndarray
    lag: np.ndarray
    seconds: np.ndarray  # NaN: unknown
    method: np.ndarray  # METHOD_CODE
    leader: np.ndarray  # the metadata's leader id; NOT_IN_META: None
    decisions: array_rules.Decisions

    def item(self, group: str, j: int) -> PartitionLag:
        seconds, leader = float(self.seconds[j]), int(self.leader[j])
        return PartitionLag(
            group,
            self.topic,
            int(self.partition[j]),
            int(self.committed[j]),
            int(self.end[j]),
            int(self.lag[j]),
            None if np.isnan(seconds) else seconds,
            METHODS[self.method[j]],
            None if leader == NOT_IN_META else leader,
            decide=functools.partial(self.decisions.verdict, j),
        )


class PartitionLags(Sequence[PartitionLag]):
    """One group's partitions in (topic, partition) order. Each :class:`PartitionLag` (and its
    verdict's words) is built when it is read, from the pass's arrays; read them once per pass
    (metrics, records), not in a loop of loops."""

    def __init__(self, group: str, slices: list[tuple[TopicResult, int, int]]) -> None:
        self.group = group
        self._slices = slices  # (topic result, first column, end column), topics in order
        self._starts = np.cumsum([0] + [hi - lo for _, lo, hi in slices])

    def __len__(self) -> int:
        return int(self._starts[-1])

    @overload
    def __getitem__(self, i: int) -> PartitionLag: ...
    @overload
    def __getitem__(self, i: slice) -> list[PartitionLag]: ...
    def __getitem__(self, i: int | slice) -> PartitionLag | list[PartitionLag]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(i)
        k = int(np.searchsorted(self._starts, i, side="right")) - 1
        res, lo, _ = self._slices[k]
        return res.item(self.group, lo + i - int(self._starts[k]))

    def __iter__(self) -> Iterator[PartitionLag]:
        for res, lo, hi in self._slices:
            for j in range(lo, hi):
                yield res.item(self.group, j)


# A column's key in a topic's windows: group id (``LagCollector._gid``) and partition.
PARTITION_BITS = 32


def column_keys(gid: np.ndarray, partition: np.ndarray) -> np.ndarray:
    return (gid.astype(np.int64) << PARTITION_BITS) | partition.astype(np.int64)


@dataclass
class TopicWindows:
    """The observation windows of every (group, partition) column of one topic, kept between
    passes: ``H`` rows (oldest first; one per pass, all columns observed at the same time),
    columns sorted by :func:`column_keys`. ``progress``: when each column's consumer last advanced or
    was caught up (``LagCollector``'s STOP/STALL clock), NaN if never."""

    keys: np.ndarray
    ts: np.ndarray  # (H,)
    committed: np.ndarray  # (H, P)
    end: np.ndarray
    lag: np.ndarray
    state: np.ndarray  # array_rules.ABSENT / OBSERVED / FAILED
    progress: np.ndarray  # (P,)

    @classmethod
    def blank(cls, ts: np.ndarray, columns: int) -> TopicWindows:
        rows = len(ts)
        z = np.zeros((rows, columns), np.int64)
        return cls(
            np.zeros(columns, np.int64),
            ts,
            z,
            z.copy(),
            z.copy(),
            np.full((rows, columns), array_rules.ABSENT, np.int8),
            np.full(columns, np.nan),
        )

    def aligned(self, keys: np.ndarray) -> TopicWindows:
        """The windows of columns ``keys`` (sorted): kept columns keep their history, new ones
        start empty, columns not in ``keys`` are forgotten."""
        if np.array_equal(keys, self.keys):
            return self
        out = TopicWindows.blank(self.ts, len(keys))
        out.keys = keys
        if len(self.keys):
            idx = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
            known = self.keys[idx] == keys
            src = idx[known]
            for name in ("committed", "end", "lag", "state"):
                getattr(out, name)[:, known] = getattr(self, name)[:, src]
            out.progress[known] = self.progress[src]
        return out

    def append(
        self, ts: float, committed: np.ndarray, end: np.ndarray, lag: np.ndarray, failed: np.ndarray
    ) -> None:
        """One more observation of every column (the oldest row drops out)."""
        for a, new in (
            (self.committed, committed),
            (self.end, end),
            (self.lag, lag),
            (self.state, np.where(failed, array_rules.FAILED, array_rules.OBSERVED)),
        ):
            a[:-1] = a[1:]
            a[-1] = new
        self.ts[:-1] = self.ts[1:]
        self.ts[-1] = ts

    def newest_observed(self) -> tuple[np.ndarray, np.ndarray]:
        """(has one, committed offset) of each column's newest observation that did not fail."""
        ok = self.state == array_rules.OBSERVED
        rows = self.state.shape[0]
        newest = rows - 1 - np.argmax(ok[::-1], axis=0)
        return ok.any(0), np.take_along_axis(self.committed, newest[None, :], 0)[0]


@dataclass
class GroupColumns:
    """One group's columns on one topic, before the pass's offsets are known."""

    group: str
    gid: int
    partition: np.ndarray  # sorted
    committed: np.ndarray  # -1: no commit on that partition


@dataclass
class TopicView:
    """What the pass knows of one topic, indexed by partition number (-1: unknown)."""

    leader: np.ndarray
    end: np.ndarray
    start: np.ndarray
    errors: dict[int, str] = field(default_factory=dict)  # partition -> why its end is unknown

    @classmethod
    def sized(cls, n: int) -> TopicView:
        return cls(np.full(n, -1, np.int64), np.full(n, -1, np.int64), np.full(n, -1, np.int64))


NOT_IN_META = -(2**62)  # in TopicView.leader: the partition is not in the metadata (topic deleted?)


def topic_views(meta: dict[tuple[str, int], dict[str, Any]]) -> dict[str, TopicView]:
    """The metadata as per-topic arrays: the leader id of each partition (-1: none), or
    :data:`NOT_IN_META`."""
    sizes: dict[str, int] = {}
    for topic, p in meta:
        sizes[topic] = max(sizes.get(topic, 0), p + 1)
    out = {topic: TopicView.sized(n) for topic, n in sizes.items()}
    for t in out.values():
        t.leader[:] = NOT_IN_META
    for (topic, p), m in meta.items():
        out[topic].leader[p] = m.get("leader_id", -1)
    return out


@dataclass
class Found:
    """The records read for a topic's columns (``found`` False where none was read)."""

    partition: np.ndarray
    found: np.ndarray
    offset: np.ndarray
    ts_ms: np.ndarray
    is_end: np.ndarray

    def points(self) -> list[tuple[int, int, int]]:
        """(partition, offset, timestamp) of every record read with a timestamp."""
        ok = self.found & (self.ts_ms >= 0)
        if not ok.any():
            return []
        pts = np.unique(np.stack([self.partition[ok], self.offset[ok], self.ts_ms[ok]], 1), axis=0)
        return [(int(a), int(b), int(c)) for a, b, c in pts.tolist()]


def found_at(
    found: dict[tuple[str, int, int], FoundRecord], topic: str, p: np.ndarray, pos: np.ndarray
) -> Found:
    """The record read at each column's (partition, offset), if any."""
    n = len(p)
    out = Found(p, np.zeros(n, bool), np.zeros(n, np.int64), np.full(n, -1, np.int64), np.zeros(n, bool))
    mine = [(k[1], k[2], r) for k, r in found.items() if k[0] == topic]
    if not mine:
        return out
    fp = np.array([m[0] for m in mine], np.int64)
    fo = np.array([m[1] for m in mine], np.int64)
    order = np.lexsort((fo, fp))
    fp, fo = fp[order], fo[order]
    recs = [mine[i][2] for i in order.tolist()]
    # Binary search of (partition, offset) in the sorted pairs: partition first, then offset.
    lo = np.searchsorted(fp, p, side="left")
    hi = np.searchsorted(fp, p, side="right")
    at = np.full(n, -1, np.int64)
    for q in np.unique(p[hi > lo]).tolist():  # per partition read, not per column
        cols = np.flatnonzero(p == q)
        a, b = int(lo[cols[0]]), int(hi[cols[0]])
        k = a + np.searchsorted(fo[a:b], pos[cols])
        hit = (k < b) & (fo[np.minimum(k, b - 1)] == pos[cols])
        at[cols[hit]] = k[hit]
    ok = at >= 0
    out.found[ok] = True
    out.offset[ok] = [recs[i].offset for i in at[ok].tolist()]
    out.ts_ms[ok] = [recs[i].ts_ms for i in at[ok].tolist()]
    out.is_end[ok] = [recs[i].is_end for i in at[ok].tolist()]
    return out


def unique_pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (a, b) pairs, sorted, and for each input its pair's index."""
    order = np.lexsort((b, a))
    a_s, b_s = a[order], b[order]
    new = np.ones(len(a), bool)
    new[1:] = (a_s[1:] != a_s[:-1]) | (b_s[1:] != b_s[:-1])
    inverse = np.empty(len(a), np.int64)
    inverse[order] = np.cumsum(new) - 1
    return a_s[new], b_s[new], inverse


def fit(t: TopicView | None, size: int) -> TopicView:
    """``t`` holding at least ``size`` partitions (a topic not in the metadata: all unknown)."""
    if t is None:
        t = TopicView.sized(size)
        t.leader[:] = NOT_IN_META
        return t
    if size <= len(t.leader):
        return t
    grown = TopicView.sized(size)
    grown.leader[:] = NOT_IN_META
    for name in ("leader", "end", "start"):
        getattr(grown, name)[: len(t.leader)] = getattr(t, name)
    grown.errors = t.errors
    return grown
