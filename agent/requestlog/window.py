"""10-second windows of request-log timings: a sketch per (request type, stage), slow exemplars.

A window is ``[start, start + window_ms)`` of the line timestamps (the broker's clock at
request completion), so re-reading the same lines always yields the same windows and the same
record keys. A window closes when a line at least ``grace_ms`` past its end has been seen, or
when the caller says the wall clock has passed that point (:meth:`WindowAggregator.close_due`).
A line for a window that has already closed is dropped as ``late``. A line stamped more than
``max_ahead_s`` ahead of the wall clock is dropped as ``future_timestamp`` (:attr:`on_future`):
the broker writes a line when the request completes, so such a stamp is wrong, and accepting it
would close every open window at once and make the lines after it late. Closing by a line's
timestamp never goes past the wall clock either, for the same reason.

Slow-request exemplars: a request is slow when its total time is at least the threshold; for
fetches the remote stage (purgatory, waiting up to ``maxWaitMs`` for data by design) is left
out, so idle long polls are not reported as slow. At most ``max_exemplars`` per window are kept
(the slowest).

Per connection: the time the broker spent serving each connection's requests that completed in
the window (their total times, a fetch's without its wait in purgatory, in whole microseconds:
:func:`~agent.requestlog.scanner.busy_us`),
at most :data:`MAX_CONNECTIONS` connections per request type (a connection seen after that is not
timed; the window's ``untracked_busy_us`` says how much service that left out). A broker reads
one request per connection at a time, so a connection it served for at least
:data:`SATURATED_SHARE` of the window was served back to back: its client's next request was
already waiting, where no broker timer runs (``docs/analyzer.md``, "What it cannot see"). The
``total`` sketch of each request type carries how many connections it served
(``connections``) and how many of them were saturated (``saturated_connections``).

Values are counted per distinct value (rows of the general path, decoded tails of the bulk
path, see :class:`RequestAccumulator`) and folded into DDSketch buckets (the exact key arithmetic of
:mod:`linkwatch.sketch`) and fixed histogram buckets once per distinct value, so memory per
(request type, stage) is bounded by :data:`RAW_KEYS` and the number of buckets, whatever the
request rate. Sums are exact (correctly rounded), so the order lines are accounted in never
changes a window's record.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import operator
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import count, filterfalse

from agent.requestlog.parse import STAGE_KEYS, ParsedRequest, exemplar_fields
from agent.requestlog.scanner import busy_us, count_rows
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, STAGES, SlowRequest, StageSketch

try:  # the C helper behind Counter.update (CPython): counts without per-item Python calls
    from collections import _count_elements  # type: ignore[attr-defined]
except ImportError:  # another interpreter: the same contract in Python

    def _count_elements(mapping: dict, iterable: Iterable) -> None:
        get = mapping.get
        for elem in iterable:
            mapping[elem] = get(elem, 0) + 1


from linkwatch.sketch import _MAPPING, MIN_POSITIVE_MS, LatencySketch

CHUNK = 2048
# Stage rows of the compiled path a request type's accumulator holds before it folds them.
BULK_ROWS = 1 << 15
# Distinct values a stage's raw counts may hold before they are folded into buckets.
RAW_KEYS = 1 << 14
_FETCHES = frozenset((FETCH_CONSUMER, FETCH_FOLLOWER))
MAX_OPEN_WINDOWS = 4
# Connections timed per (window, request type); a broker's max.connections is usually far below.
MAX_CONNECTIONS = 1 << 14
# A connection served at least this share of a window was served back to back (saturated).
SATURATED_SHARE = 0.9
# Fixed log-spaced histogram bounds (ms): 0.25 ms x 2^k up to ~33 s; the same on every broker so
# PromQL can sum buckets across brokers.
HISTOGRAM_BOUNDS_MS: tuple[float, ...] = tuple(0.25 * 2**k for k in range(18))

_LOG2_MULT = _MAPPING._multiplier
_MIN_KEY_VALUE = max(MIN_POSITIVE_MS, _MAPPING.min_possible)


MEMO_SIZE = 1 << 16
_HIST_TOP = len(HISTOGRAM_BOUNDS_MS)
_HIST_BITS = 5  # histogram index < 32
_ZERO_CODE = 1 << 40  # the zero bucket (no DDSketch key is near 2**35)
# Sums are kept exact: every finite double is a multiple of 2**-1074, so a value times 2**1074 is
# an int, and an int sum divided by 2**1074 is the correctly rounded sum (as math.fsum's), in
# whatever order and grouping the values came.
_SUM_BITS = 1074


def bucket_code(v: float) -> int:
    """DDSketch key and fixed histogram index of one value, as one int (``key << 5 | index``),
    or ``_ZERO_CODE`` for DDSketch's zero bucket. The key is DDSketch's own LogarithmicMapping
    expression, so the buckets are the ones ``LatencySketch.add`` gives."""
    if v > _MIN_KEY_VALUE:
        # Histogram bound i is 0.25 ms * 2^i: v falls in the first i with log2(v) + 2 <= i.
        i = math.ceil(math.log2(v) + 2.0)
        i = 0 if i < 0 else (i if i <= _HIST_TOP else _HIST_TOP)
        return (math.ceil(math.log(v, 2) * _LOG2_MULT) << _HIST_BITS) | i
    return _ZERO_CODE


def sum_units(v: float) -> int:
    """``v * 2**1074`` exactly (``v`` a finite int or float)."""
    num, den = v.as_integer_ratio()
    return num << (_SUM_BITS - den.bit_length() + 1)


class ValueMemo:
    """What a stage value (an int or float) means to the accumulators, remembered per distinct
    value: its value as float, bucket code (:func:`bucket_code`) and exact sum units
    (:func:`sum_units`), in three dicts so that lookups over many keys are C loops
    (``map(memo.code.__getitem__, keys)``). Bounded: cleared when full, only between folds. Not
    thread-safe: one thread uses one memo."""

    __slots__ = ("code", "size", "units", "value")

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self.value: dict[object, float] = {}
        self.code: dict[object, int] = {}
        self.units: dict[object, int] = {}
        self.size = size

    def learn(self, keys: list[object]) -> None:
        """Make every one of ``keys`` known."""
        if len(self.value) + len(keys) > self.size:
            self.value.clear()
            self.code.clear()
            self.units.clear()
        known = self.value
        for key in filterfalse(known.__contains__, keys):
            self.value[key] = float(key)  # type: ignore[arg-type]
            self.code[key] = bucket_code(key)  # type: ignore[arg-type]
            self.units[key] = sum_units(key)  # type: ignore[arg-type]


class StageAccumulator:
    """One stage of one request type in one window: how many values per bucket code (DDSketch
    key and histogram index in one int, :func:`bucket_code`), split into the DDSketch buckets
    and the fixed histogram buckets when asked (at close); count, exact sum, min and max."""

    __slots__ = ("codes", "count", "max", "min", "units")

    def __init__(self) -> None:
        self.codes: Counter[int] = Counter()
        self.count = 0
        self.units = 0  # the exact sum times 2**1074
        self.min = math.inf
        self.max = -math.inf

    def fold(self, values: Mapping[object, int], memo: ValueMemo) -> None:
        """Account ``values`` (key -> how many; keys as :class:`ValueMemo` reads them), once
        per distinct key: C loops over the keys, a Python one only to add to the codes."""
        if not values:
            return
        keys = list(values)
        counts = list(values.values())
        memo.learn(keys)
        self.count += sum(counts)
        self.units += sum(map(operator.mul, counts, map(memo.units.__getitem__, keys)))
        vs = list(map(memo.value.__getitem__, keys))
        self.min = min(self.min, min(vs))
        self.max = max(self.max, max(vs))
        codes = self.codes
        get = codes.get
        for code, n in zip(map(memo.code.__getitem__, keys), counts, strict=True):
            codes[code] = get(code, 0) + n

    @property
    def sum(self) -> float:
        """The sum of the values, correctly rounded (exactly ``math.fsum`` of them all)."""
        return self.units / (1 << _SUM_BITS)

    @property
    def zero(self) -> int:
        """Values in DDSketch's zero bucket."""
        return self.codes.get(_ZERO_CODE, 0)

    @property
    def buckets(self) -> Counter[int]:
        """DDSketch key -> count (the zero bucket not included)."""
        out: Counter[int] = Counter()
        for code, n in self.codes.items():
            if code != _ZERO_CODE:
                out[code >> _HIST_BITS] += n
        return out

    @property
    def hist(self) -> list[int]:
        """Counts per fixed histogram bucket (:data:`HISTOGRAM_BOUNDS_MS`, then +Inf)."""
        out = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
        for code, n in self.codes.items():
            out[0 if code == _ZERO_CODE else code & 31] += n
        return out

    def sketch(self) -> LatencySketch:
        return LatencySketch.from_dict(self.sketch_dict())

    def sketch_dict(self) -> dict[str, object]:
        n = self.count
        return {
            "zero": self.zero,
            "buckets": {str(k): c for k, c in sorted(self.buckets.items())},
            "count": n,
            "sum": self.sum,
            "min": float(self.min) if n else 0.0,
            "max": float(self.max) if n else 0.0,
        }


# The order of the stage times in a buffered row: the order the log line writes them in
# (totalTimeMs first), so the ingest loop buffers what one orjson call over many lines gives,
# with no tuple per line. Indexes into STAGES (whose order is STAGE_KEYS').
ROW_ORDER = (6, 0, 1, 2, 3, 4, 5)
ROW_TOTAL, ROW_REMOTE = ROW_ORDER.index(6), ROW_ORDER.index(2)


# The attributes of a decoded tail (agent.requestlog.typed.Tail) in the row order.
ROW_GETTERS = tuple(operator.attrgetter(STAGE_KEYS[i]) for i in ROW_ORDER)


def row_of(stages: tuple[float, ...]) -> tuple[float, ...]:
    """A :data:`STAGE_KEYS`-ordered stage tuple as a buffered row (:data:`ROW_ORDER`)."""
    return (stages[6], stages[0], stages[1], stages[2], stages[3], stages[4], stages[5])


class RequestAccumulator:
    """All stages of one request type in one window. The general path buffers rows of stage
    times (:data:`ROW_ORDER`) in ``pending`` (one list append per line); the bulk path counts a
    block's decoded tails' stage times per stage in ``raw`` (:meth:`count`). Both
    are folded into each stage's buckets once per distinct value: rows every :data:`CHUNK`,
    raw counts when a stage holds :data:`RAW_KEYS` distinct ones, and all at close. The compiled
    path's rows are held in ``bulk`` and counted when folded (:meth:`add_rows`)."""

    __slots__ = ("bulk", "busy", "columns", "memo", "pending", "raw", "stages", "untracked_us")

    def __init__(self, memo: ValueMemo | None = None) -> None:
        # connection -> µs the broker spent serving its requests (bounded: MAX_CONNECTIONS)
        self.busy: dict[str, int] = {}
        self.untracked_us = 0  # busy µs of connections beyond MAX_CONNECTIONS
        self.pending: list[tuple[float, ...] | list[float]] = []
        self.bulk: array | None = None  # stage rows of the compiled path, 7 doubles a row
        self.stages = tuple(StageAccumulator() for _ in STAGES)
        self.raw: tuple[Counter[object], ...] = tuple(Counter() for _ in STAGES)
        self.columns = tuple(self.raw[i] for i in ROW_ORDER)  # raw in the log line's order
        self.memo = memo if memo is not None else ValueMemo()

    def serve(self, connection: str, us: int) -> None:
        """Add ``us`` µs of service to ``connection``'s busy time."""
        busy = self.busy
        if connection in busy:
            busy[connection] += us
        elif len(busy) < MAX_CONNECTIONS:
            busy[connection] = us
        else:
            self.untracked_us += us

    def fold(self) -> None:
        if self.bulk is not None:
            bulk, self.bulk = self.bulk, None
            self._fold_bulk(bulk)
        if self.pending:
            rows = zip(*self.pending, strict=True)
            self.pending = []
            for raw, column in zip(self.columns, rows, strict=True):
                raw.update(column)
        for acc, raw in zip(self.stages, self.raw, strict=True):
            if raw:
                acc.fold(raw, self.memo)
                raw.clear()

    def add_rows(self, rows: memoryview) -> None:
        """Hold stage rows of the compiled path (doubles, 7 a row in :data:`ROW_ORDER`, one row per
        line) until :data:`BULK_ROWS` are held (bounded memory per window), then fold them."""
        if self.bulk is None:
            self.bulk = array("d")
        self.bulk.frombytes(rows.cast("B"))
        if len(self.bulk) >= BULK_ROWS * len(ROW_ORDER):
            self.fold()

    def _fold_bulk(self, bulk: array) -> None:
        """The held rows counted per distinct value of each stage (one C call, a hash per stage)
        and folded as the other paths' counts are: a float and an int of the same value are one
        key of a Counter, so the buckets, exact sums, min and max are the same whichever path read
        it."""
        for stage, (values, counts) in zip(ROW_ORDER, count_rows(bulk), strict=True):
            self.stages[stage].fold(dict(zip(values, counts, strict=True)), self.memo)

    def count(self, tails: list[object]) -> None:
        """Count the stage times of decoded tails (:class:`agent.requestlog.typed.Tail`), one
        C loop per stage (``Counter.update``'s own helper over an attribute getter, without its
        per-call checks); fold if a stage holds :data:`RAW_KEYS` distinct values (bounded memory
        per window)."""
        for getter, raw in zip(ROW_GETTERS, self.columns, strict=True):
            _count_elements(raw, map(getter, tails))
        if max(map(len, self.raw)) >= RAW_KEYS:
            self.fold()


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
    # request -> each timed connection's busy µs (the ``total`` sketch's connection figures)
    busy: dict[str, tuple[int, ...]] = field(default_factory=dict)
    untracked_busy_us: int = 0  # busy µs of connections beyond MAX_CONNECTIONS (not timed)

    @property
    def requests_seen(self) -> int:
        """Request lines in the window (each line is in its type's ``total`` sketch once)."""
        return sum(int(s.sketch.get("count", 0)) for s in self.sketches if s.stage == "total")

    def scaled(self, factor: int, exact: bool = True) -> ClosedWindow:
        """The window as estimated for all requests when 1 in ``factor`` was logged (sampled
        capture, :mod:`agent.capture`): every count and sum times ``factor``, ``capture_ratio``
        1/factor. Each logged request stands for ``factor``, so a quantile is still one of the
        logged requests' (at rank ``floor(q (n - 1))`` or the next), minima and maxima are
        unchanged. Exemplars and ``values`` stay the logged requests themselves. ``exact``
        False marks the sketches ``capture_exact=False`` (the slice did not go as planned)."""
        if factor == 1 and exact:
            return self
        window_us = self.sketches[0].window_s * 1_000_000 if self.sketches else 0
        sketches = [
            dataclasses.replace(
                s,
                sketch=_scaled_sketch(s.sketch, factor),
                capture_ratio=1 / factor,
                capture_exact=exact,
                saturated_connections=saturated(self.busy.get(s.request, ()), window_us, factor)
                if s.stage == "total"
                else 0,
            )
            for s in self.sketches
        ]
        return dataclasses.replace(
            self,
            sketches=sketches,
            slow_counts={k: v * factor for k, v in self.slow_counts.items()},
            histograms={
                k: ([c * factor for c in h], total * factor) for k, (h, total) in self.histograms.items()
            },
        )


def saturated(busy_us: Iterable[int], window_us: int, factor: int = 1) -> int:
    """How many of the connections served ``busy_us`` each were served at least
    :data:`SATURATED_SHARE` of a window of ``window_us`` (their busy time times ``factor``: a
    sampled capture logged 1 in ``factor`` of the window's requests)."""
    floor = SATURATED_SHARE * window_us
    return sum(1 for us in busy_us if us * factor >= floor)


def _scaled_sketch(d: dict, factor: int) -> dict:
    out = dict(d)
    out["zero"] = int(d.get("zero", 0)) * factor
    out["buckets"] = {k: int(v) * factor for k, v in d.get("buckets", {}).items()}
    out["count"] = int(d.get("count", 0)) * factor
    out["sum"] = float(d.get("sum", 0.0)) * factor
    return out


class WindowAggregator:
    """Feeds parsed lines into windows; ``close_*`` returns :class:`ClosedWindow` objects."""

    def __init__(
        self,
        *,
        cluster: str,
        broker: int,
        source: str | None = None,
        window_s: int = 10,
        grace_s: float = 1.0,
        slow_threshold_ms: float = 300.0,
        max_exemplars: int = 20,
        on_late: Callable[[ParsedRequest], None] | None = None,
        max_ahead_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        on_future: Callable[[ParsedRequest], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self.broker = broker
        self.source = source or f"broker-{broker}"
        self.window_ms = window_s * 1000
        self.grace_ms = int(grace_s * 1000)
        self.slow_threshold_ms = slow_threshold_ms
        self.max_exemplars = max_exemplars
        self.on_late = on_late
        self.on_future = on_future
        self.max_ahead_ms = int(max_ahead_s * 1000)
        self.clock = clock  # epoch seconds
        # Timestamps above this are checked against the clock (:meth:`too_far_ahead`); below
        # it, one comparison per line and no clock read.
        self.ahead_limit = -1
        self._windows: dict[int, Window] = {}
        self._closed_before = -1  # windows starting before this are closed
        self._watermark = -1
        self._seq = count()
        # What a value means does not depend on the window: one memo per aggregator, warm across
        # its windows. Never one per process: agents run side by side in one process (tests, the
        # demo), and one thread's clear between another's learn and lookup loses keys.
        self.memo = ValueMemo()

    def add(self, req: ParsedRequest) -> list[ClosedWindow]:
        """Account one request; returns windows this line's timestamp closed (usually none)."""
        ts = req.ts_ms
        if ts > self.ahead_limit and self.too_far_ahead(ts):
            if self.on_future is not None:
                self.on_future(req)
            return []
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
            acc = win.requests[req.request] = RequestAccumulator(self.memo)
        acc.pending.append(row_of(req.stages))
        if len(acc.pending) >= CHUNK:
            acc.fold()
        total = req.stages[6]
        acc.serve(req.connection, busy_us(req.request, total, req.stages[2]))
        if total >= self.slow_threshold_ms:
            if req.request in _FETCHES:
                # A fetch waits up to maxWaitMs in purgatory (remote) by design: not slowness.
                total -= req.stages[2]
            if total >= self.slow_threshold_ms:
                self.keep_slow(win, req, total)
        if ts > self._watermark:
            self._watermark = ts
            if ts - self.grace_ms >= self._oldest_end() or len(self._windows) > MAX_OPEN_WINDOWS:
                return self.close_by_line(ts)
        return []

    @property
    def watermark(self) -> int:
        """The newest line timestamp accounted (ms); a caller that accounts lines itself (the
        fast path of :func:`agent.requestlog.ingest.ingest_lines`) sets it before it adds or
        closes, and reads it back after."""
        return self._watermark

    @watermark.setter
    def watermark(self, ts_ms: int) -> None:
        self._watermark = ts_ms

    @property
    def closed_before(self) -> int:
        """Windows starting before this are closed: a line in one is late."""
        return self._closed_before

    def window(self, start: int) -> Window:
        """The open window starting at ``start`` (opened now if needed; check
        :attr:`closed_before` first)."""
        win = self._windows.get(start)
        if win is None:
            win = self._windows[start] = Window(start)
        return win

    def too_far_ahead(self, ts: int) -> bool:
        """Whether ``ts`` is more than ``max_ahead_s`` ahead of the clock (which is read here,
        and moves :attr:`ahead_limit`). Callers test ``ts > ahead_limit`` first."""
        self.ahead_limit = int(self.clock() * 1000) + self.max_ahead_ms
        return ts > self.ahead_limit

    def close_by_line(self, ts: int) -> list[ClosedWindow]:
        """:meth:`close_due` for a line at ``ts``, but never past the wall clock: a line a little
        ahead of it (within ``max_ahead_s``) must not close windows still being written."""
        return self.close_due(min(ts, int(self.clock() * 1000)))

    def close_threshold(self) -> int:
        """The first line timestamp above the watermark that makes :meth:`add` close windows."""
        if len(self._windows) > MAX_OPEN_WINDOWS:
            return -(1 << 62)
        return self._oldest_end() + self.grace_ms

    def _oldest_end(self) -> int:
        return min(self._windows) + self.window_ms if self._windows else 1 << 62

    def keep_slow(self, win: Window, req: ParsedRequest, total: float) -> None:
        """Count a slow request in ``win`` and keep it if it is among the slowest exemplars."""
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
        sketches, hists, values, busy = [], {}, {}, {}
        announced = len(win.requests) * len(STAGES)  # every sketch of the window says how many
        window_us = self.window_ms * 1000
        untracked = 0
        for request, racc in sorted(win.requests.items()):
            racc.fold()
            served = busy[request] = tuple(sorted(racc.busy.values()))
            untracked += racc.untracked_us
            for stage, acc in zip(STAGES, racc.stages, strict=True):
                sketch = acc.sketch_dict()
                total = stage == "total"
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
                        window_sketches=announced,
                        connections=len(served) if total else 0,
                        saturated_connections=saturated(served, window_us) if total else 0,
                    )
                )
                hists[(request, stage)] = (acc.hist, acc.sum)
                values[(request, stage)] = acc
        slow = [self._exemplar(req) for _, _, req in sorted(win.slow, key=lambda x: (x[2].ts_ms, x[1]))]
        return ClosedWindow(start, sketches, slow, dict(win.slow_seen), hists, values, busy, untracked)

    def _exemplar(self, req: ParsedRequest) -> SlowRequest:
        client_id, correlation_id, partitions = exemplar_fields(req.line)
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
            partitions=partitions,
        )

    @property
    def open_windows(self) -> int:
        return len(self._windows)
