"""Processed-offset tracking: commit only the contiguous prefix of records the application finished.

A record is *delivered* (it entered the client buffer, in offset order per partition), then the
application *acks* it (done) or *fails* it. A failed record is retried up to ``max_retries``
times; after that it is *exhausted* and the caller decides (dead-letter it, which then counts as
done, or stop the partition). The committable offset of a partition is the offset of the first
delivered record that is not done — or one past the last record when all are done — so a
record is never committed before everything below it is finished (Storm KafkaSpout's rule).

Offsets need not be contiguous integers (compaction, transaction markers): contiguity is over
the *delivered* records, in delivery order.

:class:`PartitionOffsets` is pure and single-threaded; :class:`CommitTracker` holds one per
partition behind a lock, tagged with the assignment *epoch*, so an ack that arrives after its
partition was revoked (or revoked and assigned again) is recognised as stale and ignored.
"""

from __future__ import annotations

import enum
import operator
import threading
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass
from itertools import islice, repeat


class Outcome(enum.Enum):
    DONE = "done"
    RETRY = "retry"
    EXHAUSTED = "exhausted"
    STALE = "stale"  # the partition was revoked/reassigned since the record was delivered
    UNKNOWN = "unknown"  # never delivered (or already committed past)


_PENDING = 0
_DONE = 1


class PartitionOffsets:
    """Delivered-but-not-committable records of one partition, in delivery order."""

    __slots__ = ("_attempts", "_next", "_pending", "committed", "max_retries", "stopped_at")

    def __init__(self, max_retries: int) -> None:
        self.max_retries = max_retries
        self._pending: OrderedDict[int, int] = OrderedDict()  # offset -> _PENDING | _DONE
        self._attempts: dict[int, int] = {}
        self._next: int | None = None  # next offset to commit, once anything finished
        self.committed: int | None = None  # last offset handed to mark_committed
        self.stopped_at: int | None = None  # offset of the exhausted record that stopped the partition

    def delivered(self, offset: int) -> None:
        """Register a record entering the buffer; offsets must increase within a partition."""
        if self._pending and offset <= next(reversed(self._pending)):
            raise ValueError(f"offset {offset} delivered out of order (last {next(reversed(self._pending))})")
        if self._next is not None and offset < self._next:
            raise ValueError(f"offset {offset} is below the processed prefix {self._next}")
        self._pending[offset] = _PENDING

    def delivered_run(self, offsets: list[int]) -> int:
        """Register a fetched run (ascending offsets) in one step; returns how many *trailing*
        offsets were new (leading ones already tracked, after a seek back, are skipped)."""
        floor = next(reversed(self._pending)) if self._pending else -1
        if self._next is not None and self._next - 1 > floor:
            floor = self._next - 1
        start = bisect_right(offsets, floor)
        run = offsets[start:] if start else offsets
        if len(run) > 1 and not all(map(operator.lt, run, islice(run, 1, None))):
            raise ValueError(f"offsets delivered out of order: {run[:10]}...")
        self._pending.update(zip(run, repeat(_PENDING)))
        return len(run)

    def ack_run(self, offsets: list[int]) -> dict[Outcome, int]:
        """:meth:`ack` for each offset in turn; outcome -> count. The usual case — the run is
        exactly the oldest pending records, in order — moves the prefix in one step."""
        pending, k = self._pending, len(offsets)
        if (
            k
            and self.stopped_at is None
            and k <= len(pending)
            and list(islice(pending.items(), k)) == list(zip(offsets, repeat(_PENDING)))
        ):
            if self._attempts:
                for offset in offsets:
                    self._attempts.pop(offset, None)
            popitem = pending.popitem
            for _ in range(k):
                popitem(last=False)
            self._next = offsets[-1] + 1
            self._advance()
            return {Outcome.DONE: k}
        counts: dict[Outcome, int] = {}
        for offset in offsets:
            outcome = self.ack(offset)
            counts[outcome] = counts.get(outcome, 0) + 1
        return counts

    def ack(self, offset: int) -> Outcome:
        pending = self._pending
        if pending.get(offset) != _PENDING:
            return Outcome.UNKNOWN
        if self._attempts:
            self._attempts.pop(offset, None)
        if self.stopped_at is None and next(iter(pending)) == offset:
            # In-order ack (the common case): the prefix moves past it and any done followers.
            pending.popitem(last=False)
            self._next = offset + 1
            while pending:
                first = next(iter(pending))
                if pending[first] != _DONE:
                    self._next = max(self._next, first)  # skip holes up to the first pending
                    break
                pending.popitem(last=False)
                self._next = first + 1
            return Outcome.DONE
        pending[offset] = _DONE
        self._advance()
        return Outcome.DONE

    def fail(self, offset: int) -> Outcome:
        """Count a failed attempt: RETRY while attempts <= max_retries, then EXHAUSTED."""
        if self._pending.get(offset) != _PENDING:
            return Outcome.UNKNOWN
        attempts = self._attempts.get(offset, 0) + 1
        self._attempts[offset] = attempts
        return Outcome.RETRY if attempts <= self.max_retries else Outcome.EXHAUSTED

    def attempts(self, offset: int) -> int:
        return self._attempts.get(offset, 0)

    def stop(self, offset: int) -> None:
        """The partition stops at ``offset``: nothing at or after it will ever be committable."""
        self.stopped_at = offset if self.stopped_at is None else min(self.stopped_at, offset)

    def _advance(self) -> None:
        while self._pending:
            offset, state = next(iter(self._pending.items()))
            if state != _DONE or (self.stopped_at is not None and offset >= self.stopped_at):
                if self._next is not None:  # skip holes (compaction, markers) up to the first pending
                    self._next = max(self._next, offset)
                return
            self._pending.popitem(last=False)
            self._next = offset + 1

    def committable(self) -> int | None:
        """Next offset to commit if it moved past what was last committed, else None."""
        if self._next is None or (self.committed is not None and self._next <= self.committed):
            return None
        return self._next

    def first_unfinished(self) -> int | None:
        """Offset of the first delivered record that is not done (None if every one is done)."""
        for offset, state in self._pending.items():
            if state != _DONE:
                return offset
        return None

    def position(self) -> int | None:
        """The processed prefix (next offset to process), regardless of what was committed."""
        return self._next

    def mark_committed(self, offset: int) -> None:
        self.committed = offset if self.committed is None else max(self.committed, offset)

    @property
    def uncommitted(self) -> int:
        """Records delivered and not yet part of the processed prefix (bounded by the caller)."""
        return len(self._pending)

    @property
    def unfinished(self) -> int:
        """Delivered records not done (below the stop offset of a stopped partition)."""
        stop = self.stopped_at
        return sum(1 for o, s in self._pending.items() if s != _DONE and (stop is None or o < stop))

    @property
    def done_beyond_prefix(self) -> int:
        """Acked records above the first unfinished one: re-delivered if the partition moves now."""
        return sum(1 for s in self._pending.values() if s == _DONE)


@dataclass(frozen=True)
class Revoked:
    """What a revoke left behind: the final committable offset and acked-but-uncommittable count."""

    commit: int | None
    at_risk: int
    resume: int | None = None  # first delivered offset not finished (refetch from here)


class CommitTracker:
    """Thread-safe per-partition trackers keyed by ``(topic, partition)`` with assignment epochs."""

    def __init__(self, max_retries: int) -> None:
        self._max_retries = max_retries
        self._lock = threading.Lock()
        self._parts: dict[tuple[str, int], tuple[int, PartitionOffsets]] = {}

    def assign(self, tp: tuple[str, int], epoch: int) -> None:
        with self._lock:
            self._parts[tp] = (epoch, PartitionOffsets(self._max_retries))

    def revoke(self, tp: tuple[str, int]) -> Revoked:
        with self._lock:
            entry = self._parts.pop(tp, None)
        if entry is None:
            return Revoked(None, 0)
        part = entry[1]
        return Revoked(part.committable(), part.done_beyond_prefix, part.first_unfinished())

    def epoch(self, tp: tuple[str, int]) -> int | None:
        with self._lock:
            entry = self._parts.get(tp)
            return entry[0] if entry else None

    def _get(self, tp: tuple[str, int], epoch: int) -> PartitionOffsets | None:
        entry = self._parts.get(tp)
        return entry[1] if entry is not None and entry[0] == epoch else None

    def delivered(self, tp: tuple[str, int], epoch: int, offset: int) -> bool:
        with self._lock:
            part = self._get(tp, epoch)
            if part is None or part.stopped_at is not None:
                return False
            try:
                part.delivered(offset)
            except ValueError:  # refetched after a seek back: already tracked
                return False
            return True

    def delivered_many(self, tp: tuple[str, int], epoch: int, offsets: list[int]) -> int:
        """Register a fetched run of ascending offsets; returns how many *trailing* ones were
        accepted (leading ones already tracked after a seek back are skipped; none if
        stopped/stale)."""
        with self._lock:
            part = self._get(tp, epoch)
            if part is None or part.stopped_at is not None:
                return 0
            return part.delivered_run(offsets)

    def ack(self, tp: tuple[str, int], epoch: int, offset: int) -> Outcome:
        with self._lock:
            part = self._get(tp, epoch)
            return Outcome.STALE if part is None else part.ack(offset)

    def ack_runs(self, runs: list[tuple[tuple[str, int], int, list[int]]]) -> dict[Outcome, int]:
        """Ack runs of offsets, each ``(tp, epoch, offsets)``, in order, under one lock round;
        returns the outcome counts."""
        counts: dict[Outcome, int] = {}
        with self._lock:
            for tp, epoch, offsets in runs:
                part = self._get(tp, epoch)
                if part is None:
                    counts[Outcome.STALE] = counts.get(Outcome.STALE, 0) + len(offsets)
                    continue
                for outcome, n in part.ack_run(offsets).items():
                    counts[outcome] = counts.get(outcome, 0) + n
        return counts

    def fail(self, tp: tuple[str, int], epoch: int, offset: int) -> Outcome:
        with self._lock:
            part = self._get(tp, epoch)
            return Outcome.STALE if part is None else part.fail(offset)

    def stop(self, tp: tuple[str, int], epoch: int, offset: int) -> None:
        with self._lock:
            part = self._get(tp, epoch)
            if part is not None:
                part.stop(offset)

    def stopped(self) -> dict[tuple[str, int], int]:
        with self._lock:
            return {tp: p.stopped_at for tp, (_, p) in self._parts.items() if p.stopped_at is not None}

    def uncommitted(self, tp: tuple[str, int]) -> int:
        with self._lock:
            entry = self._parts.get(tp)
            return entry[1].uncommitted if entry else 0

    def unfinished(self, tp: tuple[str, int]) -> int:
        with self._lock:
            entry = self._parts.get(tp)
            return entry[1].unfinished if entry else 0

    def committable(self) -> dict[tuple[str, int], int]:
        with self._lock:
            out = {}
            for tp, (_, part) in self._parts.items():
                offset = part.committable()
                if offset is not None:
                    out[tp] = offset
            return out

    def mark_committed(self, offsets: dict[tuple[str, int], int]) -> None:
        with self._lock:
            for tp, offset in offsets.items():
                entry = self._parts.get(tp)
                if entry is not None:
                    entry[1].mark_committed(offset)
