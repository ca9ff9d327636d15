"""The one record schema: what agents, the lag collector and clients send on ``linkwatch.samples``.

Stdlib + orjson only, so the agent never pulls Spark in; ``spark_metrics`` derives its Spark
schema from these dataclasses (never written twice).

Every record is a JSON object with an envelope and a body::

    {"v": 1, "kind": "stage_sketch", "cluster": "prod-1", "source": "broker-3",
     "ts_ms": 1700000000000, "key": "<dedup key>", ...fields of the kind...}

* ``v`` is :data:`SCHEMA_VERSION`. A reader accepts versions up to its own and ignores fields it
  does not know (so a newer writer with added optional fields still decodes).
* Extending: a new *kind* or a new *optional* field keeps ``v`` (older readers skip the kind as
  ``unknown_kind``, counted, and ignore the field); ``v`` is bumped only for a change an older
  reader would misread (a field removed, retyped or given a new meaning), since a bump makes
  older readers drop every record of the new version as ``future_version``. Kinds added so far
  at ``v`` 1: ``probe`` (:class:`ProbeSample`); optional fields added at ``v`` 1:
  ``ProbeSample.commit_*``, ``StageSketch.capture_ratio``, ``StageSketch.window_sketches``,
  ``StageSketch.capture_exact``, ``StageSketch.connections``, ``StageSketch.saturated_connections``.
* ``key`` identifies the fact, not the delivery: the same window from the same broker always has
  the same key, so a consumer (the Spark job) drops duplicates from re-sends and restarts.
* :func:`decode` raises :class:`RecordError` with a short ``reason`` (for a
  ``..._dropped_total{reason}`` counter) for anything malformed; unknown kinds are a reason too.
  A field with a range (``RANGES``) outside it is ``bad_value``; the Spark side checks the same
  ranges (:func:`spark_metrics.transforms.with_drop_reason`).
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

import orjson

SCHEMA_VERSION = 1
# 9999-12-31T23:59:59.999Z: the latest event time any reader takes (Spark's timestamps, the
# window feed's checks); a later ts_ms is dropped as too_new.
MAX_TS_MS = 253_402_300_799_999
SAMPLES_TOPIC = "linkwatch.samples"
FINDINGS_TOPIC = "linkwatch.findings"
#: The cluster name every component uses when its config names none: an agent, the analyzer and
#: a remediator left at their defaults see each other's records.
DEFAULT_CLUSTER = "default"
#: linkwatch's own topics and consumer groups, one pattern for every component that lists them:
#: ``linkwatch.…`` (samples, findings, the probe's topic and its commit groups, lease topics) and
#: ``linkwatch-…`` (lease groups, client ids). They are excluded by default wherever groups or
#: topics are judged, so linkwatch never reports on (or acts on) itself.
OWN_NAMES = r"^linkwatch[.-]"
_OWN = re.compile(OWN_NAMES)


def is_own(name: str) -> bool:
    """Whether a topic or group name is one of linkwatch's own (:data:`OWN_NAMES`)."""
    return _OWN.search(name) is not None


# Request types the stage model knows; Fetch is split into consumer and follower fetches.
PRODUCE = "Produce"
FETCH_CONSUMER = "FetchConsumer"
FETCH_FOLLOWER = "FetchFollower"
# Stage names as in Kafka's RequestMetrics/request log, without the "Ms" suffix.
STAGES = ("requestQueue", "local", "remote", "throttle", "responseQueue", "send", "total")


# A plausible time in ms since the epoch, (low, high]: a reader leaves a time outside it out.
EPOCH_MS_RANGE = (0.0, 1e15)


class RecordError(ValueError):
    """A record that cannot be used. ``reason`` is a short label for drop counters."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True, kw_only=True)
class Record:
    """Envelope shared by every kind. Subclasses set ``KIND`` and define ``dedup_key``."""

    KIND: ClassVar[str] = ""
    cluster: str
    source: str
    ts_ms: int
    # Fields whose value must lie in ``(low, high]`` (else the record is dropped as ``bad_value``).
    RANGES: ClassVar[dict[str, tuple[float, float]]] = {}

    def dedup_key(self) -> str:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        body = dataclasses.asdict(self)
        return {"v": SCHEMA_VERSION, "kind": self.KIND, "key": self.dedup_key(), **body}

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())


@dataclass(frozen=True, kw_only=True)
class StageSketch(Record):
    """Latency sketch of one stage of one request type on one broker over one window."""

    KIND: ClassVar[str] = "stage_sketch"
    broker: int
    request: str
    stage: str
    window_s: int
    sketch: dict[str, Any]  # linkwatch.sketch.LatencySketch.to_dict()
    # Share of the window's requests the broker logged (optional, added at v 1): 1.0 for a full
    # capture; 1/k under sampled capture, where the sketch's counts are already multiplied by k
    # (estimates; quantiles are those of the logged requests). See agent.capture.
    capture_ratio: float = 1.0
    # How many stage sketches its agent sent for this broker and window (optional, added at v 1;
    # 0: not said). The analyzer evaluates a window once every one of them is there.
    window_sketches: int = 0
    # False (optional, added at v 1) when sampled capture's slice did not happen as planned (the
    # logger switch through the broker's own admin API failed or was late: a stalled broker): the
    # quantiles are still its logged requests', the counts the planned stride's estimate.
    capture_exact: bool = True
    # On the ``total`` sketch (optional, added at v 1; 0 on the other stages, and from agents
    # before them): how many client connections the broker served requests of this type in the
    # window, and how many of them it served for at least 0.9 of the window — back to back, its
    # client's next request already waiting where no broker timer runs (agent.requestlog.window).
    connections: int = 0
    saturated_connections: int = 0
    RANGES: ClassVar[dict[str, tuple[float, float]]] = {
        "capture_ratio": (0.0, 1.0),
        "window_sketches": (-1, 1_000_000),
        "connections": (-1, 1_000_000),
        "saturated_connections": (-1, 1_000_000),
    }

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.broker}/{self.request}/{self.stage}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class PartitionBytes:
    topic: str
    partition: int
    bytes: int = 0


@dataclass(frozen=True, kw_only=True)
class SlowRequest(Record):
    """One request whose total time crossed the exemplar threshold; ``ts_ms`` is its end time."""

    KIND: ClassVar[str] = "slow_request"
    broker: int
    request: str
    client_id: str
    correlation_id: int
    connection: str
    stages_ms: dict[str, float]
    partitions: list[dict[str, Any]] = field(default_factory=list)  # PartitionBytes as dicts

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.broker}/{self.connection}/{self.correlation_id}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class BrokerGauges(Record):
    """JMX readings of one broker for one window: gauge name -> value (names are documented
    by the collector that produces them, e.g. ``RequestHandlerAvgIdlePercent``,
    ``TotalTimeMs.Produce.mean``)."""

    KIND: ClassVar[str] = "broker_gauges"
    # The value the analyzer reads: when the broker's JVM started (ms since the epoch).
    JVM_START_TIME: ClassVar[str] = "jvm_start_time_ms"
    broker: int
    window_s: int
    values: dict[str, float]

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.broker}/gauges/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class LogDirUsage(Record):
    KIND: ClassVar[str] = "logdir_usage"
    broker: int
    log_dir: str
    capacity_bytes: int
    used_bytes: int
    partition_bytes: int
    partitions: int
    io_util: float | None = None  # fraction 0..1 of the device over the window

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.broker}/{self.log_dir}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class PartitionSize(Record):
    KIND: ClassVar[str] = "partition_size"
    broker: int
    log_dir: str
    topic: str
    partition: int
    size_bytes: int
    segments: int
    oldest_segment_ms: int
    newest_segment_ms: int
    # Log end offset when the producer knows it (differencing it gives messages/s); optional.
    log_end_offset: int | None = None

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.broker}/{self.topic}-{self.partition}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class HostStats(Record):
    KIND: ClassVar[str] = "host"
    broker: int
    window_s: int
    cpu_percent: float
    page_cache_bytes: int
    disk_write_bytes_per_s: float
    disk_read_bytes_per_s: float
    net_rx_bytes_per_s: float
    net_tx_bytes_per_s: float

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.broker}/host/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class ConsumerLag(Record):
    """Lag of one group on one partition at one evaluation (``ts_ms``)."""

    KIND: ClassVar[str] = "consumer_lag"
    group: str
    topic: str
    partition: int
    committed_offset: int
    end_offset: int
    lag_messages: int
    lag_seconds: float | None
    # "record_timestamp" | "interpolated" | "next_record" | "lower_bound" | "caught_up" | "unknown"
    # (see lag.timestamps)
    lag_seconds_method: str
    status: str
    reason: str
    leader: int | None = None

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.group}/{self.topic}-{self.partition}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class ClientFetch(Record):
    """Client-side fetch timings of one consumer instance over one window, per broker."""

    KIND: ClassVar[str] = "client_fetch"
    client_id: str
    group: str
    broker: int
    window_s: int
    wait_fetch: dict[str, Any]  # sketches, as LatencySketch.to_dict()
    fetch_latency: dict[str, Any]
    end_to_end: dict[str, Any]
    buffer_bytes: int

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.client_id}/{self.broker}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class ProbeSample(Record):
    """What the probe (``probe/``) measured for the partitions one broker led over one window.

    ``produce`` (send → ack) and ``end_to_end`` (send → read back) are sketches as
    ``LatencySketch.to_dict()``, without an upper clamp. ``ok`` probes were acked and read back
    within ``deadline_ms``; ``unavailable`` counts the others by reason; both count the probes
    *decided* in the window, so availability is ``ok / (ok + sum(unavailable))``.
    """

    KIND: ClassVar[str] = "probe"
    broker: int
    topic: str
    window_s: int
    deadline_ms: int
    sent: int
    acked: int
    ok: int
    unavailable: dict[str, int]
    produce: dict[str, Any]
    end_to_end: dict[str, Any]
    # Offset commits to the probe group this broker coordinates (optional, added at v 1):
    # ``commit_latency`` is a LatencySketch dict of the commits that succeeded (ms; {} when the
    # writer predates it), ``commit_errors`` counts the others by error name.
    commit_ok: int = 0
    commit_errors: dict[str, int] = field(default_factory=dict)
    commit_latency: dict[str, Any] = field(default_factory=dict)

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.source}/probe/{self.broker}/{self.ts_ms}"


@dataclass(frozen=True, kw_only=True)
class Finding(Record):
    """What the analyzer (or the lag collector) concluded. ``ts_ms`` is when it was decided."""

    KIND: ClassVar[str] = "finding"
    rule: str
    subject: str  # e.g. "broker:2", "topic-partition:orders-3", "group:billing"
    severity: str  # "info" | "warning" | "critical"
    summary: str
    evidence: dict[str, Any]
    action: str
    active: bool = True

    def dedup_key(self) -> str:
        return f"{self.cluster}/{self.rule}/{self.subject}/{self.ts_ms}"


KINDS: dict[str, type[Record]] = {
    cls.KIND: cls
    for cls in (
        StageSketch,
        SlowRequest,
        BrokerGauges,
        LogDirUsage,
        PartitionSize,
        HostStats,
        ConsumerLag,
        ClientFetch,
        ProbeSample,
        Finding,
    )
}

_ENVELOPE = ("v", "kind", "key")


def decode(raw: bytes | str) -> Record:
    """Parse one record; raise :class:`RecordError` (with a drop reason) if it is unusable."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise RecordError("not_json", f"{e}: {_preview(raw)}") from None
    if not isinstance(obj, dict):
        raise RecordError("not_object", _preview(raw))
    return from_dict(obj)


def from_dict(obj: dict[str, Any]) -> Record:
    version = obj.get("v")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError("bad_version", f"v={version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError("future_version", f"v={version} > {SCHEMA_VERSION}")
    kind = obj.get("kind")
    cls = KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise RecordError("unknown_kind", f"kind={kind!r}")
    hints = _hints(cls)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in obj:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError("missing_field", f"{kind}.{f.name}")
            continue
        value = obj[f.name]
        if not _type_ok(value, hints[f.name]):
            raise RecordError("bad_type", f"{kind}.{f.name}={_preview(repr(value))}")
        values[f.name] = float(value) if hints[f.name] is float and isinstance(value, int) else value
    detail = out_of_range(cls, values.get)
    if detail is not None:
        raise RecordError("bad_value", detail)
    return cls(**values)


def out_of_range(cls: type[Record], value_of: Callable[[str], Any]) -> str | None:
    """Why a record of ``cls`` (its fields read by ``value_of``) is outside ``cls.RANGES``, or
    None. :func:`from_dict` drops such a record as ``bad_value``; readers handed records built
    in code (not decoded) check them with this too."""
    for name, (low, high) in cls.RANGES.items():
        value = value_of(name)
        # ``not (low < x <= high)`` also catches NaN.
        if value is not None and not (low < value <= high):
            return f"{cls.KIND}.{name}={value!r} not in ({low}, {high}]"
    return None


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _type_ok(value: Any, hint: Any) -> bool:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return any(_type_ok(value, a) for a in get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            return False
        args = get_args(hint)
        return not args or all(_type_ok(v, args[1]) for v in value.values())
    if origin is list or hint is list:
        if not isinstance(value, list):
            return False
        args = get_args(hint)
        return not args or all(_type_ok(v, args[0]) for v in value)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _preview(raw: object, limit: int = 120) -> str:
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    return text if len(text) <= limit else text[:limit] + "…"


def field_types(cls: type[Record]) -> dict[str, Any]:
    """Field name -> type hint, for deriving other schemas (Spark) from this module."""
    return dict(_hints(cls))


__all__ = [
    "EPOCH_MS_RANGE",
    "FETCH_CONSUMER",
    "FETCH_FOLLOWER",
    "FINDINGS_TOPIC",
    "KINDS",
    "PRODUCE",
    "SAMPLES_TOPIC",
    "SCHEMA_VERSION",
    "STAGES",
    "BrokerGauges",
    "ClientFetch",
    "ConsumerLag",
    "Finding",
    "HostStats",
    "LogDirUsage",
    "PartitionBytes",
    "PartitionSize",
    "ProbeSample",
    "Record",
    "RecordError",
    "SlowRequest",
    "StageSketch",
    "decode",
    "field_types",
    "from_dict",
]
