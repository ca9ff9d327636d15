"""Slow-request exemplars as OTLP spans: structure (in-memory exporter) and a real OTLP/HTTP export
to a loopback receiver that decodes the protobuf."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent.output.otlp import STAGE_ORDER, SlowRequestTracer, make_exporter
from linkwatch.records import SlowRequest
from tests.otlp_receiver import serve_otlp

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


_received: list[ExportTraceServiceRequest] = []  # what the loopback receiver got


@pytest.fixture
def receiver() -> Iterator[str]:
    _received.clear()
    with serve_otlp(_received) as url:
        yield url


def test_real_otlp_http_export(receiver: str) -> None:
    tracer = SlowRequestTracer(make_exporter(receiver), cluster="c", broker=2)
    tracer.emit([REQUEST])
    assert tracer.flush()
    tracer.shutdown()
    spans = [s for msg in _received for rs in msg.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(s.name for s in spans) == sorted(["kafka Produce", *STAGE_ORDER])
    root = next(s for s in spans if s.name == "kafka Produce")
    assert all(s.parent_span_id == root.span_id for s in spans if s is not root)
    attrs = {a.key: a.value for a in root.attributes}
    assert attrs["kafka.request"].string_value == "Produce"
