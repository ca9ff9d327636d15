"""In bulk: a block of usual lines that lies in one open window, accounted at once.

The common case (a window holds ~10 s of a busy log, a block a fraction of a second): no line
is accounted alone. Two ways, the first that is available:

* :func:`ingest_compiled` — the compiled scanner (:mod:`agent.requestlog.scanner`) reads every
  line's request type, stamp and stage times in one C call, a second groups them by request type
  and finds the slow lines; the rows are counted per distinct value of each stage by a third when
  the window folds them.
* :func:`ingest_python` — per line only positions, two cache lookups and one slice
  (:func:`scan_lines`, reading the shape of :mod:`agent.requestlog.shape`); per request type
  the tails of all its lines decoded by one msgspec call (:mod:`agent.requestlog.typed`).

Contract (both): either the block is accounted exactly as line by line
(:mod:`agent.requestlog.lines`) would account it — the same windows, exemplars (slow lines are
parsed in full, in line order) and counts — and ``[]`` is returned (a bulk block never closes a
window), or None is returned and nothing changed but caches: the block spans a window boundary,
its window is closed or closes at it, it lies too far ahead, or a line is not certainly of the
usual shape. The caller then takes the line-by-line path. ``tests/agent/test_scanner.py`` and
``tests/agent/test_extract.py`` compare every window field with that path.
"""

from __future__ import annotations

import operator

from agent.health import Health
from agent.requestlog.parse import LineParser, TimestampParser, is_follower_fetch
from agent.requestlog.scanner import KIND_REQUESTS, NSTAGES, BlockScan, Grouped, busy_us
from agent.requestlog.shape import (
    API_TYPES,
    BODY,
    CACHE_LIMIT,
    CONN,
    NAME,
    SEC,
    Slow,
    fetch_decision,
    stamp_ms,
)
from agent.requestlog.typed import decode_tails
from agent.requestlog.window import (
    ROW_GETTERS,
    ROW_REMOTE,
    ROW_TOTAL,
    ClosedWindow,
    RequestAccumulator,
    Window,
    WindowAggregator,
)
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER

_TOTAL_OF = ROW_GETTERS[ROW_TOTAL]
_REMOTE_OF = ROW_GETTERS[ROW_REMOTE]
# scan_lines' cache: "requestApiKeyName":" + the 72 bytes after it -> request type (Fetch kind
# decided). Module-wide: what it holds depends on the bytes only.
_KINDS: dict[bytes, str] = {}
_KIND_BYTES = 21 + 72
_N_AT = 14  # the N of "requestApiKeyName":" (its first capital N)
_N_END = 50 + 4096 - 21 + _N_AT + 1  # the name must end within the JSON's first 4096 bytes
_FETCHES = frozenset((FETCH_CONSUMER, FETCH_FOLLOWER))
_P_AT = 10  # the P of ,"securityProtocol":


def ingest_compiled(
    block: bytes, parser: LineParser, agg: WindowAggregator, health: Health, scan: BlockScan
) -> list[ClosedWindow] | None:
    """:func:`ingest_python` with the compiled scanner: one call reads every line's request type,
    stamp and stage times, and a second groups the stage rows by request type and finds the slow
    lines (:class:`~agent.requestlog.scanner.BlockScan`); the stamps are read once per distinct
    second, each request type's rows held by its accumulator until they are counted per distinct
    value of each stage by a third call (:meth:`RequestAccumulator.add_rows`). The same
    conditions and the same result as :func:`ingest_python`; None (nothing changed but caches)
    for a block it does not take."""
    n = scan.scan(block, parser.max_line_bytes)
    if not n:
        return None
    grouped = scan.group(n, agg.slow_threshold_ms)
    if grouped is None:
        return None
    stamps = _stamps(block, scan, n, grouped, parser.ts)
    if stamps is None:
        return None
    tmin, tmax, last = stamps
    win = _bulk_window(agg, tmin, tmax)
    if win is None:
        return None
    for kind, (first, end) in grouped.spans.items():
        request = KIND_REQUESTS[kind]
        acc = win.requests.get(request)
        if acc is None:
            acc = win.requests[request] = RequestAccumulator(agg.memo)
        acc.add_rows(grouped.rows[first * NSTAGES : end * NSTAGES])
    starts, ends = scan.starts, scan.ends
    for kind, k, us in scan.busy(n):
        win.requests[KIND_REQUESTS[kind]].serve(_connection(block, starts[k], ends[k]), us)
    for k, slowness in zip(grouped.slow, grouped.slowness, strict=True):
        agg.keep_slow(win, parser.parse(block[starts[k] : ends[k]]), slowness)
    if tmax > agg.watermark:
        agg.watermark = tmax
    parser.ts.last_ms = last
    health.lines_read += n
    return []


def _connection(block: bytes, start: int, end: int) -> str:
    """The connection of the line ``block[start:end]`` as the compiled scanner read it: the plain
    characters after the last ``,"connection":"`` before the line's last ``}``."""
    c = block.rindex(CONN, start, block.rindex(b"}", start, end) + 1) + len(CONN) + 1
    return block[c : block.index(b'"', c, end)].decode("ascii")


def _stamps(
    block: bytes, scan: BlockScan, n: int, grouped: Grouped, ts_parser: TimestampParser
) -> tuple[int, int, int] | None:
    """Epoch ms of the earliest, the latest and the last of the scanned lines' stamps, each
    distinct second read once through the parser's per-second cache
    (:meth:`TimestampParser.second_ms`); None if a second is not certain (invalid, or a repeated
    or skipped local hour: read line by line then). The earliest and latest lines by (second,
    millisecond) are those by epoch ms: between certain local seconds the zone's offset never
    moves a later second before an earlier one (a move back repeats an hour, one forward skips
    one, and those are not certain)."""
    secs = scan.secs
    lo, hi, last = grouped.lo, grouped.hi, n - 1
    seconds = (secs[lo],) if secs[lo] == secs[hi] else dict.fromkeys(secs[:n].tolist())
    starts, bases = scan.starts, {}
    for sec in seconds:
        at = starts[lo if sec == secs[lo] else secs.index(sec)]
        base = ts_parser.second_ms(block[at + 1 : at + 20])
        if base is None:
            return None
        bases[sec] = base
    millis = scan.millis
    return (
        bases[secs[lo]] + millis[lo],
        bases[secs[hi]] + millis[hi],
        bases[secs[last]] + millis[last],
    )


def ingest_python(
    block: bytes, parser: LineParser, agg: WindowAggregator, health: Health
) -> list[ClosedWindow] | None:
    """:func:`agent.requestlog.ingest.ingest_block` for a block whose every line is of the usual
    shape, all in one window that stays open: what the line-by-line path would account, in bulk.
    None (and nothing changed but caches) for any other block: the caller then takes that path.

    Per line only positions, two cache lookups and one slice (:func:`scan_lines`); per request
    type in the block, the tails of all its lines are decoded by one msgspec call
    (:func:`agent.requestlog.typed.decode_tails`) and each stage's values counted by one C loop
    (:meth:`RequestAccumulator.count`). Slow lines are parsed in full, in line order
    (exemplars)."""
    if not block.isascii() or len(block) > parser.max_line_bytes:
        return None
    scanned = scan_lines(block, parser.ts)
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
        serve = acc.serve
        for tail in rows:
            serve(tail.connection, busy_us(request, tail.totalTimeMs, tail.remoteTimeMs))
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


def scan_lines(block: bytes, ts_parser: TimestampParser) -> tuple[list[int], dict[str, list]] | None:
    """Each line's timestamp (in order), and per request type its lines' start positions and
    stage tails ``connection":"…","totalTimeMs":…,…,"sendTimeMs":…`` (alternating in one
    list); None unless every line is of the usual shape as far as positions tell (the tails'
    tokens are checked by :func:`~agent.requestlog.typed.decode_tails`).

    Exactly what :meth:`LineParser.parse` reads: the stamp and fixed prefix by the
    per-millisecond cache (:func:`stamp_ms`); the first ``"requestApiKeyName":"`` of the JSON,
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
            ts = ms_get(block[pos : pos + BODY + 1])
            if ts is None:
                ts = stamp_ms(block, pos, ts_parser)
            i = find(b"N", pos + BODY, pos + _N_END)
            request = kinds_get(block[i - _N_AT : i - _N_AT + _KIND_BYTES])
            if request is None or i > nl or (request in _FETCHES and find(b"}", pos + BODY, i) >= 0):
                request = _kind(block, pos, nl)
            c = rindex(CONN, pos, nl)
            p = index(b"P", c, nl)
            if not startswith(SEC, p - _P_AT) or find(b"}", p, nl) < 0:
                return None
            push_ts(ts)
            group = groups.get(request)
            if group is None:
                group = groups[request] = []
            group += (pos, block[c + 2 : p - _P_AT])
            pos = nl + 1
    except (Slow, ValueError):
        return None
    return (tss, groups) if tss else None


def _kind(block: bytes, pos: int, nl: int) -> str:
    """The request type of the line ``block[pos:nl]`` as :meth:`LineParser.parse` reads it,
    through :data:`_KINDS` when the name and the bytes after it decide it (remembered then)."""
    end = block.rfind(b"}", pos, nl)
    at = block.find(NAME, pos + BODY, min(end, pos + BODY + 4096))
    if at < 0 or at + _KIND_BYTES > end:
        raise Slow
    key = block[at : at + _KIND_BYTES]
    request = _kind_of(key)
    if request is FETCH_CONSUMER:
        # Decided by the request's first bytes if they start right after the header.
        decided = fetch_decision(key[len(NAME) + len(b"FETCH") :])
        if decided is None or block.find(b"}", pos + BODY, at) >= 0:
            return FETCH_FOLLOWER if is_follower_fetch(block[pos + BODY : end + 1]) else FETCH_CONSUMER
        request = decided
    if block.find(b"}", pos + BODY, at) < 0:
        if len(_KINDS) >= CACHE_LIMIT:
            _KINDS.clear()
        _KINDS[key] = request
    return request


def _kind_of(key: bytes) -> str:
    """The request type named at the start of ``key`` (``"requestApiKeyName":"NAME"…``); FETCH
    as a consumer fetch (the caller tells them apart); :class:`Slow` if unknown or cut."""
    q = key.find(b'"', len(NAME))
    request = API_TYPES.get(key[len(NAME) : q]) if q > 0 else None
    if request is None:
        raise Slow
    return request


# The fast block path's caches (module-wide: what they hold depends on the bytes only).
# "requestApiKeyName":" + the 72 bytes after it -> request type (Fetch kind decided).


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
