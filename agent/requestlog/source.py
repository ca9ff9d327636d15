"""The request-log source: follower + parser + window aggregator, with drops counted by reason.

:meth:`RequestLogSource.poll` reads what is there, never blocks, never raises for bad data, and
returns the windows that closed. :func:`ingest_block` is the loop over a block of lines as the
follower reads them; :func:`ingest_lines` the same over given lines (tests, benchmarks, one-shot
replays of a captured log); :func:`extract` the fast extractor both use.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Iterable
from datetime import tzinfo
from pathlib import Path

import numpy as np
import orjson

from agent.health import Health
from agent.requestlog.follow import FileFollower
from agent.requestlog.parse import (
    MAX_STAGE_MS,
    REQUEST_TYPES,
    STAGE_KEYS,
    Drop,
    LineParser,
    ParsedRequest,
    TimestampParser,
    is_follower_fetch,
)
from agent.requestlog.scanner import (
    FETCH_INDEX,
    FOLLOWER_INDEX,
    KIND_REQUESTS,
    BlockScan,
    announce,
    block_scan,
)
from agent.requestlog.typed import decode_tails
from agent.requestlog.window import (
    CHUNK,
    ROW_GETTERS,
    ROW_ORDER,
    ROW_REMOTE,
    ROW_TOTAL,
    ClosedWindow,
    RequestAccumulator,
    Window,
    WindowAggregator,
)
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER


class RequestLogSource:
    NAME = "request_log"

    def __init__(
        self,
        path: Path | str,
        aggregator: WindowAggregator,
        health: Health,
        *,
        position_file: Path | str | None = None,
        start_at_end: bool = True,
        max_line_bytes: int = 1 << 20,
        zone: tzinfo | None = None,
    ) -> None:
        self.aggregator = aggregator
        self.health = health
        self.parser = LineParser(max_line_bytes, zone)
        self.follower = FileFollower(
            path,
            position_file=position_file,
            start_at_end=start_at_end,
            max_line_bytes=max_line_bytes,
            on_skip=lambda reason, detail: health.drop(reason, detail, context=str(path)),
        )
        health.request_log_scanner = announce()
        aggregator.on_late = self._late
        aggregator.on_future = self._future

    def _late(self, req: ParsedRequest) -> None:
        self.health.drop("late", f"{req.request} at {req.ts_ms}", context=str(self.follower.path))

    def _future(self, req: ParsedRequest) -> None:
        self.health.drop("future_timestamp", f"{req.request} at {req.ts_ms}", context=str(self.follower.path))

    def poll(self, now_ms: int | None = None) -> list[ClosedWindow]:
        """Read available lines, then close windows the wall clock has passed.

        Closing by the clock happens whenever the follower has read to the end of the log (a
        busy log too), never while it is still behind: lines not read yet may belong to them."""
        closed: list[ClosedWindow] = []
        for block in self.follower.iter_blocks():
            closed += ingest_block(block, self.parser, self.aggregator, self.health, str(self.follower.path))
        self.health.set_up(self.NAME, self.follower.up, f"{self.follower.path} is missing")
        self.health.log_behind_bytes = self.follower.behind_bytes
        if self.follower.caught_up:
            closed += self.aggregator.close_due(now_ms if now_ms is not None else int(time.time() * 1000))
        self.follower.save_position()
        return closed


def ingest_lines(
    lines: Iterable[bytes],
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    """Parse and account ``lines`` (without their newlines); returns the windows they closed.

    The same result as ``aggregator.add(parser.parse(line))`` for every line; see
    :func:`ingest_block`, which this calls with the lines joined ``INGEST_CHUNK_LINES`` at a
    time (bounded memory whatever the input's length)."""
    closed_all: list[ClosedWindow] = []
    chunk: list[bytes] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= INGEST_CHUNK_LINES:
            closed_all += _ingest_chunk(chunk, parser, aggregator, health, context)
            chunk = []
    if chunk:
        closed_all += _ingest_chunk(chunk, parser, aggregator, health, context)
    return closed_all


INGEST_CHUNK_LINES = 512


def _ingest_chunk(
    lines: list[bytes], parser: LineParser, aggregator: WindowAggregator, health: Health, context: str
) -> list[ClosedWindow]:
    block = b"\n".join(lines) + b"\n"
    if block.count(b"\n") == len(lines):
        return ingest_block(block, parser, aggregator, health, context)
    # A line holding a newline is still one line: each through the general path.
    closed: list[ClosedWindow] = []
    for line in lines:
        agg_closed = _add_general(line, parser, aggregator, health, context)
        if agg_closed:
            closed += agg_closed
    health.lines_read += len(lines)
    _count_slow(closed, health)
    return closed


def ingest_block(
    block: bytes,
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    """Parse and account the lines of ``block`` (complete lines, each ending in ``\n``, as
    :meth:`FileFollower.read_blocks` gives them); returns the windows they closed.

    The same result as ``aggregator.add(parser.parse(line))`` for every line. A block of usual
    lines within one open window (the common case: a window holds ~10 s of log) is accounted in
    bulk (:func:`_ingest_compiled` when the compiled scanner is loaded, else
    :func:`_ingest_fast`); any other line by line (:func:`_ingest_ordered`)."""
    scan = block_scan()
    if scan is not None:
        closed = _ingest_compiled(block, parser, aggregator, health, scan)
    else:
        closed = _ingest_fast(block, parser, aggregator, health)
    if closed is None:
        closed = _ingest_ordered(block, parser, aggregator, health, context)
    return closed


def _ingest_ordered(
    block: bytes,
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    """:func:`ingest_block` line by line, in two passes:
    :func:`extract` reads the usual line shape by positions in the block (no object per line
    but one small tuple) and the stage times of all those lines with one orjson call; then each
    line is accounted in order, its stage row appended straight to its open window. A line of
    any other shape, and every line the aggregator must see whole (late, slow: exemplars), takes
    the general path (:meth:`LineParser.parse`, which names every drop reason).
    """
    entries, rows = extract(block, parser)
    ts_parser = parser.ts
    closed: list[ClosedWindow] = []
    agg = aggregator
    parse, add = parser.parse, agg.add
    window_ms, threshold = agg.window_ms, agg.slow_threshold_ms
    cur_start, cur = -1, None
    close_at = agg.close_threshold()
    watermark = agg.watermark
    ahead_limit = agg.ahead_limit
    k = 0
    for ts, request, at, nl in entries:
        if request is not None:
            row = rows[k]
            k += 1
        if request is None or row is None:
            if ts >= 0:  # the stamp of the line before (or this one's): what a call would have left
                ts_parser.last_ms = ts
            agg.watermark = watermark
            got = _add_general(block[at:nl], parser, agg, health, context)
            if got is not None:
                closed += got
                watermark, ahead_limit = agg.watermark, agg.ahead_limit
                cur_start, close_at = -1, agg.close_threshold()
            continue
        if ts > ahead_limit:
            if agg.too_far_ahead(ts):
                health.drop("future_timestamp", f"{request} at {ts}", context=context)
                continue
            ahead_limit = agg.ahead_limit
        start = ts - ts % window_ms
        if start != cur_start:
            if start < agg.closed_before:
                add(parse(block[at:nl]))  # late: counted there
                continue
            cur = agg.window(start)
            close_at = agg.close_threshold()
            cur_start = start
        acc = cur.requests.get(request)
        if acc is None:
            acc = cur.requests[request] = RequestAccumulator(agg.memo)
        pending = acc.pending
        pending.append(row)
        if len(pending) >= CHUNK:
            acc.fold()
        total = row[ROW_TOTAL]
        if total >= threshold:
            if request is not FETCH_CONSUMER and request is not FETCH_FOLLOWER:
                agg.keep_slow(cur, parse(block[at:nl]), total)
            elif total - row[ROW_REMOTE] >= threshold:
                # A fetch waits up to maxWaitMs in purgatory (remote) by design: not slowness.
                agg.keep_slow(cur, parse(block[at:nl]), total - row[ROW_REMOTE])
        if ts > watermark:
            watermark = ts
            if ts >= close_at:
                agg.watermark = watermark
                closed += agg.close_by_line(ts)
                cur_start, close_at = -1, agg.close_threshold()
    agg.watermark = watermark
    if entries and entries[-1][1] is not None:
        ts_parser.last_ms = entries[-1][0]
    health.lines_read += len(entries)
    _count_slow(closed, health)
    return closed


def _add_general(
    line: bytes, parser: LineParser, agg: WindowAggregator, health: Health, context: str
) -> list[ClosedWindow] | None:
    """One line through the general path; None if it was dropped (counted in ``health``)."""
    try:
        req = parser.parse(line)
    except Drop as d:
        if d.reason != "not_a_request_line" or line.strip():
            health.drop(d.reason, d.detail, context=context)
        return None
    if req.ts_ms > agg.ahead_limit and agg.too_far_ahead(req.ts_ms):
        health.drop("future_timestamp", f"{req.request} at {req.ts_ms}", context=context)
        return None
    return agg.add(req)


def _count_slow(closed: list[ClosedWindow], health: Health) -> None:
    for win in closed:
        for request, n_slow in win.slow_counts.items():
            health.slow_requests[request] += n_slow


_TOTAL_OF = ROW_GETTERS[ROW_TOTAL]
_REMOTE_OF = ROW_GETTERS[ROW_REMOTE]


def _ingest_fast(
    block: bytes, parser: LineParser, agg: WindowAggregator, health: Health
) -> list[ClosedWindow] | None:
    """:func:`ingest_block` for a block whose every line is of the usual shape, all in one
    window that stays open: what the line-by-line path would account, in bulk. None (and
    nothing changed but caches) for any other block: the caller then takes that path.

    Per line only positions, two cache lookups and one slice (:func:`_scan`); per request type
    in the block, the tails of all its lines are decoded by one msgspec call
    (:func:`agent.requestlog.typed.decode_tails`) and each stage's values counted by one C loop
    (:meth:`RequestAccumulator.count`). Slow lines are parsed in full, in line order
    (exemplars)."""
    if not block.isascii() or len(block) > parser.max_line_bytes:
        return None
    scanned = _scan(block, parser.ts)
    if scanned is None:
        return None
    tss, groups = scanned
    decoded = []
    for request, group in groups.items():
        rows = decode_tails(group[1::2])
        if rows is None:
            return None
        decoded.append((request, group[0::2], rows))
    tmin, tmax = min(tss), max(tss)
    win = _bulk_window(agg, tmin, tmax)
    if win is None:
        return None
    slow: list[tuple[int, float]] = []
    threshold = agg.slow_threshold_ms
    for request, positions, rows in decoded:
        acc = win.requests.get(request)
        if acc is None:
            acc = win.requests[request] = RequestAccumulator(agg.memo)
        acc.count(rows)
        totals = list(map(_TOTAL_OF, rows))
        if request is FETCH_CONSUMER or request is FETCH_FOLLOWER:
            # A fetch waits up to maxWaitMs in purgatory (remote) by design: not slowness.
            totals = list(map(operator.sub, totals, map(_REMOTE_OF, rows)))
        if max(totals) >= threshold:
            slow += [(at, t) for at, t in zip(positions, totals, strict=True) if t >= threshold]
    for at, t in sorted(slow):
        agg.keep_slow(win, parser.parse(block[at : block.index(b"\n", at)]), t)
    if tmax > agg.watermark:
        agg.watermark = tmax
    parser.ts.last_ms = tss[-1]
    health.lines_read += len(tss)
    return []


def _bulk_window(agg: WindowAggregator, tmin: int, tmax: int) -> Window | None:
    """The open window a block stamped ``tmin``..``tmax`` is accounted into in bulk, or None when
    the block must go line by line (it spans a window boundary, its window is closed, it lies
    too far ahead, or a window closes at it)."""
    start = tmin - tmin % agg.window_ms
    if tmax >= start + agg.window_ms or start < agg.closed_before:
        return None
    if tmax > agg.ahead_limit and agg.too_far_ahead(tmax):
        return None
    win = agg.window(start)  # the line-by-line path would open it at the first line too
    if tmax >= agg.close_threshold():
        return None
    return win


def _ingest_compiled(
    block: bytes, parser: LineParser, agg: WindowAggregator, health: Health, scan: BlockScan
) -> list[ClosedWindow] | None:
    """:func:`_ingest_fast` with the compiled scanner: one call reads every line's request type,
    stamp and stage times (:class:`~agent.requestlog.scanner.BlockScan`), and the block is
    accounted by numpy over whole columns: the stamps by one cached read per distinct second,
    the stage rows of each request type handed to its accumulator as one array
    (:meth:`RequestAccumulator.add_rows`), the slow lines found by one comparison. The same
    conditions and the same result as :func:`_ingest_fast`; None (nothing changed but caches)
    for a block it does not take."""
    n = scan.scan(block, parser.max_line_bytes)
    if not n:
        return None
    kinds = scan.kinds[:n]
    if kinds.min() < 0:
        return None
    tss = _stamps(block, scan, n, parser.ts)
    if tss is None:
        return None
    tmin, tmax = int(tss.min()), int(tss.max())
    win = _bulk_window(agg, tmin, tmax)
    if win is None:
        return None
    rows = scan.stages[:n]
    counts = np.bincount(kinds)
    present = np.flatnonzero(counts).tolist()
    # The rows grouped by request type (one sort, then views of one fresh array per block).
    grouped = rows[np.argsort(kinds, kind="stable")] if len(present) > 1 else rows.copy()
    at = 0
    for kind in present:
        request = KIND_REQUESTS[kind]
        acc = win.requests.get(request)
        if acc is None:
            acc = win.requests[request] = RequestAccumulator(agg.memo)
        end = at + int(counts[kind])
        acc.add_rows(grouped[at:end])
        at = end
    # A fetch waits up to maxWaitMs in purgatory (remote) by design: not slowness.
    totals = rows[:, ROW_TOTAL]
    fetch = (kinds == FETCH_INDEX) | (kinds == FOLLOWER_INDEX)
    slowness = np.where(fetch, totals - rows[:, ROW_REMOTE], totals)
    slow = np.flatnonzero(slowness >= agg.slow_threshold_ms).tolist()
    starts, ends = scan.starts, scan.ends
    for k in slow:
        line = block[int(starts[k]) : int(ends[k])]
        agg.keep_slow(win, parser.parse(line), float(slowness[k]))
    if tmax > agg.watermark:
        agg.watermark = tmax
    parser.ts.last_ms = int(tss[-1])
    health.lines_read += n
    return []


def _stamps(block: bytes, scan: BlockScan, n: int, ts_parser: TimestampParser) -> np.ndarray | None:
    """Epoch ms of the scanned lines' stamps: each distinct second read once through the
    parser's per-second cache (:meth:`TimestampParser.second_ms`), plus the milliseconds; None
    if a second is not certain (invalid, or a repeated local hour: read line by line then)."""
    secs, millis = scan.secs[:n], scan.millis[:n]
    if secs[0] == secs[n - 1] and (secs == secs[0]).all():
        at = int(scan.starts[0])
        base = ts_parser.second_ms(block[at + 1 : at + 20])
        return None if base is None else millis + base
    _, first, inverse = np.unique(secs, return_index=True, return_inverse=True)
    bases = []
    for k in first.tolist():
        at = int(scan.starts[k])
        base = ts_parser.second_ms(block[at + 1 : at + 20])
        if base is None:
            return None
        bases.append(base)
    return np.array(bases, np.int64)[inverse] + millis


def _scan(block: bytes, ts_parser: TimestampParser) -> tuple[list[int], dict[str, list]] | None:
    """Each line's timestamp (in order), and per request type its lines' start positions and
    stage tails ``connection":"…","totalTimeMs":…,…,"sendTimeMs":…`` (alternating in one
    list); None unless every line is of the usual shape as far as positions tell (the tails'
    tokens are checked by :func:`_columns`).

    Exactly what :meth:`LineParser.parse` reads: the stamp and fixed prefix by the
    per-millisecond cache (:func:`_stamp`); the first ``"requestApiKeyName":"`` of the JSON,
    found by its ``N`` (the first capital N of the usual header, in this line; for a Fetch
    with no ``}`` before it, so the request object comes after it), and its name and a Fetch's
    kind by a cache keyed by it and the bytes after it (:func:`_kind` otherwise); the last
    ``,"connection":`` of the line, then the first ``P`` after it, which must be that of the
    first ``,"securityProtocol":`` after it (stage tokens have no P), with a ``}`` after it,
    so the tail lies inside the JSON and ends where the general parser's does."""
    tss: list[int] = []
    push_ts = tss.append
    groups: dict[str, list] = {}
    ms_get, kinds_get = ts_parser.ms_cache.get, _KINDS.get
    index, find, rindex, startswith = block.index, block.find, block.rindex, block.startswith
    pos, size = 0, len(block)
    try:
        while pos < size:
            nl = index(b"\n", pos)
            ts = ms_get(block[pos : pos + _BODY + 1])
            if ts is None:
                ts = _stamp(block, pos, ts_parser)
            i = find(b"N", pos + _BODY, pos + _N_END)
            request = kinds_get(block[i - _N_AT : i - _N_AT + _KIND_BYTES])
            if request is None or i > nl or (request in _FETCHES and find(b"}", pos + _BODY, i) >= 0):
                request = _kind(block, pos, nl)
            c = rindex(_CONN, pos, nl)
            p = index(b"P", c, nl)
            if not startswith(_SEC, p - _P_AT) or find(b"}", p, nl) < 0:
                return None
            push_ts(ts)
            group = groups.get(request)
            if group is None:
                group = groups[request] = []
            group += (pos, block[c + 2 : p - _P_AT])
            pos = nl + 1
    except (_Slow, ValueError):
        return None
    return (tss, groups) if tss else None


def _kind(block: bytes, pos: int, nl: int) -> str:
    """The request type of the line ``block[pos:nl]`` as :meth:`LineParser.parse` reads it,
    through :data:`_KINDS` when the name and the bytes after it decide it (remembered then)."""
    end = block.rfind(b"}", pos, nl)
    at = block.find(_NAME, pos + _BODY, min(end, pos + _BODY + 4096))
    if at < 0 or at + _KIND_BYTES > end:
        raise _Slow
    key = block[at : at + _KIND_BYTES]
    request = _kind_of(key)
    if request is FETCH_CONSUMER:
        # Decided by the request's first bytes if they start right after the header.
        decided = _fetch_decision(key[len(_NAME) + len(b"FETCH") :])
        if decided is None or block.find(b"}", pos + _BODY, at) >= 0:
            return FETCH_FOLLOWER if is_follower_fetch(block[pos + _BODY : end + 1]) else FETCH_CONSUMER
        request = decided
    if block.find(b"}", pos + _BODY, at) < 0:
        if len(_KINDS) >= _MS_CACHE:
            _KINDS.clear()
        _KINDS[key] = request
    return request


def _kind_of(key: bytes) -> str:
    """The request type named at the start of ``key`` (``"requestApiKeyName":"NAME"…``); FETCH
    as a consumer fetch (the caller tells them apart); :class:`_Slow` if unknown or cut."""
    q = key.find(b'"', len(_NAME))
    request = _REQUEST_TYPES_B.get(key[len(_NAME) : q]) if q > 0 else None
    if request is None:
        raise _Slow
    return request


Entry = tuple[int, "str | None", int, int]


def extract(block: bytes, parser: LineParser) -> tuple[list[Entry], list[list[float] | None]]:
    """The fast extractor: for each line of ``block`` (each ending in ``\n``), an entry
    ``(ts_ms, request type, line start, line end)``, and for each entry with a request type a
    stage row (:data:`~agent.requestlog.window.ROW_ORDER`), in the order of the entries.

    A request type of None, or a row of None, means "take the general path": the line is not of
    the usual shape, or not certainly so. Such an entry's ``ts_ms`` is the stamp of the line
    before if that one was read here, else -1: the general parser reads a repeated local hour
    by the stamp before (:class:`TimestampParser`), which the fast path does not keep itself. For a line of the usual shape the entry is exactly what
    :meth:`LineParser.parse` reads from it: the timestamp (per-millisecond cache), the API name
    (the first ``"requestApiKeyName":"`` of the JSON), follower or consumer for a Fetch (decided
    by the request's first bytes, :func:`_fetch_decision`), and the stage times of the tail
    object ``{"connection":"…","totalTimeMs":…,…,"sendTimeMs":…}`` that starts at the last
    ``,"connection":`` before the line's last ``}``, its connection made of plain characters and
    its seven stage keys in the broker's order. The numbers of all lines are parsed by one orjson
    call (:func:`_stage_rows`), so they are the JSON numbers the tail parse gives (ints stay ints).
    Nothing of the request and response bodies is read but the Fetch request's first bytes.
    """
    if block and not block.endswith(b"\n"):
        block += b"\n"  # a last line without its newline is read as complete
    entries: list[Entry] = []
    nums: list[bytes] = []
    conns: list[bytes] = []
    push, push_num, push_conn = entries.append, nums.append, conns.append
    ts_parser = parser.ts
    ms_get = ts_parser.ms_cache.get
    max_bytes = parser.max_line_bytes
    types, shapes = _REQUEST_TYPES_B, _FETCH_SHAPES
    index, rindex, find = block.index, block.rindex, block.find
    usual = block.isascii()  # else every line takes the general path (it checks UTF-8)
    pos, size = 0, len(block)
    last = -1
    while pos < size:
        nl = index(b"\n", pos)
        try:
            if not usual or nl - pos > max_bytes:
                raise _Slow
            # The stamp and "] DEBUG Completed request:{" (checked when the key was cached).
            ts = ms_get(block[pos : pos + _BODY + 1])
            if ts is None:
                ts = _stamp(block, pos, ts_parser)
            i = index(_NAME, pos + _BODY, pos + _BODY + 4096) + len(_NAME)
            q = index(b'"', i, nl)
            request = types[block[i:q]]
            c = rindex(_CONN, q, nl)
            if request is FETCH_CONSUMER:
                if c < q + _SHAPE_BYTES or find(_REQUEST_AT, pos + _BODY, q) >= 0:
                    raise _Slow  # short, or a "request" object before the header's end
                request = shapes.get(block[q : q + _SHAPE_BYTES]) or _fetch_type(block, pos, q, nl)
            e = index(_TOTAL, c, nl)
            s = index(_SEC, e, nl)
            rindex(b"}", s, nl)  # the tail is inside the JSON (ValueError if not)
        except (_Slow, ValueError, KeyError):
            push((last, None, pos, nl))
            last = -1
        else:
            push((ts, request, pos, nl))
            last = ts
            push_conn(block[c + len(_CONN) : e])
            push_num(block[e + len(_TOTAL) : s])
        pos = nl + 1
    return entries, _stage_rows(nums, conns)


def _stamp(block: bytes, pos: int, ts_parser: TimestampParser) -> int:
    """Epoch ms of the zone-less stamp of the usual line at ``block[pos]`` (its second read
    through the parser's per-second cache), then kept in the per-millisecond cache with the
    line's fixed prefix; :class:`_Slow` if not of that shape or not certain (a repeated hour)."""
    base = ts_parser.second_ms(block[pos + 1 : pos + 20])
    millis = block[pos + 21 : pos + 24]
    if base is None or block[pos : pos + 1] != b"[" or block[pos + 20 : pos + 21] not in _MS_SEP:
        raise _Slow
    if not millis.isdigit() or not block.startswith(_PREFIX, pos + 24):
        raise _Slow
    # Every millisecond of this second at once: a busy log has a new millisecond every few
    # lines, a new second only every thousand milliseconds.
    ms_cache = ts_parser.ms_cache
    if len(ms_cache) + len(_MILLIS) > _MS_CACHE:
        ms_cache.clear()
    head, tail = block[pos : pos + 21], block[pos + 24 : pos + _BODY + 1]
    for ms, digits in enumerate(_MILLIS):
        ms_cache[head + digits + tail] = base + ms
    return base + int(millis)


def _fetch_type(block: bytes, pos: int, q: int, nl: int) -> str:
    """:func:`is_follower_fetch` for the Fetch whose API name ends at ``block[q]`` (the first
    ``},"request":{`` of its JSON is at ``q + 1``); the decision is remembered by the request's
    first bytes when they alone decide it."""
    prefix = block[q : q + _SHAPE_BYTES]
    decided = _fetch_decision(prefix)
    if decided is None:
        end = block.rindex(b"}", pos, nl)
        return FETCH_FOLLOWER if is_follower_fetch(block[pos + _BODY : end + 1]) else FETCH_CONSUMER
    if len(_FETCH_SHAPES) >= _MS_CACHE:
        _FETCH_SHAPES.clear()
    _FETCH_SHAPES[prefix] = decided
    return decided


def _fetch_decision(prefix: bytes) -> str | None:
    """What :func:`is_follower_fetch` says of a Fetch whose request object starts as ``prefix``
    (``"},"request":{…``) says, whatever follows; None if the rest could change it."""
    if not prefix.startswith(_REQUEST_Q):
        return None
    r = len(_REQUEST_Q)
    w = prefix.find(_MAXWAIT, r)
    if prefix.find(_REPLICA_STATE, r, w if w >= 0 else len(prefix)) >= 0:
        return FETCH_FOLLOWER
    if w < 0:
        return None
    i = prefix.find(_REPLICA_ID, r, w)
    if i < 0:
        return FETCH_CONSUMER
    i += len(_REPLICA_ID)
    return FETCH_FOLLOWER if i >= w or prefix[i : i + 1] != b"-" else FETCH_CONSUMER


def _stage_rows(nums: list[bytes], conns: list[bytes]) -> list[list[float] | None]:
    """The stage rows of the tails ``"totalTimeMs":`` + ``nums[k]`` (one orjson call for all),
    None where a tail is not certainly the usual shape or its values are not certainly usable
    stage times (the general path then says why). ``conns[k]`` is the connection value with its
    quotes: plain characters between them only, so it is a JSON string whatever they are."""
    n = len(nums)
    if not n:
        return []
    text = b"[[" + b"],[".join(nums) + b"]]"
    rows: list[list[float] | None] | None = None
    if text.translate(None, _NUMBER_CHARS) == b"[[" + b"],[".join([_SKELETON] * n) + b"]]" and b"\n".join(
        conns
    ).translate(None, _CONN_CHARS) == b"\n".join([b'""'] * n):
        try:  # the keys taken out: the numbers as nested arrays
            rows = orjson.loads(text.translate(None, _KEY_CHARS))
        except orjson.JSONDecodeError:
            rows = None
    if rows is None:
        rows = [_stage_row(num, c) for num, c in zip(nums, conns, strict=True)]
    elif max(map(max, rows)) < _VALUE_LIMIT:
        return rows  # no sign allowed: none negative, and the sum of seven is within bounds
    return [row if row is not None and max(row) < _VALUE_LIMIT else None for row in rows]


def _stage_row(num: bytes, conn: bytes) -> list[float] | None:
    """:func:`_stage_rows` for one tail."""
    if num.translate(None, _NUMBER_CHARS) != _SKELETON or conn.translate(None, _CONN_CHARS) != b'""':
        return None
    try:
        return orjson.loads(b"[" + num.translate(None, _KEY_CHARS) + b"]")
    except orjson.JSONDecodeError:
        return None


_MS_CACHE = 4096
_MILLIS = [b"%03d" % ms for ms in range(1000)]
# The fast block path's caches (module-wide: what they hold depends on the bytes only).
# "requestApiKeyName":" + the 72 bytes after it -> request type (Fetch kind decided).
_KINDS: dict[bytes, str] = {}
_KIND_BYTES = 21 + 72
_N_AT = 14  # the N of "requestApiKeyName":" (its first capital N)
_N_END = 50 + 4096 - 21 + _N_AT + 1  # the name must end within the JSON's first 4096 bytes
_FETCHES = frozenset((FETCH_CONSUMER, FETCH_FOLLOWER))
_P_AT = 10  # the P of ,"securityProtocol":


class _Slow(Exception):
    """This line is not of the usual shape: take the general path."""


_PREFIX = b"] DEBUG Completed request:{"
_BODY = 24 + len(_PREFIX) - 1  # where the JSON starts
_MS_SEP = (b",", b".")
_NAME = b'"requestApiKeyName":"'
_CONN = b',"connection":'
_TOTAL = b',"totalTimeMs":'
_SEC = b',"securityProtocol":'
_REQUEST_AT = b'},"request":{'
_REQUEST_Q = b'"' + _REQUEST_AT
_MAXWAIT = b'"maxWaitMs"'
_REPLICA_ID = b'"replicaId":'
_REPLICA_STATE = b'"replicaState":'
# A Fetch's first request bytes -> follower or consumer (_fetch_decision), for prefixes that
# decide it; few distinct ones (clients' settings, follower ids and epochs, the cluster id).
_SHAPE_BYTES = 72
_FETCH_SHAPES: dict[bytes, str] = {}
# The stage keys after totalTimeMs in the order the broker writes them (ROW_ORDER); a tail's
# stage part with its numbers taken out is exactly _SKELETON, or not the usual shape. Numbers
# are digits and dots only (no sign, no exponent: anything else takes the general path).
_ROW_KEYS = tuple(b',"%s":' % STAGE_KEYS[i].encode() for i in ROW_ORDER[1:])
_NUMBER_CHARS = b"0123456789."
_SKELETON = b"".join(_ROW_KEYS)
_KEY_CHARS = bytes(sorted(set(_SKELETON) - set(b",")))
_CONN_CHARS = bytes(range(ord("0"), ord("9") + 1)) + bytes(range(ord("A"), ord("Z") + 1))
_CONN_CHARS += bytes(range(ord("a"), ord("z") + 1)) + b".:-_[]%/"
# Non-negative values each below this sum to below parse.MAX_STAGE_MS in any order.
_VALUE_LIMIT = MAX_STAGE_MS / 8
# FETCH maps to FETCH_CONSUMER here; the caller tells follower fetches apart.
_REQUEST_TYPES_B = {
    name.encode(): (FETCH_CONSUMER if name == "FETCH" else request) for name, request in REQUEST_TYPES.items()
}
