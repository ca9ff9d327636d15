"""The span join: the agent's stage spans of a slow Produce request copied under the produce spans
of the records it carried, whatever order and grouping the exports come in; and the relay on
loopback in front of a real OTLP/HTTP receiver."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agent.output.otlp import STAGE_ORDER, SlowRequestTracer
from linkwatch.records import SlowRequest
from linkwatch.trace_join import SpanJoin, TraceJoinRelay
from producer.tracing import start_produce_span
from tests.otlp_receiver import serve_otlp

CLIENT = "orders-producer-7"


def exemplar(correlation_id: int = 42, broker: int = 2, request: str = "Produce") -> list:
    """The agent's spans of one slow request (root last, as the agent's batch exporter sends them)."""
    memory = InMemorySpanExporter()
    tracer = SlowRequestTracer(memory, cluster="c", broker=broker)
    tracer.emit(
        [
            SlowRequest(
                cluster="c", source=f"broker-{broker}", ts_ms=1_800_000_000_000, broker=broker, request=request,
                client_id=CLIENT, correlation_id=correlation_id, connection="x",
                stages_ms={"requestQueue": 1.0, "local": 2.0, "remote": 300.0, "throttle": 0.0,
                           "responseQueue": 0.5, "send": 0.5, "total": 304.0},
                partitions=[{"topic": "orders", "partition": 0, "bytes": 100}],
            )
        ]
    )  # fmt: skip
    tracer.flush()
    return list(memory.get_finished_spans())


def produced(n: int, correlation_id: int = 42, broker: int = 2, traces: int = 2) -> list:
    """``n`` records' PRODUCER spans over ``traces`` traces, all carried by one request."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("linkwatch.producer")
    from opentelemetry.trace import set_span_in_context

    roots = [tracer.start_span(f"app {t}") for t in range(traces)]
    for i in range(n):
        span = start_produce_span(tracer, "orders", CLIENT, set_span_in_context(roots[i % traces]))
        span.set_attribute("messaging.kafka.broker_id", broker)
        span.set_attribute("messaging.kafka.correlation_id", correlation_id)
        span.end()
    return list(memory.get_finished_spans())


def spans_of(msg: ExportTraceServiceRequest) -> list[Span]:
    return [s for rs in msg.resource_spans for ss in rs.scope_spans for s in ss.spans]


def feed_all(join: SpanJoin, exports: list[list], now_s: float = 0.0) -> list[Span]:
    out = []
    for spans in exports:
        out += spans_of(join.feed(encode_spans(spans), now_s))
    return out


def check_joined(joined: list[Span], produce: list, ex: list) -> None:
    """Every produce span has one copy of the exemplar tree in its trace, parented to it."""
    root = next(s for s in ex if s.parent is None)
    assert len(joined) == len(produce) * len(ex)
    for p in produce:
        tid = p.context.trace_id.to_bytes(16, "big")
        tree = [s for s in joined if s.trace_id == tid and s.name in {root.name, *STAGE_ORDER}]
        copy_root = [s for s in tree if s.parent_span_id == p.context.span_id.to_bytes(8, "big")]
        assert len(copy_root) == 1 and copy_root[0].name == "kafka Produce"
        children = [s for s in tree if s.parent_span_id == copy_root[0].span_id]
        assert sorted(s.name for s in children) == sorted(STAGE_ORDER)
        assert copy_root[0].links[0].span_id == root.context.span_id.to_bytes(8, "big")


def producer_spans(spans: list) -> list:
    return [s for s in spans if s.kind is SpanKind.PRODUCER]


def test_produce_first_then_the_exemplar() -> None:
    join = SpanJoin()
    prod, ex = produced(3), exemplar()
    assert feed_all(join, [prod]) == []
    joined = feed_all(join, [ex], now_s=15)
    check_joined(joined, producer_spans(prod), ex)
    assert join.stats.joined == 3


def test_exemplar_first_children_in_an_earlier_export() -> None:
    join = SpanJoin()
    prod, ex = produced(2), exemplar()
    assert feed_all(join, [ex[:3], ex[3:]]) == []
    check_joined(feed_all(join, [prod], now_s=1), producer_spans(prod), ex)


@pytest.mark.parametrize(
    ("prod", "ex", "why"),
    [
        (dict(correlation_id=41), {}, "another correlation id"),
        (dict(broker=1), {}, "the same correlation id on another broker's connection"),
        ({}, dict(request="Fetch"), "not a Produce request"),
    ],
)
def test_no_false_joins(prod, ex, why) -> None:
    join = SpanJoin()
    assert feed_all(join, [produced(2, **prod), exemplar(**ex)]) == [], why


def test_unjoined_halves_are_forgotten_and_counted() -> None:
    join = SpanJoin(hold_s=10)
    feed_all(join, [produced(2, correlation_id=1), exemplar(correlation_id=2)])
    feed_all(join, [], now_s=11)
    assert join.feed(ExportTraceServiceRequest(), 11) == ExportTraceServiceRequest()
    assert join.stats.dropped == {"produce_unjoined": 1, "exemplar_unjoined": 1}
    assert feed_all(join, [produced(1, correlation_id=2)], now_s=12) == []  # too late


def test_bounds_are_counted() -> None:
    join = SpanJoin(max_held=2, max_traces_per_request=3)
    feed_all(join, [produced(5, traces=5)])
    assert join.stats.dropped["traces_per_request"] == 2
    for corr in (7, 8, 9):
        feed_all(join, [produced(1, correlation_id=corr)])
    assert join.stats.dropped["produce_held_full"] == 2
    assert len(feed_all(join, [exemplar()])) == 0  # request 42 was pushed out


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.randoms(use_true_random=False), st.integers(1, 5))
def test_any_order_and_grouping_of_exports_joins_the_same(rnd, groups) -> None:
    prod, ex = produced(4, traces=3), exemplar()
    agent_side = list(ex)  # the agent's root comes after its children; otherwise any order
    root = agent_side.pop()
    rnd.shuffle(agent_side)
    everything = prod + agent_side
    rnd.shuffle(everything)
    cut = sorted(rnd.sample(range(1, len(everything)), min(groups, len(everything) - 1)))
    exports = [everything[a:b] for a, b in zip([0, *cut], [*cut, len(everything)], strict=True)]
    exports.insert(rnd.randint(1, len(exports)), [root])
    joined = feed_all(SpanJoin(), exports)
    check_joined(joined, producer_spans(prod), ex)


_received: list[ExportTraceServiceRequest] = []  # what the loopback receiver got


@pytest.fixture
def collector() -> Iterator[str]:
    _received.clear()
    with serve_otlp(_received) as url:
        yield url


def _post(url: str, body: bytes, content_type: str = "application/x-protobuf") -> int:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_relay_forwards_unchanged_then_the_copies(collector: str) -> None:
    relay = TraceJoinRelay(collector, port=0).start()
    url = f"http://127.0.0.1:{relay.port}/v1/traces"
    try:
        prod, ex = produced(2), exemplar()
        for spans in (prod, ex):
            assert _post(url, encode_spans(spans).SerializeToString()) == 200
        assert _post(url, b"\x0a\xff\xff") == 400
        assert _post(url, b"{}", "application/json") == 415
    finally:
        relay.close()
    got = _received
    assert [m.SerializeToString() for m in got[:2]] == [
        encode_spans(s).SerializeToString() for s in (prod, ex)
    ]
    check_joined(spans_of(got[2]), producer_spans(prod), ex)
    assert relay.join.stats.dropped == {"bad_request": 2}
