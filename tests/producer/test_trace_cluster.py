"""On the real 3-broker cluster: one produced record's trace, read back from a real OTLP/HTTP
receiver on loopback, holds the produce span, the broker's stage spans and the consume span.

Real parts: the brokers and their request log, the agent reading broker 1's log (slow-request
threshold 0 ms, so the record's Produce request is an exemplar), the producer helper on
kafka-python, the async-fetch consumer, the trace join relay, OTLP/HTTP export by the
OpenTelemetry SDK. Nothing is faked.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agent.config import AgentConfig
from agent.output.otlp import STAGE_ORDER
from agent.runner import Agent
from consumer import AsyncFetchConsumer, ConsumerConfig
from linkwatch.trace_context import extract
from linkwatch.trace_join import TraceJoinRelay
from producer.tracing import TracingConfluentProducer, TracingProducer
from tests.consumer.conftest import create_topic
from tests.otlp_receiver import serve_otlp

pytestmark = [pytest.mark.cluster, pytest.mark.timing]


_received: list[ExportTraceServiceRequest] = []  # what the loopback receiver got


@pytest.fixture
def collector() -> Iterator[str]:
    _received.clear()
    with serve_otlp(_received) as url:
        yield url


def received_spans() -> list[Span]:
    return [s for m in list(_received) for rs in m.resource_spans for ss in rs.scope_spans for s in ss.spans]


def provider_to(url: str, service: str) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url), schedule_delay_millis=200))
    return provider


def run_agent(agent: Agent, stop: threading.Event) -> None:
    while not stop.is_set():
        agent.step()
        stop.wait(0.2)


def test_one_record_one_trace_from_producer_through_broker_stages_to_consumer(
    cluster3, admin, topic_name, collector
):
    leader = create_topic(admin, topic_name, partitions=1)[0]
    relay = TraceJoinRelay(collector, port=0).start()
    relay_url = f"http://127.0.0.1:{relay.port}/v1/traces"
    agent = Agent(
        AgentConfig.model_validate(
            {
                "cluster": "test",
                "broker_id": leader,
                "request_log": {
                    "path": str(cluster3.node(leader).request_log),
                    "start_at": "end",
                    "window_s": 1,
                    "grace_s": 0.5,
                    "slow_threshold_ms": 0,
                    "max_exemplars_per_window": 10_000,
                },
                "prometheus": {"enabled": False},
                "host": {"enabled": False},
                "otlp": {"endpoint": relay_url},
            }
        )
    ).start()
    agent.step()  # opens the request log at its end
    stop = threading.Event()
    agent_thread = threading.Thread(target=run_agent, args=(agent, stop), daemon=True)
    agent_thread.start()
    client_id = f"trace-{topic_name}"
    producer_spans, consumer_spans = (
        provider_to(relay_url, "orders-app"),
        provider_to(relay_url, "billing-app"),
    )
    producer = TracingProducer(
        KafkaProducer(bootstrap_servers=cluster3.bootstrap, client_id=client_id, acks=1),
        producer_spans.get_tracer("app"),
    )
    try:
        metadata = producer.send(topic_name, value=b"order-1", partition=0).get(timeout=10)
        assert producer_spans.force_flush()
        consumer = AsyncFetchConsumer(
            ConsumerConfig(bootstrap_servers=cluster3.bootstrap, client_id=f"{client_id}-reader"),
            partitions=[(topic_name, 0)],
            tracer=consumer_spans.get_tracer("app"),
        )
        with consumer:
            got, deadline = [], time.monotonic() + 20
            while not got and time.monotonic() < deadline:
                got = consumer.poll(0.5)
            consumer.ack_many(got)
        assert [d.offset for d in got] == [metadata.offset]
        assert consumer_spans.force_flush()
        record_ctx = extract(got[0].headers)
        assert record_ctx is not None
        trace_id = record_ctx.trace_id.to_bytes(16, "big")

        def ours() -> list[Span]:
            return [s for s in received_spans() if s.trace_id == trace_id]

        deadline = time.monotonic() + 30  # the agent exports a window once it has closed
        while time.monotonic() < deadline and not any(s.name == "kafka Produce" for s in ours()):
            time.sleep(0.3)
    finally:
        stop.set()
        agent_thread.join(10)
        agent.stop()
        producer.close()
        producer_spans.shutdown()
        consumer_spans.shutdown()
        relay.close()

    spans = ours()
    by_kind = {
        k: [s for s in spans if s.kind == k]
        for k in (Span.SPAN_KIND_PRODUCER, Span.SPAN_KIND_CONSUMER, Span.SPAN_KIND_SERVER)
    }
    assert len(by_kind[Span.SPAN_KIND_PRODUCER]) == 1, [s.name for s in spans]
    produce = by_kind[Span.SPAN_KIND_PRODUCER][0]
    assert produce.name == f"send {topic_name}"
    assert produce.span_id == record_ctx.span_id.to_bytes(8, "big")  # the header names the produce span
    attrs = {a.key: a.value for a in produce.attributes}
    assert attrs["messaging.client.id"].string_value == client_id
    assert attrs["messaging.destination.partition.id"].string_value == "0"
    assert attrs["messaging.kafka.broker_id"].int_value == leader
    # the broker's stage spans, under the produce span
    [broker_root] = by_kind[Span.SPAN_KIND_SERVER]
    assert broker_root.name == "kafka Produce" and broker_root.parent_span_id == produce.span_id
    root_attrs = {a.key: a.value for a in broker_root.attributes}
    assert root_attrs["kafka.client_id"].string_value == client_id
    assert root_attrs["kafka.correlation_id"].int_value == attrs["messaging.kafka.correlation_id"].int_value
    assert root_attrs["kafka.broker"].int_value == leader
    stages = sorted(s.name for s in spans if s.parent_span_id == broker_root.span_id)
    assert stages == sorted(STAGE_ORDER)
    # the consumer's span, a child of the produce span
    [consume] = by_kind[Span.SPAN_KIND_CONSUMER]
    assert consume.name == f"receive {topic_name}" and consume.parent_span_id == produce.span_id
    assert len(spans) == 1 + 1 + len(STAGE_ORDER) + 1
    assert relay.join.stats.joined >= 1


def test_confluent_producer_injects_and_ends_spans(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=1)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    # The admin client's broker knows the new topic; another broker may not yet (each learns it
    # from the metadata log on its own), and a producer asking it fails partition 0 as unknown.
    # A separate client waits until the topic is led, so the producer under test still learns
    # the topic's partitions only when it first sends (partition 7 fails in its delivery report).
    seer = ConfluentProducer({"bootstrap.servers": cluster3.bootstrap})
    deadline = time.monotonic() + 30
    while True:
        topic = seer.list_topics(topic_name, timeout=5).topics.get(topic_name)
        if (
            topic is not None
            and topic.error is None
            and 0 in topic.partitions
            and topic.partitions[0].leader >= 0
        ):
            break
        assert time.monotonic() < deadline, f"no leader of {topic_name}-0 seen after 30s"
        time.sleep(0.2)
    time.sleep(0.5)  # the other brokers apply the same metadata record within milliseconds
    raw = ConfluentProducer(
        {"bootstrap.servers": cluster3.bootstrap, "client.id": "cf-trace", "message.max.bytes": 10_000}
    )
    producer = TracingConfluentProducer(raw, "cf-trace", provider.get_tracer("app"))
    reports = []
    producer.produce(topic_name, value=b"a", partition=0, headers=[("traceparent", b"stale"), ("k", b"v")],
                     on_delivery=lambda err, msg: reports.append((err, msg.offset())))  # fmt: skip
    # fails in the delivery report: the topic has no partition 7
    producer.produce(
        topic_name, value=b"b", partition=7, on_delivery=lambda err, msg: reports.append((err, None))
    )
    with pytest.raises(KafkaException):  # fails at once: larger than message.max.bytes
        producer.produce(topic_name, value=b"c" * 20_000, partition=0)
    assert producer.flush(20) == 0
    assert len(reports) == 2
    [ok] = [r for r in reports if r[0] is None]
    reader = KafkaConsumer(bootstrap_servers=cluster3.bootstrap, consumer_timeout_ms=10_000)
    reader.assign([TopicPartition(topic_name, 0)])
    reader.seek(TopicPartition(topic_name, 0), ok[1])
    headers = next(iter(reader)).headers
    reader.close()
    assert [k for k, _ in headers] == ["k", "traceparent"]  # the caller's stale trace header replaced
    spans = memory.get_finished_spans()
    assert len(spans) == 3 and {s.kind for s in spans} == {SpanKind.PRODUCER}
    [sent] = [s for s in spans if s.status.status_code is not StatusCode.ERROR]
    assert extract(headers).span_id == sent.context.span_id
    assert sent.attributes["messaging.kafka.offset"] >= 0
    assert sent.attributes["messaging.destination.partition.id"] == "0"
    failed = [s for s in spans if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 2 and all(s.events[0].name == "exception" for s in failed)


def test_kafka_python_failures_end_the_span_with_the_error(cluster3, admin, topic_name):
    admin.create_topics(
        [
            NewTopic(
                topic_name, -1, -1, replica_assignments={0: [1]}, topic_configs={"max.message.bytes": "2000"}
            )
        ]
    )
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    producer = TracingProducer(
        KafkaProducer(bootstrap_servers=cluster3.bootstrap, client_id=f"fail-{topic_name}", retries=0),
        provider.get_tracer("app"),
    )
    try:
        ok = producer.send(topic_name, value=b"small", partition=0).get(timeout=20)
        too_big_for_the_topic = producer.send(topic_name, value=b"x" * 10_000, partition=0)
        with pytest.raises(KafkaError):
            too_big_for_the_topic.get(timeout=20)  # the broker refuses it: fails in the callback
        with pytest.raises(TypeError):  # refused at once: a str value without a serializer
            producer.send(topic_name, value="not bytes", partition=0)
    finally:
        producer.close()
    spans = memory.get_finished_spans()
    assert len(spans) == 3
    [sent] = [s for s in spans if s.status.status_code is not StatusCode.ERROR]
    assert sent.attributes["messaging.kafka.offset"] == ok.offset
    assert sent.attributes["messaging.kafka.broker_id"] == 1
    assert sent.attributes["messaging.kafka.correlation_id"] > 0
    errors = sorted(
        s.events[0].attributes["exception.type"] for s in spans if s.status.status_code is StatusCode.ERROR
    )
    assert len(errors) == 2 and "TypeError" in errors
