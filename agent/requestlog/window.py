"""10-second windows of request-log timings: a sketch per (request type, stage), slow exemplars.

A window is ``[start, start + window_ms)`` of the line timestamps (the broker's clock at
request completion), so re-reading the same lines always yields the same windows and the same
record keys. A window closes when a line at least ``grace_ms`` past its end has been seen, or
when the caller says the wall clock has passed that point (:meth:`WindowAggregator.close_due`).
A line for a window that has already closed is dropped as ``late``.

Values are appended to small per-stage lists and folded into DDSketch buckets (the exact key
arithmetic of :mod:`linkwatch.sketch`) and fixed histogram buckets every :data:`CHUNK` values,
so memory per (request type, stage) is bounded by the chunk and the number of buckets, whatever
the request rate.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count

from agent.requestlog.parse import ParsedRequest, client_id_of, partitions_of
from linkwatch.records import STAGES, SlowRequest, StageSketch
from linkwatch.sketch import _MAPPING, MIN_POSITIVE_MS, LatencySketch

CHUNK = 2048
MAX_OPEN_WINDOWS = 4
# Fixed log-spaced histogram bounds (ms): 0.25 ms x 2^k up to ~33 s; the same on every broker so
# PromQL can sum buckets across brokers.
HISTOGRAM_BOUNDS_MS: tuple[float, ...] = tuple(0.25 * 2**k for k in range(18))

_LOG2_MULT = _MAPPING._multiplier
_MIN_KEY_VALUE = max(MIN_POSITIVE_MS, _MAPPING.min_possible)


class StageAccumulator:
    """One stage of one request type in one window: DDSketch buckets + fixed histogram buckets."""

    __slots__ = ("buckets", "count", "hist", "max", "min", "sum", "zero")

    def __init__(self) -> None:
        self.zero = 0
        self.buckets: Counter[int] = Counter()
        self.hist = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
        self.count = 0
        self.sum = 0.0
        self.min = math.inf
        self.max = -math.inf

    def fold(self, values: tuple[float, ...] | list[float]) -> None:
        if not values:
            return
        self.count += len(values)
        self.sum += math.fsum(values)
        self.min = min(self.min, min(values))
        self.max = max(self.max, max(values))
        log, ceil, mult, floor_v = math.log, math.ceil, _LOG2_MULT, _MIN_KEY_VALUE
        # Same expression as ddsketch's LogarithmicMapping.key, so buckets match LatencySketch.add.
        keys = [int(ceil(log(v, 2) * mult)) for v in values if v > floor_v]
        self.zero += len(values) - len(keys)
        self.buckets.update(keys)
        hist, bounds = self.hist, HISTOGRAM_BOUNDS_MS
        for v in values:
            hist[bisect_left(bounds, v)] += 1

    def sketch(self) -> LatencySketch:
        return LatencySketch.from_dict(self.sketch_dict())

    def sketch_dict(self) -> dict[str, object]:
        n = self.count
        return {
            "zero": self.zero,
            "buckets": {str(k): c for k, c in sorted(self.buckets.items())},
            "count": n,
            "sum": self.sum,
            "min": self.min if n else 0.0,
            "max": self.max if n else 0.0,
        }


class RequestAccumulator:
    """All stages of one request type in one window; stage tuples are buffered, then folded
    column by column (one list append per line on the hot path)."""

    __slots__ = ("pending", "stages")

    def __init__(self) -> None:
        self.pending: list[tuple[float, ...]] = []
        self.stages = tuple(StageAccumulator() for _ in STAGES)

    def fold(self) -> None:
        if self.pending:
            columns = zip(*self.pending, strict=True)
            self.pending = []
            for acc, column in zip(self.stages, columns, strict=True):
                acc.fold(column)


@dataclass
class Window:
    start_ms: int
    requests: dict[str, RequestAccumulator] = field(default_factory=dict)
    slow: list[tuple[float, int, ParsedRequest]] = field(default_factory=list)  # min-heap
    slow_seen: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ClosedWindow:
    """What a closed window produced; ``histograms`` feed the Prometheus collector."""

    start_ms: int
    sketches: list[StageSketch]
    slow_requests: list[SlowRequest]
    slow_counts: dict[str, int]
    histograms: dict[tuple[str, str], tuple[list[int], float]]  # (request, stage) -> (hist, sum)
    values: dict[tuple[str, str], StageAccumulator]


class WindowAggregator:
    """Feeds parsed lines into windows; ``close_*`` returns :class:`ClosedWindow` objects."""

    def __init__(
        self,
        *,
        cluster: str,
        broker: int,
        source: str | None = None,
        window_s: int = 10,
        grace_s: float = 2.0,
        slow_threshold_ms: float = 300.0,
        max_exemplars: int = 20,
        on_late: Callable[[ParsedRequest], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.broker = broker
        self.source = source or f"broker-{broker}"
        self.window_ms = window_s * 1000
        self.grace_ms = int(grace_s * 1000)
        self.slow_threshold_ms = slow_threshold_ms
        self.max_exemplars = max_exemplars
        self.on_late = on_late
        self._windows: dict[int, Window] = {}
        self._closed_before = -1  # windows starting before this are closed
        self._watermark = -1
        self._seq = count()

    def add(self, req: ParsedRequest) -> list[ClosedWindow]:
        """Account one request; returns windows this line's timestamp closed (usually none)."""
        ts = req.ts_ms
        start = ts - ts % self.window_ms
        if start < self._closed_before:
            if self.on_late is not None:
                self.on_late(req)
            return []
        win = self._windows.get(start)
        if win is None:
            win = self._windows[start] = Window(start)
        acc = win.requests.get(req.request)
        if acc is None:
            acc = win.requests[req.request] = RequestAccumulator()
        acc.pending.append(req.stages)
        if len(acc.pending) >= CHUNK:
            acc.fold()
        total = req.stages[6]
        if total >= self.slow_threshold_ms:
            self._keep_slow(win, req, total)
        if ts > self._watermark:
            self._watermark = ts
            if ts - self.grace_ms >= self._oldest_end() or len(self._windows) > MAX_OPEN_WINDOWS:
                return self.close_due(ts)
        return []

    def _oldest_end(self) -> int:
        return min(self._windows) + self.window_ms if self._windows else 1 << 62

    def _keep_slow(self, win: Window, req: ParsedRequest, total: float) -> None:
        win.slow_seen[req.request] = win.slow_seen.get(req.request, 0) + 1
        item = (total, next(self._seq), req)
        if len(win.slow) < self.max_exemplars:
            heapq.heappush(win.slow, item)
        elif total > win.slow[0][0]:
            heapq.heapreplace(win.slow, item)

    def close_due(self, now_ms: int) -> list[ClosedWindow]:
        """Close every window whose end + grace is at or before ``now_ms`` (oldest first),
        and the oldest ones beyond :data:`MAX_OPEN_WINDOWS`."""
        out = []
        for start in sorted(self._windows):
            if start + self.window_ms + self.grace_ms <= now_ms or len(self._windows) > MAX_OPEN_WINDOWS:
                out.append(self._close(start))
        return out

    def close_all(self) -> list[ClosedWindow]:
        return [self._close(start) for start in sorted(self._windows)]

    def _close(self, start: int) -> ClosedWindow:
        win = self._windows.pop(start)
        self._closed_before = max(self._closed_before, start + self.window_ms)
        ts_ms = start
        sketches, hists, values = [], {}, {}
        for request, racc in sorted(win.requests.items()):
            racc.fold()
            for stage, acc in zip(STAGES, racc.stages, strict=True):
                sketch = acc.sketch_dict()
                sketches.append(
                    StageSketch(
                        cluster=self.cluster,
                        source=self.source,
                        ts_ms=ts_ms,
                        broker=self.broker,
                        request=request,
                        stage=stage,
                        window_s=self.window_ms // 1000,
                        sketch=sketch,
                    )
                )
                hists[(request, stage)] = (acc.hist, acc.sum)
                values[(request, stage)] = acc
        slow = [self._exemplar(req) for _, _, req in sorted(win.slow, key=lambda x: (x[2].ts_ms, x[1]))]
        return ClosedWindow(start, sketches, slow, dict(win.slow_seen), hists, values)

    def _exemplar(self, req: ParsedRequest) -> SlowRequest:
        client_id, correlation_id = client_id_of(req.line)
        return SlowRequest(
            cluster=self.cluster,
            source=self.source,
            ts_ms=req.ts_ms,
            broker=self.broker,
            request=req.request,
            client_id=client_id,
            correlation_id=correlation_id,
            connection=req.connection,
            stages_ms=dict(zip(STAGES, (float(v) for v in req.stages), strict=True)),
            partitions=partitions_of(req.line),
        )

    @property
    def open_windows(self) -> int:
        return len(self._windows)
