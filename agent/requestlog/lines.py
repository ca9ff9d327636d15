"""Line by line: the path of any block the bulk paths do not take, in the order of its lines.

:func:`ingest_ordered` accounts a block in two passes. First :func:`extract` reads every line of
the usual shape (:mod:`agent.requestlog.shape`) by byte positions — its stamp, request type and
the stage times of its tail, the numbers of all lines parsed by one orjson call — without an
object per line. Then each line is accounted in order: its stage row appended straight to its
open window, or, for a line of any other shape and every line the aggregator must see whole
(late, slow: exemplars), the general path (:func:`add_general`: :meth:`LineParser.parse`, which
names every drop reason, then :meth:`WindowAggregator.add`).

Contract: the same windows, exemplars and drops as ``aggregator.add(parser.parse(line))`` for
every line of the block (``tests/agent/test_extract.py``); never raises for bad data (a dropped
line is counted in ``health`` by reason).
"""

from __future__ import annotations

import re

import orjson

from agent.health import Health
from agent.requestlog.parse import (
    MAX_STAGE_MS,
    STAGE_KEYS,
    Drop,
    LineParser,
    is_follower_fetch,
)
from agent.requestlog.scanner import busy_us
from agent.requestlog.shape import (
    API_TYPES,
    BODY,
    CACHE_LIMIT,
    CONN,
    NAME,
    REQUEST_AT,
    SEC,
    Slow,
    fetch_decision,
    stamp_ms,
)
from agent.requestlog.window import (
    CHUNK,
    ROW_ORDER,
    ROW_REMOTE,
    ROW_TOTAL,
    ClosedWindow,
    RequestAccumulator,
    WindowAggregator,
)
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER

_TOTAL = b',"totalTimeMs":'
# A Fetch's first request bytes -> follower or consumer (fetch_decision), for prefixes that
# decide it; few distinct ones (clients' settings, follower ids and epochs, the cluster id).
_SHAPE_BYTES = 72
_FETCH_SHAPES: dict[bytes, str] = {}
# The stage keys after totalTimeMs in the order the broker writes them (ROW_ORDER); a tail's
# stage part with each run of number characters replaced by one # is exactly _SKELETON, or not
# the usual shape (so a digit slipped in beside a key is never read into a number). Numbers are
# digits and dots only (no sign, no exponent: anything else takes the general path).
_ROW_KEYS = tuple(b',"%s":' % STAGE_KEYS[i].encode() for i in ROW_ORDER[1:])
_NUMBERS = re.compile(rb"[0-9.]+")
_SKELETON = b"#" + b"#".join(_ROW_KEYS) + b"#"
_KEY_CHARS = bytes(sorted(set(b"".join(_ROW_KEYS)) - set(b",")))
_CONN_CHARS = bytes(range(ord("0"), ord("9") + 1)) + bytes(range(ord("A"), ord("Z") + 1))
_CONN_CHARS += bytes(range(ord("a"), ord("z") + 1)) + b".:-_[]%/"
# Non-negative values each below this sum to below parse.MAX_STAGE_MS in any order.
_VALUE_LIMIT = MAX_STAGE_MS / 8


def ingest_ordered(
    block: bytes,
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    """:func:`agent.requestlog.ingest.ingest_block` line by line, in two passes:
    :func:`extract` reads the usual line shape by positions in the block (no object per line
    but one small tuple) and the stage times of all those lines with one orjson call; then each
    line is accounted in order, its stage row appended straight to its open window. A line of
    any other shape, and every line the aggregator must see whole (late, slow: exemplars), takes
    the general path (:meth:`LineParser.parse`, which names every drop reason).
    """
    entries, rows, conns = extract(block, parser)
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
            got = add_general(block[at:nl], parser, agg, health, context)
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
        acc.serve(conns[k - 1][1:-1].decode("ascii"), busy_us(request, total, row[ROW_REMOTE]))
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
    count_slow(closed, health)
    return closed


# --- the first pass: the extractor ----------------------------------------------------------

Entry = tuple[int, "str | None", int, int]


def extract(block: bytes, parser: LineParser) -> tuple[list[Entry], list[list[float] | None], list[bytes]]:
    """The fast extractor: for each line of ``block`` (each ending in ``\n``), an entry
    ``(ts_ms, request type, line start, line end)``, and for each entry with a request type a
    stage row (:data:`~agent.requestlog.window.ROW_ORDER`) and its connection (the JSON string
    with its quotes; plain characters between them wherever the row is not None), in the order
    of the entries.

    A request type of None, or a row of None, means "take the general path": the line is not of
    the usual shape, or not certainly so. Such an entry's ``ts_ms`` is the stamp of the line
    before if that one was read here, else -1: the general parser reads a repeated local hour
    by the stamp before (:class:`~agent.requestlog.parse.TimestampParser`), which the fast path
    does not keep itself. For a line of the usual shape the entry is exactly what
    :meth:`LineParser.parse` reads from it: the timestamp (per-millisecond cache), the API name
    (the first ``"requestApiKeyName":"`` of the JSON), follower or consumer for a Fetch (decided
    by the request's first bytes, :func:`fetch_decision`), and the stage times of the tail
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
    types, shapes = API_TYPES, _FETCH_SHAPES
    index, rindex, find = block.index, block.rindex, block.find
    usual = block.isascii()  # else every line takes the general path (it checks UTF-8)
    pos, size = 0, len(block)
    last = -1
    while pos < size:
        nl = index(b"\n", pos)
        try:
            if not usual or nl - pos > max_bytes:
                raise Slow
            # The stamp and "] DEBUG Completed request:{" (checked when the key was cached).
            ts = ms_get(block[pos : pos + BODY + 1])
            if ts is None:
                ts = stamp_ms(block, pos, ts_parser)
            i = index(NAME, pos + BODY, pos + BODY + 4096) + len(NAME)
            q = index(b'"', i, nl)
            request = types[block[i:q]]
            c = rindex(CONN, q, nl)
            if request is FETCH_CONSUMER:
                if c < q + _SHAPE_BYTES or find(REQUEST_AT, pos + BODY, q) >= 0:
                    raise Slow  # short, or a "request" object before the header's end
                request = shapes.get(block[q : q + _SHAPE_BYTES]) or _fetch_type(block, pos, q, nl)
            e = index(_TOTAL, c, nl)
            s = index(SEC, e, nl)
            rindex(b"}", s, nl)  # the tail is inside the JSON (ValueError if not)
        except (Slow, ValueError, KeyError):
            push((last, None, pos, nl))
            last = -1
        else:
            push((ts, request, pos, nl))
            last = ts
            push_conn(block[c + len(CONN) : e])
            push_num(block[e + len(_TOTAL) : s])
        pos = nl + 1
    return entries, _stage_rows(nums, conns), conns


def _fetch_type(block: bytes, pos: int, q: int, nl: int) -> str:
    """:func:`~agent.requestlog.parse.is_follower_fetch` for the Fetch whose API name ends at ``block[q]`` (the first
    ``},"request":{`` of its JSON is at ``q + 1``); the decision is remembered by the request's
    first bytes when they alone decide it."""
    prefix = block[q : q + _SHAPE_BYTES]
    decided = fetch_decision(prefix)
    if decided is None:
        end = block.rindex(b"}", pos, nl)
        return FETCH_FOLLOWER if is_follower_fetch(block[pos + BODY : end + 1]) else FETCH_CONSUMER
    if len(_FETCH_SHAPES) >= CACHE_LIMIT:
        _FETCH_SHAPES.clear()
    _FETCH_SHAPES[prefix] = decided
    return decided


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
    if _NUMBERS.sub(b"#", text) == b"[[" + b"],[".join([_SKELETON] * n) + b"]]" and b"\n".join(
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
    if _NUMBERS.sub(b"#", num) != _SKELETON or conn.translate(None, _CONN_CHARS) != b'""':
        return None
    try:
        return orjson.loads(b"[" + num.translate(None, _KEY_CHARS) + b"]")
    except orjson.JSONDecodeError:
        return None


# --- the general path -----------------------------------------------------------------------


def add_general(
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


def count_slow(closed: list[ClosedWindow], health: Health) -> None:
    """Add the slow requests of the windows just closed to ``health`` (per request type)."""
    for win in closed:
        for request, n_slow in win.slow_counts.items():
            health.slow_requests[request] += n_slow
