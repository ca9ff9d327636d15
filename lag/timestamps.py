"""Lag in seconds: the timestamp of the record at a committed offset, or an estimate of it.

The committed offset is the next record the group will read, so ``lag_seconds = now − its
timestamp``. :class:`TimestampReader` reads that one record per partition with a group-less
consumer (``assign`` + ``seek`` + ``poll``), bounded in time, partitions per batch and bytes,
and caches the answer by (topic, partition, offset), so a stopped consumer costs one read.

When the record at the offset cannot be read (compacted away, a transaction control record,
deleted by retention, or the read budget of the pass is spent), :class:`OffsetTimeHistory`
interpolates from (offset, time) points the collector keeps per partition: the end offset seen
at each pass and every record timestamp read. :func:`lag_seconds` also returns which way the
number was produced (``PartitionLag.method``):

* ``record_timestamp`` — the record at exactly the committed offset was read.
* ``interpolated`` — linear between two known (offset, time) points around the offset.
* ``next_record`` — the first readable record after the offset (a small underestimate).
* ``lower_bound`` — the offset is older than the whole history: lag is at least this.
* ``caught_up`` — lag is 0 messages, so 0 seconds.
* ``unknown`` — nothing to go on.
"""

from __future__ import annotations

import bisect
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from kafka import KafkaConsumer, TopicPartition

from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs

RECORD_TIMESTAMP = "record_timestamp"
INTERPOLATED = "interpolated"
NEXT_RECORD = "next_record"
LOWER_BOUND = "lower_bound"
CAUGHT_UP = "caught_up"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class FoundRecord:
    """The first record at or after the requested offset: its offset and timestamp (ms).

    ``is_end``: there was no record from the requested offset up to ``offset`` (the end offset
    the caller gave, or beyond): only transaction markers or removed records; ``ts_ms`` is -1.
    """

    offset: int
    ts_ms: int
    is_end: bool = False


class TimestampReader:
    """Reads the first record at or after given offsets. Not thread-safe; one per collector.

    ``read`` never raises for a single partition: partitions it could not read in time are
    simply absent from the answer (the caller falls back to the history).

    With ``stops`` (end offsets), a partition whose position reaches its stop without a record
    is answered at once with an ``is_end`` :class:`FoundRecord` instead of waiting out the
    timeout: the consumer skips control batches (transaction markers), so this is how the
    collector learns that what lies between a commit and the end is no message. That answer is
    cached too and re-read (from where it stopped) only when the end has moved past it, so a
    caught-up exactly-once group costs one read, not one per pass.
    """

    def __init__(
        self,
        kafka: KafkaClientConfig | str,
        *,
        timeout_s: float = 2.0,
        cache_size: int = 100_000,
        batch_partitions: int = 500,
        role: str = "lag-ts",
    ) -> None:
        self.timeout_s = timeout_s
        self.batch_partitions = batch_partitions
        self.cache_size = cache_size
        self._cache: OrderedDict[tuple[str, int, int], FoundRecord] = OrderedDict()
        self.reads = 0
        self.cache_hits = 0
        self._consumer = KafkaConsumer(
            **kafka_python_kwargs(kafka, role),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            # At least one batch per partition comes back whatever these say; they bound the rest.
            max_partition_fetch_bytes=16 * 1024,
            fetch_max_bytes=4 * 1024 * 1024,
            fetch_max_wait_ms=100,
            max_poll_records=10_000,
        )

    def read(
        self, wanted: dict[TopicPartition, int], stops: dict[TopicPartition, int] | None = None
    ) -> dict[TopicPartition, FoundRecord]:
        stops = stops or {}
        found: dict[TopicPartition, FoundRecord] = {}
        todo: list[tuple[TopicPartition, int, int]] = []  # (tp, offset asked, offset to read from)
        for tp, offset in wanted.items():
            key = (tp.topic, tp.partition, offset)
            hit = self._cache.get(key)
            if hit is not None and not (hit.is_end and hit.offset < stops.get(tp, hit.offset)):
                self._cache.move_to_end(key)
                found[tp] = hit
                self.cache_hits += 1
            else:
                todo.append((tp, offset, hit.offset if hit is not None else offset))
        for i in range(0, len(todo), self.batch_partitions):
            chunk = todo[i : i + self.batch_partitions]
            got = self._read_batch({tp: start for tp, _, start in chunk}, stops)
            for tp, asked, _ in chunk:
                if tp in got:
                    found[tp] = got[tp]
                    self._remember((tp.topic, tp.partition, asked), got[tp])
        return found

    def _read_batch(
        self, batch: dict[TopicPartition, int], stops: dict[TopicPartition, int]
    ) -> dict[TopicPartition, FoundRecord]:
        c = self._consumer
        c.assign(list(batch))
        for tp, offset in batch.items():
            c.seek(tp, offset)
        got: dict[TopicPartition, FoundRecord] = {}
        deadline = time.monotonic() + self.timeout_s
        try:
            while len(got) < len(batch) and time.monotonic() < deadline:
                polled = c.poll(timeout_ms=100)
                for tp, records in polled.items():
                    if tp in got or not records:
                        continue
                    rec = records[0]
                    got[tp] = FoundRecord(rec.offset, rec.timestamp)
                    c.pause(tp)
                self._stopped(batch, stops, got)
        finally:
            c.assign([])
        self.reads += len(batch)
        return got

    def _stopped(
        self,
        batch: dict[TopicPartition, int],
        stops: dict[TopicPartition, int],
        got: dict[TopicPartition, FoundRecord],
    ) -> None:
        """Partitions whose position passed their stop with no record returned: ``is_end``."""
        for tp in batch:
            stop = stops.get(tp)
            if tp in got or stop is None:
                continue
            # timeout_ms=0: only the position known now, never a blocking offset reset.
            pos = self._consumer.position(tp, timeout_ms=0)
            if pos is not None and pos >= stop:
                got[tp] = FoundRecord(pos, -1, is_end=True)
                self._consumer.pause(tp)

    def _remember(self, key: tuple[str, int, int], rec: FoundRecord) -> None:
        self._cache[key] = rec
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        self._consumer.close()


class OffsetTimeHistory:
    """Per-partition (offset, time) points, both non-decreasing; bounded in points and partitions.

    When a partition's list is full, every second point of its older half is dropped, so the
    history keeps reaching far back with coarser resolution instead of forgetting the past.
    """

    def __init__(self, points_per_partition: int = 64, max_partitions: int = 100_000) -> None:
        self.points_per_partition = max(4, points_per_partition)
        self.max_partitions = max_partitions
        self._points: OrderedDict[tuple[str, int], tuple[list[int], list[int]]] = OrderedDict()

    def add(self, topic: str, partition: int, offset: int, ts_ms: int) -> None:
        key = (topic, partition)
        entry = self._points.get(key)
        if entry is None:
            entry = ([], [])
            self._points[key] = entry
            if len(self._points) > self.max_partitions:
                self._points.popitem(last=False)
        else:
            self._points.move_to_end(key)
        offsets, times = entry
        i = bisect.bisect_left(offsets, offset)
        if i < len(offsets) and offsets[i] == offset:
            times[i] = min(times[i], ts_ms)
        else:
            offsets.insert(i, offset)
            times.insert(i, ts_ms)
        _make_monotonic(times)
        if len(offsets) > self.points_per_partition:
            half = len(offsets) // 2
            del offsets[1:half:2]
            del times[1:half:2]

    def estimate(self, topic: str, partition: int, offset: int) -> tuple[int | None, str]:
        """Estimated produce time (ms) of the record at ``offset`` and the method used."""
        entry = self._points.get((topic, partition))
        if not entry or not entry[0]:
            return None, UNKNOWN
        offsets, times = entry
        i = bisect.bisect_left(offsets, offset)
        if i < len(offsets) and offsets[i] == offset:
            return times[i], INTERPOLATED
        if i == 0:
            return times[0], LOWER_BOUND
        if i == len(offsets):
            return times[-1], INTERPOLATED
        o1, o2, t1, t2 = offsets[i - 1], offsets[i], times[i - 1], times[i]
        return int(t1 + (offset - o1) * (t2 - t1) / (o2 - o1)), INTERPOLATED

    def forget(self, keep: Iterable[tuple[str, int]]) -> None:
        keep_set = set(keep)
        for key in [k for k in self._points if k not in keep_set]:
            del self._points[key]

    def __len__(self) -> int:
        return len(self._points)


def _make_monotonic(times: list[int]) -> None:
    # Producer clocks and CreateTime can disagree slightly; keep times non-decreasing in offset.
    for j in range(len(times) - 2, -1, -1):
        if times[j] > times[j + 1]:
            times[j] = times[j + 1]


def lag_seconds(
    now_ms: int,
    committed: int,
    lag_messages: int,
    found: FoundRecord | None,
    history_estimate: tuple[int | None, str],
) -> tuple[float | None, str]:
    """Choose the best available answer for one partition (pure)."""
    if lag_messages <= 0:
        return 0.0, CAUGHT_UP
    if found is not None and found.offset == committed and found.ts_ms >= 0:
        return max(0.0, (now_ms - found.ts_ms) / 1000.0), RECORD_TIMESTAMP
    ts, method = history_estimate
    if ts is not None and method != LOWER_BOUND:
        return max(0.0, (now_ms - ts) / 1000.0), INTERPOLATED
    if found is not None and found.ts_ms >= 0 and not found.is_end:
        return max(0.0, (now_ms - found.ts_ms) / 1000.0), NEXT_RECORD
    if ts is not None:
        return max(0.0, (now_ms - ts) / 1000.0), LOWER_BOUND
    return None, UNKNOWN


# The methods as small integer codes for the array path (:func:`lag_seconds_array`).
METHODS: tuple[str, ...] = (CAUGHT_UP, RECORD_TIMESTAMP, INTERPOLATED, NEXT_RECORD, LOWER_BOUND, UNKNOWN)
METHOD_CODE = {m: i for i, m in enumerate(METHODS)}


def lag_seconds_array(
    now_ms: int,
    offset: np.ndarray,
    lag_messages: np.ndarray,
    found: np.ndarray,
    found_offset: np.ndarray,
    found_ts_ms: np.ndarray,
    found_is_end: np.ndarray,
    estimate_ts_ms: np.ndarray,
    estimate_method: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lag_seconds` of many partitions at once: ``(seconds, method codes)``, seconds NaN
    where it answers None. ``found`` marks where a :class:`FoundRecord` was read (its fields in
    ``found_*``); ``estimate_ts_ms`` / ``estimate_method`` are the history's estimate
    (``estimate_method`` a :data:`METHOD_CODE`; ``estimate_ts_ms`` ignored where it is
    ``UNKNOWN``, the estimate's None). Same choices, same arithmetic (int64 milliseconds)."""
    n = len(offset)
    seconds = np.full(n, np.nan)
    method = np.full(n, METHOD_CODE[UNKNOWN], np.uint8)
    has_estimate = estimate_method != METHOD_CODE[UNKNOWN]
    choices = (
        (lag_messages <= 0, CAUGHT_UP, None),
        (found & (found_offset == offset) & (found_ts_ms >= 0), RECORD_TIMESTAMP, found_ts_ms),
        (has_estimate & (estimate_method != METHOD_CODE[LOWER_BOUND]), INTERPOLATED, estimate_ts_ms),
        (found & (found_ts_ms >= 0) & ~found_is_end, NEXT_RECORD, found_ts_ms),
        (has_estimate, LOWER_BOUND, estimate_ts_ms),
    )
    todo = np.ones(n, bool)
    for cond, name, ts in choices:
        pick = todo & cond
        method[pick] = METHOD_CODE[name]
        seconds[pick] = 0.0 if ts is None else np.maximum(0.0, (now_ms - ts[pick]) / 1000.0)
        todo &= ~pick
    return seconds, method
