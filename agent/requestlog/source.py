"""The request-log source: follower + parser + window aggregator, with drops counted by reason.

:meth:`RequestLogSource.poll` reads what is there, never blocks, never raises for bad data, and
returns the windows that closed. :func:`ingest_lines` is the same loop over given lines (tests,
benchmarks, one-shot replays of a captured log).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import tzinfo
from operator import itemgetter
from pathlib import Path

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
    is_follower_fetch,
)
from agent.requestlog.window import CHUNK, ClosedWindow, RequestAccumulator, WindowAggregator
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
        lines = self.follower.read_lines()
        closed = ingest_lines(lines, self.parser, self.aggregator, self.health, str(self.follower.path))
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
    """Parse and account ``lines``; returns the windows they closed.

    The same result as ``aggregator.add(parser.parse(line))`` for every line (which is what it
    falls back to for anything but the usual shape), with the usual shape handled inline: one
    loop, no object per line, stage tuples appended straight to the open window.
    """
    closed: list[ClosedWindow] = []
    agg = aggregator
    parse, add = parser.parse, agg.add
    ms_cache, ts_cache = parser.ts.ms_cache, parser.ts._cache
    max_bytes = parser.max_line_bytes
    window_ms, threshold = agg.window_ms, agg.slow_threshold_ms
    loads, stages_of, types = orjson.loads, _STAGES_OF, _REQUEST_TYPES_B
    cur_start, cur = -1, None
    close_at = agg.close_threshold()
    watermark = agg.watermark
    ahead_limit = agg.ahead_limit
    n = 0
    for line in lines:
        n += 1
        try:
            if len(line) > max_bytes or not line.startswith(_PREFIX, 24) or not line.isascii():
                raise _Slow
            ts = ms_cache.get(line[:24])
            if ts is None:
                base = ts_cache.get(line[1:20])
                millis = line[21:24]
                if base is None or line[:1] != b"[" or line[20:21] not in _MS_SEP or not millis.isdigit():
                    raise _Slow
                ts = base + int(millis)
                if len(ms_cache) >= _MS_CACHE:
                    ms_cache.clear()
                ms_cache[line[:24]] = ts
            end = line.rfind(b"}")
            i = line.find(_NAME, _BODY, _BODY + 4096)
            if i < 0 or end <= _BODY:
                raise _Slow
            i += len(_NAME)
            q = line.index(b'"', i)
            request = types.get(line[i:q])
            if request is None:
                raise _Slow
            if request is FETCH_CONSUMER:
                request = FETCH_FOLLOWER if _follower_fetch(line, q) else FETCH_CONSUMER
            c = line.rindex(_CONN, _BODY, end + 1)
            s = line.find(_SEC, c, end + 1)
            tail = loads(b"{" + line[c + 1 : s if s > 0 else end] + b"}")
            stages = stages_of(tail)
            # Usable stage times (parse.stage_drop_reason, inline); the general path names
            # what is wrong. TypeError unless every stage time is a number.
            if not (min(stages) >= 0 and sum(stages) <= MAX_STAGE_MS) or bool in map(type, stages):
                raise _Slow
        except (_Slow, ValueError, KeyError, TypeError, IndexError):
            # Not the usual shape: the general parser (full parse, or a drop with its reason).
            try:
                req = parse(line)
            except Drop as d:
                if d.reason != "not_a_request_line" or line.strip():
                    health.drop(d.reason, d.detail, context=context)
                continue
            if req.ts_ms > agg.ahead_limit and agg.too_far_ahead(req.ts_ms):
                health.drop("future_timestamp", f"{req.request} at {req.ts_ms}", context=context)
                continue
            agg.watermark = watermark
            closed += add(req)
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
                add(_request(ts, request, stages, tail, line, end))  # late: counted there
                continue
            cur = agg.window(start)
            close_at = agg.close_threshold()
            cur_start = start
        acc = cur.requests.get(request)
        if acc is None:
            acc = cur.requests[request] = RequestAccumulator(agg.memo)
        pending = acc.pending
        pending.append(stages)
        if len(pending) >= CHUNK:
            acc.fold()
        total = stages[6]
        if total >= threshold:
            if request is not FETCH_CONSUMER and request is not FETCH_FOLLOWER:
                agg.keep_slow(cur, _request(ts, request, stages, tail, line, end), total)
            elif total - stages[2] >= threshold:
                # A fetch waits up to maxWaitMs in purgatory (remote) by design: not slowness.
                agg.keep_slow(cur, _request(ts, request, stages, tail, line, end), total - stages[2])
        if ts > watermark:
            watermark = ts
            if ts >= close_at:
                agg.watermark = watermark
                closed += agg.close_by_line(ts)
                cur_start, close_at = -1, agg.close_threshold()
    agg.watermark = watermark
    health.lines_read += n
    for win in closed:
        for request, n_slow in win.slow_counts.items():
            health.slow_requests[request] += n_slow
    return closed


def _follower_fetch(line: bytes, q: int) -> bool:
    """:func:`is_follower_fetch` for a Fetch line whose API name ends at ``line[q]``, with the
    usual request shapes told apart by the bytes right after ``"request":{``."""
    if line.startswith(_REQUEST_AT, q + 1):
        r = q + 1 + len(_REQUEST_AT)
        if line.startswith(_REPLICA_STATE, r):
            return True
        if line.startswith(_CONSUMER_V12, r) or line.startswith(_MAXWAIT, r):
            return False
        if line.startswith(_CLUSTER_ID, r):
            e = line.find(b'"', r + len(_CLUSTER_ID), r + len(_CLUSTER_ID) + 64)
            if e > 0 and line[e - 1 : e] != b"\\" and line.startswith(_THEN_REPLICA_STATE, e):
                return True
    return is_follower_fetch(line, _BODY)


_REQUEST_AT = b'},"request":{'
_REPLICA_STATE = b'"replicaState":'
_CONSUMER_V12 = b'"replicaId":-1,"maxWaitMs"'
_MAXWAIT = b'"maxWaitMs"'
_CLUSTER_ID = b'"clusterId":"'
_THEN_REPLICA_STATE = b'","replicaState":'
_MS_CACHE = 4096


class _Slow(Exception):
    """This line is not of the usual shape: take the general path."""


_PREFIX = b"] DEBUG Completed request:{"
_BODY = 24 + len(_PREFIX) - 1  # where the JSON starts
_MS_SEP = (b",", b".")
_NAME = b'"requestApiKeyName":"'
_CONN = b',"connection":'
_SEC = b',"securityProtocol":'
_STAGES_OF = itemgetter(*STAGE_KEYS)
# FETCH maps to FETCH_CONSUMER here; the caller tells follower fetches apart.
_REQUEST_TYPES_B = {
    name.encode(): (FETCH_CONSUMER if name == "FETCH" else request) for name, request in REQUEST_TYPES.items()
}


def _request(ts: int, request: str, stages: tuple, tail: dict, line: bytes, end: int) -> ParsedRequest:
    connection = tail["connection"]
    return ParsedRequest(ts, request, stages, connection, line[_BODY : end + 1])
