"""Parse one ``Completed request:{json}`` line of ``kafka-request.log``.

Hot path: a line is ~1-2 KB, mostly the request and response bodies, which the aggregate does
not need. :meth:`LineParser.parse` therefore parses only three small parts with orjson and finds them
by markers that cannot occur inside a JSON string (each contains an unescaped ``"``):

* the timestamp ``[yyyy-MM-dd HH:mm:ss,SSS]`` that log4j's ``[%d]`` writes (the broker JVM's
  local time; read in the configured zone, see :class:`TimestampParser`), or the same with a
  UTC offset (``Z``, ``+01:00``, ``+0100``) when the layout writes one,
* the API key name from the ``requestHeader`` object,
* the tail object starting at the last ``,"connection":`` (connection and every stage time).

A Fetch is a follower fetch when the request body has ``replicaState`` (v15+) or
``replicaId >= 0`` (v<=14); both come before ``maxWaitMs`` in the schema, so only that prefix is
looked at. Anything the fast path cannot read is re-parsed in full; if that fails too the line
is dropped with a reason (:class:`Drop`). Stage times must be non-negative numbers (not
booleans) summing to at most :data:`MAX_STAGE_MS` (:func:`stage_drop_reason`), so a window's
sums stay finite. Request bodies (topic-partitions and sizes) are parsed
only for slow-request exemplars (:func:`partitions_of`).
"""

from __future__ import annotations

import calendar
import math
import time
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

import orjson

from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER

MARKER = b" Completed request:"
# Stage keys of the log line, in the order of linkwatch.records.STAGES.
STAGE_KEYS = (
    "requestQueueTimeMs",
    "localTimeMs",
    "remoteTimeMs",
    "throttleTimeMs",
    "responseQueueTimeMs",
    "sendTimeMs",
    "totalTimeMs",
)
TOTAL_INDEX = 6
# Upper bound of the sum of one line's seven stage times (about 11.6 days): larger is not a
# request time, and bounded values keep every window sum finite whatever the request count.
MAX_STAGE_MS = 1e9

# ApiKeys of Kafka 4.1 (enum names as written in requestApiKeyName).
API_KEYS = frozenset(
    [
        "PRODUCE",
        "FETCH",
        "LIST_OFFSETS",
        "METADATA",
        "LEADER_AND_ISR",
        "STOP_REPLICA",
        "UPDATE_METADATA",
        "CONTROLLED_SHUTDOWN",
        "OFFSET_COMMIT",
        "OFFSET_FETCH",
        "FIND_COORDINATOR",
        "JOIN_GROUP",
        "HEARTBEAT",
        "LEAVE_GROUP",
        "SYNC_GROUP",
        "DESCRIBE_GROUPS",
        "LIST_GROUPS",
        "SASL_HANDSHAKE",
        "API_VERSIONS",
        "CREATE_TOPICS",
        "DELETE_TOPICS",
        "DELETE_RECORDS",
        "INIT_PRODUCER_ID",
        "OFFSET_FOR_LEADER_EPOCH",
        "ADD_PARTITIONS_TO_TXN",
        "ADD_OFFSETS_TO_TXN",
        "END_TXN",
        "WRITE_TXN_MARKERS",
        "TXN_OFFSET_COMMIT",
        "DESCRIBE_ACLS",
        "CREATE_ACLS",
        "DELETE_ACLS",
        "DESCRIBE_CONFIGS",
        "ALTER_CONFIGS",
        "ALTER_REPLICA_LOG_DIRS",
        "DESCRIBE_LOG_DIRS",
        "SASL_AUTHENTICATE",
        "CREATE_PARTITIONS",
        "CREATE_DELEGATION_TOKEN",
        "RENEW_DELEGATION_TOKEN",
        "EXPIRE_DELEGATION_TOKEN",
        "DESCRIBE_DELEGATION_TOKEN",
        "DELETE_GROUPS",
        "ELECT_LEADERS",
        "INCREMENTAL_ALTER_CONFIGS",
        "ALTER_PARTITION_REASSIGNMENTS",
        "LIST_PARTITION_REASSIGNMENTS",
        "OFFSET_DELETE",
        "DESCRIBE_CLIENT_QUOTAS",
        "ALTER_CLIENT_QUOTAS",
        "DESCRIBE_USER_SCRAM_CREDENTIALS",
        "ALTER_USER_SCRAM_CREDENTIALS",
        "VOTE",
        "BEGIN_QUORUM_EPOCH",
        "END_QUORUM_EPOCH",
        "DESCRIBE_QUORUM",
        "ALTER_PARTITION",
        "UPDATE_FEATURES",
        "ENVELOPE",
        "FETCH_SNAPSHOT",
        "DESCRIBE_CLUSTER",
        "DESCRIBE_PRODUCERS",
        "BROKER_REGISTRATION",
        "BROKER_HEARTBEAT",
        "UNREGISTER_BROKER",
        "DESCRIBE_TRANSACTIONS",
        "LIST_TRANSACTIONS",
        "ALLOCATE_PRODUCER_IDS",
        "CONSUMER_GROUP_HEARTBEAT",
        "CONSUMER_GROUP_DESCRIBE",
        "CONTROLLER_REGISTRATION",
        "GET_TELEMETRY_SUBSCRIPTIONS",
        "PUSH_TELEMETRY",
        "ASSIGN_REPLICAS_TO_DIRS",
        "LIST_CONFIG_RESOURCES",
        "DESCRIBE_TOPIC_PARTITIONS",
        "SHARE_GROUP_HEARTBEAT",
        "SHARE_GROUP_DESCRIBE",
        "SHARE_FETCH",
        "SHARE_ACKNOWLEDGE",
        "ADD_RAFT_VOTER",
        "REMOVE_RAFT_VOTER",
        "UPDATE_RAFT_VOTER",
        "INITIALIZE_SHARE_GROUP_STATE",
        "READ_SHARE_GROUP_STATE",
        "WRITE_SHARE_GROUP_STATE",
        "DELETE_SHARE_GROUP_STATE",
        "READ_SHARE_GROUP_STATE_SUMMARY",
        "STREAMS_GROUP_HEARTBEAT",
        "STREAMS_GROUP_DESCRIBE",
        "DESCRIBE_SHARE_GROUP_OFFSETS",
        "ALTER_SHARE_GROUP_OFFSETS",
        "DELETE_SHARE_GROUP_OFFSETS",
    ]
)


def request_type_name(api_key_name: str) -> str:
    """``DESCRIBE_CONFIGS`` -> ``DescribeConfigs`` (the ``request`` label Kafka's JMX uses)."""
    return "".join(part.capitalize() for part in api_key_name.split("_"))


# Enum name -> RequestMetrics name; FETCH is split by the caller.
REQUEST_TYPES: dict[str, str] = {name: request_type_name(name) for name in API_KEYS}


class Drop(Exception):
    """A line that cannot be used; ``reason`` labels ``linkwatch_agent_dropped_total``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}" if detail else reason)


@dataclass(slots=True)
class ParsedRequest:
    """What the aggregate needs from one line. ``stages`` follows :data:`STAGE_KEYS`."""

    ts_ms: int
    request: str
    stages: tuple[float, ...]
    connection: str
    line: bytes  # the JSON part, kept so a slow request can be parsed in full

    @property
    def total_ms(self) -> float:
        return self.stages[TOTAL_INDEX]


class TimestampParser:
    """``2025-06-01 12:00:00,123`` -> epoch ms, caching the per-second part.

    A stamp without a zone is local time in ``zone`` (None: this host's zone, which is the
    broker JVM's unless ``-Duser.timezone`` says otherwise). A local time that occurs twice (the
    hour repeated at a daylight-saving fall-back) is never cached: it is read as the occurrence
    nearer the previous stamp (lines come in completion order), or nearer the wall clock before
    any stamp was read. A stamp with an offset (``Z``, ``+01:00``, ``+0100``, ``+01``) is exact.
    """

    __slots__ = ("_cache", "last_ms", "ms_cache", "zone")

    def __init__(self, zone: tzinfo | None = None) -> None:
        self.zone = zone
        self._cache: dict[bytes, int] = {}  # second (+ zone suffix) -> epoch ms, unambiguous only
        self.ms_cache: dict[bytes, int] = {}  # whole stamp -> epoch ms (the ingest loop's)
        self.last_ms = -1  # the last stamp computed here (not the cached ones: within a second)

    def __call__(self, text: bytes) -> int:
        # text is what is between '[' and ']'
        millis = text[20:23]
        if len(text) < 23 or text[19:20] not in (b",", b".") or not millis.isdigit():
            raise Drop("bad_timestamp", repr(text[:40]))
        key = text[:19] if len(text) == 23 else text[:19] + text[23:]
        base = self._cache.get(key)
        if base is None:
            base = self._base(text[:19], text[23:])
        ms = base + int(millis)
        self.last_ms = ms
        return ms

    def second_ms(self, second: bytes) -> int | None:
        """Epoch ms of a zone-less ``yyyy-MM-dd HH:mm:ss``, read once and then cached; None if
        it is not a valid time or is ambiguous here (a repeated or skipped local hour: a call
        reads those, in line order). For a caller that reads the milliseconds itself:
        :func:`agent.requestlog.lines.extract`. Leaves :attr:`last_ms` alone."""
        base = self._cache.get(second)
        if base is None:
            try:
                earlier, later = _local_ms(_fields(second), self.zone)
            except Drop:
                return None
            if earlier != later:
                return None
            base = earlier
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[second] = base
        return base

    def _base(self, second: bytes, suffix: bytes) -> int:
        fields = _fields(second)
        if suffix:
            base = (calendar.timegm((*fields, 0, 0, 0)) - _offset_s(suffix)) * 1000
        else:
            earlier, later = _local_ms(fields, self.zone)
            if earlier != later:  # repeated (or skipped) local time: not cached
                ref = self.last_ms if self.last_ms >= 0 else time.time() * 1000
                return later if abs(later - ref) < abs(earlier - ref) else earlier
            base = earlier
        if len(self._cache) > 4096:
            self._cache.clear()
        self._cache[second + suffix] = base
        return base


def _fields(second: bytes) -> tuple[int, int, int, int, int, int]:
    """``2025-06-01 12:00:00`` (or ``T`` between date and time) -> validated fields."""
    try:
        if second[4:5] != b"-" or second[7:8] != b"-" or second[10:11] not in (b" ", b"T"):
            raise ValueError(second)
        fields = (second[0:4], second[5:7], second[8:10], second[11:13], second[14:16], second[17:19])
        y, mo, d, h, mi, s = (int(f) for f in fields)
        datetime(y, mo, d, h, mi, s)  # ValueError unless a real date and time
        return y, mo, d, h, mi, s
    except ValueError:
        raise Drop("bad_timestamp", repr(second[:40])) from None


def _local_ms(fields: tuple[int, int, int, int, int, int], zone: tzinfo | None) -> tuple[int, int]:
    """Epoch ms of a local time's first and second occurrence (equal unless it is repeated)."""
    dt = datetime(*fields, tzinfo=zone)  # naive (the host's zone) when zone is None
    try:
        a = int(dt.timestamp()) * 1000
        b = int(dt.replace(fold=1).timestamp()) * 1000
    except (OverflowError, OSError, ValueError):
        raise Drop("bad_timestamp", repr(fields)) from None
    return min(a, b), max(a, b)


def _offset_s(suffix: bytes) -> int:
    """``Z``, ``+01:00``, ``+0100`` or ``+01`` -> seconds east of UTC."""
    if suffix == b"Z":
        return 0
    digits = suffix[1:].replace(b":", b"", 1)
    if suffix[:1] not in (b"+", b"-") or len(digits) not in (2, 4) or not digits.isdigit():
        raise Drop("bad_timestamp", f"zone {suffix[:16]!r}")
    h, m = int(digits[:2]), int(digits[2:] or b"0")
    if h > 18 or m > 59:
        raise Drop("bad_timestamp", f"zone {suffix[:16]!r}")
    return (h * 3600 + m * 60) * (-1 if suffix[:1] == b"-" else 1)


def stage_drop_reason(stages: tuple[Any, ...]) -> str | None:
    """None if every stage time is usable; else why not. Raises TypeError for non-numbers.

    The common case costs a sum, a min and a type scan (no Python loop)."""
    total = sum(stages)
    if min(stages) >= 0 and total <= MAX_STAGE_MS and bool not in map(type, stages):
        return None
    if bool in map(type, stages):
        return "stage_boolean"
    if not all(math.isfinite(v) for v in stages):
        return "stage_not_finite"
    if min(stages) < 0:
        return "stage_negative"
    return "stage_too_large"


class LineParser:
    """Stateful only for the timestamp cache; one per followed file."""

    __slots__ = ("max_line_bytes", "ts")

    def __init__(self, max_line_bytes: int = 1 << 20, zone: tzinfo | None = None) -> None:
        self.max_line_bytes = max_line_bytes
        self.ts = TimestampParser(zone)

    def parse(self, line: bytes) -> ParsedRequest:
        """Parse one line (without its newline) or raise :class:`Drop`."""
        if len(line) > self.max_line_bytes:
            raise Drop("too_long", f"{len(line)} bytes > {self.max_line_bytes}")
        at = line.find(MARKER, 0, 80)
        if at < 0:
            raise Drop("not_a_request_line", _preview(line))
        close = 24 if line[24:25] == b"]" else line.find(b"]", 24, 32)  # 24: no zone
        if line[:1] != b"[" or close < 0:
            raise Drop("bad_timestamp", _preview(line))
        ts_ms = self.ts(line[1:close])
        start = at + len(MARKER)
        end = line.rfind(b"}")
        if end <= start or line[start : start + 1] != b"{":
            raise Drop("truncated", _preview(line))
        body = line[start : end + 1]
        if not body.isascii():
            try:
                body.decode("utf-8")
            except UnicodeDecodeError as e:
                raise Drop("not_utf8", f"{e}: {_preview(body)}") from None
        try:
            api, stages, connection = _fast(body)
        except (ValueError, KeyError, TypeError, IndexError):
            api, stages, connection = _slow(body, complete=line.endswith(b")"))
        if api == "FETCH":
            request = FETCH_FOLLOWER if is_follower_fetch(body) else FETCH_CONSUMER
        else:
            request = REQUEST_TYPES.get(api)  # type: ignore[assignment]
            if request is None:
                raise Drop("unknown_request_type", api[:64])
        return ParsedRequest(ts_ms, request, stages, connection, body)


_NAME = b'"requestApiKeyName":"'
_CONN = b',"connection":'
_SEC = b',"securityProtocol":'


def _fast(body: bytes) -> tuple[str, tuple[float, ...], str]:
    i = body.index(_NAME, 0, 4096) + len(_NAME)
    api = body[i : body.index(b'"', i)].decode("ascii")
    c = body.rindex(_CONN)
    s = body.find(_SEC, c)
    tail = orjson.loads(b"{" + body[c + 1 : s if s > 0 else len(body) - 1] + b"}")
    return api, _stages(tail), tail["connection"]


def _stages(obj: dict[str, Any]) -> tuple[float, ...]:
    out = (
        obj["requestQueueTimeMs"],
        obj["localTimeMs"],
        obj["remoteTimeMs"],
        obj["throttleTimeMs"],
        obj["responseQueueTimeMs"],
        obj["sendTimeMs"],
        obj["totalTimeMs"],
    )
    reason = stage_drop_reason(out)  # TypeError unless every stage time is a number
    if reason is not None:
        raise Drop(reason, f"stage times {out}")
    return out


def _slow(body: bytes, complete: bool) -> tuple[str, tuple[float, ...], str]:
    """Full parse. ``complete``: the line ended like a log line (``... (logger)``), so a JSON
    error means bad JSON rather than a line cut short."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as e:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            raise Drop("not_utf8", _preview(body)) from None
        raise Drop("bad_json" if complete else "truncated", f"{e}: {_preview(body)}") from None
    if not isinstance(obj, dict):
        raise Drop("bad_json", _preview(body))
    header = obj.get("requestHeader")
    api = header.get("requestApiKeyName") if isinstance(header, dict) else None
    if not isinstance(api, str):
        raise Drop("missing_field", "requestHeader.requestApiKeyName")
    missing = [k for k in STAGE_KEYS if k not in obj]
    if missing:
        raise Drop("missing_field", ",".join(missing))
    try:
        stages = _stages(obj)
    except TypeError:
        raise Drop("bad_field", _preview(body)) from None
    connection = obj.get("connection")
    return api, stages, connection if isinstance(connection, str) else ""


_REQUEST = b'},"request":{'
_MAXWAIT = b'"maxWaitMs"'
_REPLICA_ID = b'"replicaId":'
_REPLICA_STATE = b'"replicaState":'


def is_follower_fetch(data: bytes, start: int = 0) -> bool:
    """Whether the Fetch whose JSON starts at ``data[start]`` comes from a replica: the request
    object has ``replicaState`` (v15+) or ``replicaId >= 0`` before ``maxWaitMs``."""
    r = data.find(_REQUEST, start)
    if r < 0:
        return False
    w = data.find(_MAXWAIT, r, r + 2048)
    stop = w if w > 0 else r + 2048
    if data.find(_REPLICA_STATE, r, stop) >= 0:
        return True
    i = data.find(_REPLICA_ID, r, stop)
    if i < 0:
        return False
    i += len(_REPLICA_ID)
    return i >= stop or data[i : i + 1] != b"-"


def partitions_of(body: bytes) -> list[dict[str, Any]]:
    """Topic-partitions and record sizes of a Produce or Fetch (for exemplars; full parse).

    Produce sizes come from the request (bytes written), Fetch sizes from the response (bytes
    returned). Topics are names, or ``id:<topicId>`` when the client sent topic IDs.
    """
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return []
    return _partitions(obj) if isinstance(obj, dict) else []


def _partitions(obj: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    request, response = obj.get("request"), obj.get("response")
    if isinstance(request, dict) and isinstance(request.get("topicData"), list):
        for t in request["topicData"]:
            topic = _topic(t, "name")
            for p in t.get("partitionData") or []:
                out.append(
                    {"topic": topic, "partition": p.get("index", -1), "bytes": p.get("recordsSizeInBytes", 0)}
                )
    elif isinstance(response, dict) and isinstance(response.get("responses"), list):
        for t in response["responses"]:
            topic = _topic(t, "topic")
            for p in t.get("partitions") or []:
                out.append(
                    {
                        "topic": topic,
                        "partition": p.get("partitionIndex", -1),
                        "bytes": p.get("recordsSizeInBytes", 0),
                    }
                )
    return out[:64]


def _topic(obj: dict[str, Any], name_key: str) -> str:
    name = obj.get(name_key)
    if isinstance(name, str) and name:
        return name
    topic_id = obj.get("topicId")
    return f"id:{topic_id}" if topic_id else "?"


def exemplar_fields(body: bytes) -> tuple[str, int, list[dict[str, Any]]]:
    """(clientId, correlationId, partitions) with one full parse (slow exemplars only)."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return "", -1, []
    if not isinstance(obj, dict):
        return "", -1, []
    header = obj.get("requestHeader") or {}
    correlation = header.get("correlationId", -1)
    return (
        str(header.get("clientId") or ""),
        correlation if isinstance(correlation, int) else -1,
        _partitions(obj),
    )


def _preview(raw: bytes, limit: int = 160) -> str:
    text = raw[:limit].decode("utf-8", "replace")
    return text + ("…" if len(raw) > limit else "")
