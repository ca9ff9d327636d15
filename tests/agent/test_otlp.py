"""Slow-request exemplars as OTLP spans: structure (in-memory exporter) and a real OTLP/HTTP export
to a loopback receiver that decodes the protobuf."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.output.otlp import STAGE_ORDER, SlowRequestTracer, make_exporter
from linkwatch.records import SlowRequest

REQUEST = SlowRequest(
    cluster="c",
    source="broker-2",
    ts_ms=1_800_000_000_000,
    broker=2,
    request="Produce",
    client_id="billing-producer",
    correlation_id=42,
    connection="127.0.0.1:9092-127.0.0.1:5000-0-1",
    stages_ms={
        "requestQueue": 1.0,
        "local": 2.0,
        "remote": 400.0,
        "throttle": 0.0,
        "responseQueue": 0.5,
        "send": 0.5,
        "total": 404.0,
    },
    partitions=[{"topic": "orders", "partition": 3, "bytes": 8041}],
)


def test_one_span_per_exemplar_with_a_child_per_stage() -> None:
    memory = InMemorySpanExporter()
    tracer = SlowRequestTracer(memory, cluster="c", broker=2)
    tracer.emit([REQUEST])
    tracer.flush()
    spans = memory.get_finished_spans()
    root = next(s for s in spans if s.parent is None)
    children = sorted((s for s in spans if s.parent is not None), key=lambda s: s.start_time)
    assert [c.name for c in children] == list(STAGE_ORDER)
    assert all(c.parent.span_id == root.context.span_id for c in children)
    assert root.name == "kafka Produce"
    assert (root.end_time - root.start_time) == 404_000_000
    remote = next(c for c in children if c.name == "remote")
    assert remote.end_time - remote.start_time == 400_000_000
    assert root.attributes["kafka.client_id"] == "billing-producer"
    assert root.attributes["kafka.broker"] == 2
    assert list(root.attributes["kafka.partitions"]) == ["orders-3"]
    tracer.shutdown()


class _Receiver(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[ExportTraceServiceRequest]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        msg = ExportTraceServiceRequest()
        msg.ParseFromString(body)
        _Receiver.received.append(msg)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    _Receiver.received = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1/traces"
    server.shutdown()
    server.server_close()


def test_real_otlp_http_export(receiver: str) -> None:
    tracer = SlowRequestTracer(make_exporter(receiver), cluster="c", broker=2)
    tracer.emit([REQUEST])
    assert tracer.flush()
    tracer.shutdown()
    spans = [
        s
        for msg in _Receiver.received
        for rs in msg.resource_spans
        for ss in rs.scope_spans
        for s in ss.spans
    ]
    assert sorted(s.name for s in spans) == sorted(["kafka Produce", *STAGE_ORDER])
    root = next(s for s in spans if s.name == "kafka Produce")
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    attrs = {a.key: a.value for a in root.attributes}
    assert attrs["kafka.request"].string_value == "Produce"
