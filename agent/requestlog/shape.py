"""The usual request-log line, read by byte positions: what both fast Python paths share.

The usual line is ``[yyyy-MM-dd HH:mm:ss,SSS] DEBUG Completed request:{json} (logger)`` with the
JSON's ``requestHeader`` first and its tail object (``,"connection":…`` through the stage times)
before ``,"securityProtocol":``. The markers below cannot occur inside a JSON string (each holds
an unescaped ``"``), so a position found by a byte search is the one the general parser
(:meth:`agent.requestlog.parse.LineParser.parse`) reads. The line-by-line extractor
(:mod:`agent.requestlog.lines`) and the pure-Python bulk path (:mod:`agent.requestlog.bulk`)
read lines through these:

* :func:`stamp_ms` — a line's stamp, kept per millisecond in the parser's cache;
* :func:`fetch_decision` — follower or consumer Fetch from the request's first bytes;
* :data:`API_TYPES` — the request type of an API name.

Contract: a line whose shape a reader cannot certainly tell raises :class:`Slow` (or gives None):
the caller then takes the general path for it, which names every drop reason. Nothing here
drops or counts a line.
"""

from __future__ import annotations

from agent.requestlog.parse import REQUEST_TYPES, TimestampParser
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER

PREFIX = b"] DEBUG Completed request:{"
BODY = 24 + len(PREFIX) - 1  # where the JSON starts
_MS_SEP = (b",", b".")
NAME = b'"requestApiKeyName":"'
CONN = b',"connection":'
SEC = b',"securityProtocol":'
REQUEST_AT = b'},"request":{'
_REQUEST_Q = b'"' + REQUEST_AT
_MAXWAIT = b'"maxWaitMs"'
_REPLICA_ID = b'"replicaId":'
_REPLICA_STATE = b'"replicaState":'
# FETCH maps to FETCH_CONSUMER here; the caller tells follower fetches apart.
API_TYPES = {
    name.encode(): (FETCH_CONSUMER if name == "FETCH" else request) for name, request in REQUEST_TYPES.items()
}
# Entries each of the fast paths' caches holds at most (they are cleared when full).
CACHE_LIMIT = 4096
_MILLIS = [b"%03d" % ms for ms in range(1000)]


class Slow(Exception):
    """This line is not of the usual shape: take the general path."""


def stamp_ms(block: bytes, pos: int, ts_parser: TimestampParser) -> int:
    """Epoch ms of the zone-less stamp of the usual line at ``block[pos]`` (its second read
    through the parser's per-second cache), then kept in the per-millisecond cache with the
    line's fixed prefix; :class:`Slow` if not of that shape or not certain (a repeated hour)."""
    base = ts_parser.second_ms(block[pos + 1 : pos + 20])
    millis = block[pos + 21 : pos + 24]
    if base is None or block[pos : pos + 1] != b"[" or block[pos + 20 : pos + 21] not in _MS_SEP:
        raise Slow
    if not millis.isdigit() or not block.startswith(PREFIX, pos + 24):
        raise Slow
    # Every millisecond of this second at once: a busy log has a new millisecond every few
    # lines, a new second only every thousand milliseconds.
    ms_cache = ts_parser.ms_cache
    if len(ms_cache) + len(_MILLIS) > CACHE_LIMIT:
        ms_cache.clear()
    head, tail = block[pos : pos + 21], block[pos + 24 : pos + BODY + 1]
    for ms, digits in enumerate(_MILLIS):
        ms_cache[head + digits + tail] = base + ms
    return base + int(millis)


def fetch_decision(prefix: bytes) -> str | None:
    """What :func:`~agent.requestlog.parse.is_follower_fetch` says of a Fetch whose request object
    starts as ``prefix``
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
