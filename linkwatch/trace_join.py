"""One trace per record: the broker's stage spans joined under the producer's span.

The agent exports a slow request (an exemplar) as a span tree of its own trace — a ``kafka
<Request>`` root with a child per stage (:mod:`agent.output.otlp`) — naming the request by
``kafka.client_id``, ``kafka.correlation_id`` and ``kafka.broker``, as the broker logged it. The
producer helper (:mod:`producer.tracing`) gives each record's PRODUCER span the same three facts
of the Produce request that carried it (``messaging.client.id``, ``messaging.kafka.correlation_id``,
``messaging.kafka.broker_id``). Neither side knows the other's trace; this join, which sees both
spans on their way to the collector, puts a *copy* of the stage spans under every produce span of
that request:

* the copies get the producer's trace id and fresh span ids (derived from the pair, so a re-sent
  export makes the same ids); the copied root's parent is the produce span and it links to the
  original root (attribute ``linkwatch.joined_from_trace_id``);
* one Produce request carries many records (batching), each possibly of another trace: the copy
  goes into each of their traces, at most ``max_traces_per_request`` (the rest counted);
* the originals are forwarded unchanged: the broker's own view of its slow requests stays whole.

Limits: only requests the agent kept as exemplars are joined (slow ones, at most
``max_exemplars_per_window`` per broker and window); producers whose request (client id,
correlation id) is unknown (confluent-kafka, another client) are not. Both halves wait for each
other up to ``hold_s`` (the agent exports a window after it closes, so its half comes 10-20 s
later), in bounded maps (``max_held``); what is dropped is counted by reason.

:class:`SpanJoin` is the pure part (protobuf in, protobuf out, the clock an argument);
:class:`TraceJoinRelay` is an OTLP/HTTP (protobuf) receiver on loopback that forwards every
export unchanged to the collector and then the joined copies (``linkwatch trace join``).
"""

from __future__ import annotations

import hashlib
import http.server
import logging
import threading
import time
import urllib.error
import urllib.request
from collections import Counter, OrderedDict
from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from linkwatch.errors import ListenError

log = logging.getLogger(__name__)

RequestKey = tuple[str, int, int]  # (client id, broker, correlation id)
AGENT_SCOPE = "linkwatch.agent"


def _attrs(span: Span) -> dict[str, AnyValue]:
    return {a.key: a.value for a in span.attributes}


def _int(v: AnyValue | None) -> int | None:
    if v is None:
        return None
    if v.HasField("int_value"):
        return v.int_value
    if v.HasField("string_value") and v.string_value.lstrip("-").isdigit():
        return int(v.string_value)
    return None


def _str(v: AnyValue | None) -> str | None:
    return v.string_value if v is not None and v.HasField("string_value") else None


def produce_key(span: Span) -> RequestKey | None:
    """The Produce request a PRODUCER span's record went in, if the producer noted it."""
    if span.kind != Span.SPAN_KIND_PRODUCER:
        return None
    a = _attrs(span)
    client, broker, corr = (
        _str(a.get("messaging.client.id")),
        _int(a.get("messaging.kafka.broker_id")),
        _int(a.get("messaging.kafka.correlation_id")),
    )
    return (client, broker, corr) if client is not None and broker is not None and corr is not None else None


def exemplar_key(span: Span) -> RequestKey | None:
    """The request an agent exemplar's root span stands for (``kafka Produce`` only)."""
    a = _attrs(span)
    if _str(a.get("kafka.request")) != "Produce":
        return None
    client, broker, corr = (
        _str(a.get("kafka.client_id")),
        _int(a.get("kafka.broker")),
        _int(a.get("kafka.correlation_id")),
    )
    return (client, broker, corr) if client is not None and broker is not None and corr is not None else None


def _derived_id(*parts: bytes, size: int = 8) -> bytes:
    out = hashlib.blake2b(b"".join(parts), digest_size=size).digest()
    return out if any(out) else b"\x01" * size


@dataclass
class _Exemplar:
    resource: Resource
    scope: InstrumentationScope
    root: Span | None = None
    children: list[Span] = field(default_factory=list)
    targets: list[tuple[bytes, bytes]] = field(default_factory=list)  # (trace id, produce span id) joined

    def copies(self, spans: list[Span], targets: list[tuple[bytes, bytes]]) -> ResourceSpans:
        assert self.root is not None
        ss = ScopeSpans(scope=self.scope)
        for trace_id, parent_id in targets:
            ss.spans.extend(_copy(s, self.root, trace_id, parent_id) for s in spans)
        return ResourceSpans(resource=self.resource, scope_spans=[ss])


@dataclass
class JoinStats:
    joined: int = 0  # stage-span trees copied into a producer trace
    dropped: Counter[str] = field(default_factory=Counter)


class SpanJoin:
    """The join's state: produce spans and exemplars by request, each held up to ``hold_s``.

    Spans may come in any order and grouping: a produce span after the join joins the tree as
    it is then; a stage span after the join is copied into every trace joined so far. Not
    thread-safe: :class:`TraceJoinRelay` calls it under a lock.
    """

    def __init__(
        self, hold_s: float = 120.0, max_held: int = 100_000, max_traces_per_request: int = 100
    ) -> None:
        self.hold_s = hold_s
        self.max_held = max_held
        self.max_traces_per_request = max_traces_per_request
        self.stats = JoinStats()
        # request -> (first seen, [(trace id, span id)] of its records not joined yet, how many seen)
        self._produced: OrderedDict[RequestKey, tuple[float, list[tuple[bytes, bytes]], list[int]]] = (
            OrderedDict()
        )
        # agent trace id -> (first seen, exemplar), held for late spans of either side
        self._exemplars: OrderedDict[bytes, tuple[float, _Exemplar]] = OrderedDict()
        self._by_request: dict[RequestKey, bytes] = {}  # request -> agent trace id of its root

    def feed(self, request: ExportTraceServiceRequest, now_s: float) -> ExportTraceServiceRequest:
        """Take one export; return the joined copies it completes (possibly none)."""
        self._expire(now_s)
        out = ExportTraceServiceRequest()
        ready: list[RequestKey] = []
        for rs in request.resource_spans:
            for ss in rs.scope_spans:
                for span in ss.spans:
                    key = produce_key(span)
                    if key is not None:
                        self._note_produce(key, span, now_s)
                        ready.append(key)
                    elif ss.scope.name == AGENT_SCOPE:
                        ready += self._note_agent(rs.resource, ss.scope, span, now_s, out)
        for key in dict.fromkeys(ready):
            self._join(key, out)
        return out

    def _note_produce(self, key: RequestKey, span: Span, now_s: float) -> None:
        seen = self._produced.get(key)
        if seen is None:
            seen = self._produced[key] = (now_s, [], [0])
            self._bound(self._produced, "produce_held_full")
        seen[2][0] += 1
        if seen[2][0] <= self.max_traces_per_request:
            seen[1].append((span.trace_id, span.span_id))
        else:
            self.stats.dropped["traces_per_request"] += 1

    def _note_agent(
        self, resource: Resource, scope: InstrumentationScope, span: Span, now_s: float,
        out: ExportTraceServiceRequest,
    ) -> list[RequestKey]:  # fmt: skip
        held = self._exemplars.get(span.trace_id)
        if held is None:
            held = self._exemplars[span.trace_id] = (now_s, _Exemplar(resource, scope))
            self._bound(self._exemplars, "exemplars_held_full")
        ex = held[1]
        if span.parent_span_id:
            ex.children.append(span)
            if ex.root is not None and ex.targets:  # late stage span: into every joined trace
                out.resource_spans.append(ex.copies([span], ex.targets))
            return []
        key = exemplar_key(span)
        if key is None:  # not a Produce request: nothing to join
            del self._exemplars[span.trace_id]
            return []
        ex.root = span
        self._by_request[key] = span.trace_id
        return [key]

    def _join(self, key: RequestKey, out: ExportTraceServiceRequest) -> None:
        agent_trace = self._by_request.get(key)
        produced = self._produced.get(key)
        held = self._exemplars.get(agent_trace) if agent_trace is not None else None
        if produced is None or not produced[1] or held is None or held[1].root is None:
            return
        ex, targets = held[1], list(produced[1])
        produced[1].clear()
        out.resource_spans.append(ex.copies([ex.root, *ex.children], targets))
        ex.targets += targets
        self.stats.joined += len(targets)

    def _bound(self, held: OrderedDict, reason: str) -> None:
        while len(held) > self.max_held:
            held.popitem(last=False)
            self.stats.dropped[reason] += 1

    def _expire(self, now_s: float) -> None:
        while self._produced:
            key, (seen, waiting, _) = next(iter(self._produced.items()))
            if now_s - seen <= self.hold_s:
                break
            del self._produced[key]
            if waiting:
                self.stats.dropped["produce_unjoined"] += 1
        while self._exemplars:
            trace_id, (seen, ex) = next(iter(self._exemplars.items()))
            if now_s - seen <= self.hold_s:
                break
            del self._exemplars[trace_id]
            if ex.root is not None and not ex.targets:
                self.stats.dropped["exemplar_unjoined"] += 1
        if len(self._by_request) > len(self._exemplars):
            self._by_request = {k: t for k, t in self._by_request.items() if t in self._exemplars}


def _copy(s: Span, root: Span, trace_id: bytes, parent_id: bytes) -> Span:
    """``s`` (``root`` or one of its children) in trace ``trace_id`` under the produce span
    ``parent_id``; span ids derived from the triple, so each copy's parent is found again."""

    def new_id(span_id: bytes) -> bytes:
        return _derived_id(trace_id, parent_id, span_id)

    c = Span()
    c.CopyFrom(s)
    c.trace_id = trace_id
    c.span_id = new_id(s.span_id)
    if s.span_id == root.span_id:
        c.parent_span_id = parent_id
        c.links.add(trace_id=root.trace_id, span_id=root.span_id)
        c.attributes.append(
            KeyValue(key="linkwatch.joined_from_trace_id", value=AnyValue(string_value=root.trace_id.hex()))
        )
    else:
        c.parent_span_id = new_id(s.parent_span_id)
    return c


class TraceJoinRelay:
    """OTLP/HTTP receiver (protobuf, ``POST /v1/traces``) that forwards to ``forward_url``.

    Each export is forwarded unchanged first, and the answer (status) of the collector is the
    answer to the sender, so its exporter retries as it would against the collector; then the
    joined copies the export completed are posted. Bad bodies get 400 and are counted
    (``bad_request``); a failed post of copies is counted (``forward_failed``). Listens on
    loopback unless told otherwise.
    """

    def __init__(
        self, forward_url: str, host: str = "127.0.0.1", port: int = 4319, join: SpanJoin | None = None,
        timeout_s: float = 10.0,
    ) -> None:  # fmt: skip
        self.forward_url = forward_url
        self.timeout_s = timeout_s
        self.join = join if join is not None else SpanJoin()
        self._lock = threading.Lock()
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                status = relay._handle(self.path, self.headers.get("Content-Type", ""), self._body())
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def log_message(self, *args: object) -> None:
                pass

        try:
            self._server = http.server.ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise ListenError("the trace join relay", host, port, e) from None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._server.server_port

    def start(self) -> TraceJoinRelay:
        self._thread = threading.Thread(target=self._server.serve_forever, name="trace-join", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handle(self, path: str, content_type: str, body: bytes) -> int:
        if path != "/v1/traces" or "protobuf" not in content_type:
            with self._lock:
                self.join.stats.dropped["bad_request"] += 1
            return 415 if path == "/v1/traces" else 404
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception:  # protobuf's DecodeError; any bad body is the sender's
            with self._lock:
                self.join.stats.dropped["bad_request"] += 1
            return 400
        status = self._post(body)
        with self._lock:
            joined = self.join.feed(request, time.monotonic())
        if joined.resource_spans and self._post(joined.SerializeToString()) >= 300:
            with self._lock:
                self.join.stats.dropped["forward_failed"] += 1
        return status

    def _post(self, body: bytes) -> int:
        req = urllib.request.Request(
            self.forward_url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status
        except urllib.error.HTTPError as e:
            return e.code
        except OSError as e:
            log.warning("trace join: forwarding to %s failed: %s", self.forward_url, e)
            return 503
