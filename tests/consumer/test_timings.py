"""Client timings: Prometheus series, ClientFetch records on linkwatch.samples, span links; and a
slow application whose buffer (and RSS) stays bounded."""

from __future__ import annotations

import threading
import time

import psutil
import pytest
from kafka import KafkaConsumer, KafkaProducer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from consumer import AsyncFetchConsumer, ConsumerConfig
from consumer.metrics import APP_BROKER
from linkwatch.records import SAMPLES_TOPIC, ClientFetch, RecordError, decode
from linkwatch.sketch import LatencySketch
from testbed.load import ensure_own_topics
from tests.consumer.conftest import create_topic

pytestmark = [pytest.mark.cluster, pytest.mark.timing]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"


def _sample(registry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_timings_metrics_samples_and_span_links(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=3)
    ensure_own_topics(cluster3.bootstrap)  # publish_samples: to linkwatch.samples, made before use
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap)
    for i in range(300):
        headers = [("traceparent", f"00-{TRACE_ID}-{i + 1:016x}-01".encode())] if i % 3 == 0 else []
        producer.send(topic_name, value=b"x", partition=i % 3, headers=headers)
    producer.send(topic_name, value=b"bad-trace", partition=0, headers=[("traceparent", b"garbage")])
    producer.flush()
    producer.close()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    client_id = f"timings-{topic_name}"
    cfg = ConsumerConfig(
        bootstrap_servers=cluster3.bootstrap, client_id=client_id, cluster="test", metrics_window_s=1,
        publish_samples=True,
    )  # fmt: skip
    consumer = AsyncFetchConsumer(
        cfg, partitions=[(topic_name, p) for p in range(3)], tracer=provider.get_tracer("t")
    )
    with consumer:
        n, deadline = 0, time.monotonic() + 30
        while n < 301 and time.monotonic() < deadline:
            for d in consumer.poll(0.5):
                consumer.ack(d)
                n += 1
        time.sleep(1.2)  # one more window
    reg = consumer.timings.metrics.registry
    base = {"cluster": "test", "client_id": client_id, "group": ""}
    assert _sample(reg, "linkwatch_client_end_to_end_seconds_count", **base, topic=topic_name) == 301
    for broker in ("1", "2", "3"):
        assert _sample(reg, "linkwatch_client_fetch_latency_seconds_count", **base, broker=broker) >= 1
    assert _sample(reg, "linkwatch_client_wait_fetch_seconds_count", **base) >= 1
    assert _sample(reg, "linkwatch_client_buffer_bytes", **base) is not None

    spans = exporter.get_finished_spans()
    assert len(spans) == 100  # one per valid traceparent; the garbage one is counted, no span
    assert {s.context.trace_id for s in spans} == {int(TRACE_ID, 16)}  # children of the producer's
    assert sorted(s.parent.span_id for s in spans) == list(range(1, 301, 3))
    assert {s.kind for s in spans} == {SpanKind.CONSUMER}
    assert consumer.stats["bad_traceparent"] == 1

    reader = KafkaConsumer(SAMPLES_TOPIC, bootstrap_servers=cluster3.bootstrap, auto_offset_reset="earliest")
    ours: list[ClientFetch] = []

    def delivered() -> int:
        return sum(LatencySketch.from_dict(r.end_to_end).count for r in ours)

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and delivered() < 301:
        for recs in reader.poll(timeout_ms=500).values():
            for r in recs:
                try:
                    rec = decode(r.value)
                except RecordError:
                    continue
                if isinstance(rec, ClientFetch) and rec.client_id == client_id:
                    ours.append(rec)
    reader.close()
    assert {r.broker for r in ours} == {APP_BROKER, 1, 2, 3}
    assert delivered() == 301  # every delivery counted once across brokers and windows
    assert all(LatencySketch.from_dict(r.wait_fetch).count == 0 for r in ours if r.broker != APP_BROKER)


def test_batch_spans_link_each_record_and_are_not_per_record(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, linger_ms=50)
    traces = [f"{t + 1:032x}" for t in range(3)]
    for i in range(60):
        producer.send(
            topic_name,
            value=b"x",
            partition=0,
            headers=[("traceparent", f"00-{traces[i % 3]}-{i + 1:016x}-01".encode())],
        )
    producer.send(topic_name, value=b"bad", partition=0, headers=[("traceparent", b"00-xyz")])
    producer.send(topic_name, value=b"untraced", partition=0)
    producer.flush()
    producer.close()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    cfg = ConsumerConfig(bootstrap_servers=cluster3.bootstrap, trace_spans="batch")
    consumer = AsyncFetchConsumer(cfg, partitions=[(topic_name, 0)], tracer=provider.get_tracer("t"))
    polls = 0
    with consumer:
        n, deadline = 0, time.monotonic() + 30
        while n < 62 and time.monotonic() < deadline:
            got = consumer.poll(0.5)
            polls += bool(got)
            consumer.ack_many(got)
            n += len(got)
    spans = exporter.get_finished_spans()
    assert n == 62
    assert 1 <= len(spans) <= polls < 62  # one per partition run of a poll, not one per record
    links = [link.context for s in spans for link in s.links]
    assert sorted(c.span_id for c in links) == list(range(1, 61))
    assert {f"{c.trace_id:032x}" for c in links} == set(traces)
    assert (
        sum(s.attributes["messaging.batch.message_count"] for s in spans if len(s.links) > 1)
        + sum(1 for s in spans if len(s.links) == 1)
        == 60
    )
    assert {s.kind for s in spans} == {SpanKind.CONSUMER}
    assert consumer.stats["bad_traceparent"] == 1


def test_slow_application_keeps_buffer_and_rss_bounded(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=3)
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, linger_ms=20, batch_size=256 * 1024)
    payload = b"v" * 2000
    for i in range(15_000):  # 30 MB, 30x the buffer
        producer.send(topic_name, value=payload, partition=i % 3)
    producer.flush()
    producer.close()
    bound = 1024 * 1024
    cfg = ConsumerConfig(
        bootstrap_servers=cluster3.bootstrap, buffer_max_bytes=bound, max_partition_fetch_bytes=256 * 1024,
        fetch_max_bytes=512 * 1024,
    )  # fmt: skip
    proc = psutil.Process()
    rss: list[int] = []
    buffered: list[int] = []
    with AsyncFetchConsumer(cfg, partitions=[(topic_name, p) for p in range(3)]) as consumer:
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                rss.append(proc.memory_info().rss)
                buffered.append(consumer.buffered()[0])
                time.sleep(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        n, deadline = 0, time.monotonic() + 12
        while time.monotonic() < deadline:  # a slow app: ~1 ms per record
            for d in consumer.poll(0.5, max_records=50):
                time.sleep(0.001)
                consumer.ack(d)
                n += 1
        stop.set()
        sampler.join()
    # The buffer never exceeds its bound plus one response per partition ...
    assert max(buffered) <= bound + 3 * cfg.max_partition_fetch_bytes
    assert consumer.peak_buffer_bytes <= bound + 3 * cfg.max_partition_fetch_bytes
    # ... the app was really slower than the data (most of it still on the brokers) ...
    assert n < 12_000
    # ... and RSS is flat after warm-up: the second half grows by less than 3 buffers.
    half = rss[len(rss) // 2 :]
    assert max(half) - min(half) < 3 * bound + 4 * 1024 * 1024
    print(f"records={n} rss {min(rss) / 2**20:.0f}..{max(rss) / 2**20:.0f} MiB; buffer max {max(buffered)} B")
