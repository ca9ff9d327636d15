"""OTLP spans for slow-request exemplars: one span per request, a child span per stage.

The request span runs from ``end - totalTimeMs`` to the request's end (the log line time);
stage spans follow one another in Kafka's order (request queue, local, remote, throttle,
response queue, send), each as long as the log says. Attributes: broker, client id,
correlation id, connection, request type and the topic-partitions with their sizes.

Export is the OpenTelemetry SDK's batch processor with the OTLP/HTTP exporter: bounded queue,
background thread; if the collector is unreachable spans are dropped by the SDK after its
retries, never blocking the agent.
"""

from __future__ import annotations

from collections.abc import Iterable

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, set_span_in_context

from linkwatch.records import SlowRequest

STAGE_ORDER = ("requestQueue", "local", "remote", "throttle", "responseQueue", "send")
MS = 1_000_000  # ns


def make_exporter(endpoint: str, timeout_s: float = 10.0) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint, timeout=timeout_s)


class SlowRequestTracer:
    def __init__(self, exporter: SpanExporter, *, cluster: str, broker: int, max_queue: int = 2048) -> None:
        resource = Resource.create(
            {
                "service.name": "kafka-broker",
                "service.instance.id": f"{cluster}/{broker}",
                "kafka.cluster": cluster,
            }
        )
        self.provider = TracerProvider(resource=resource)
        self.provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=max_queue))
        self.tracer = self.provider.get_tracer("linkwatch.agent")

    def emit(self, requests: Iterable[SlowRequest]) -> int:
        n = 0
        for r in requests:
            self._one(r)
            n += 1
        return n

    def _one(self, r: SlowRequest) -> None:
        end = int(r.ts_ms * MS)
        total = r.stages_ms.get("total", 0.0)
        start = end - int(total * MS)
        attrs = {
            "kafka.broker": r.broker,
            "kafka.request": r.request,
            "kafka.client_id": r.client_id,
            "kafka.correlation_id": r.correlation_id,
            "kafka.connection": r.connection,
            "kafka.partitions": [f"{p.get('topic')}-{p.get('partition')}" for p in r.partitions],
            "kafka.partition_bytes": [int(p.get("bytes", 0)) for p in r.partitions],
            **{f"kafka.stage.{k}_ms": float(v) for k, v in r.stages_ms.items()},
        }
        root = self.tracer.start_span(
            f"kafka {r.request}", kind=SpanKind.SERVER, start_time=start, attributes=attrs
        )
        ctx = set_span_in_context(root)
        t = start
        for stage in STAGE_ORDER:
            ms = r.stages_ms.get(stage, 0.0)
            child = self.tracer.start_span(
                stage, context=ctx, start_time=t, attributes={"kafka.stage_ms": ms}
            )
            t += int(ms * MS)
            child.end(end_time=min(t, end) if end > start else t)
        root.end(end_time=end)

    def flush(self, timeout_ms: int = 10_000) -> bool:
        return self.provider.force_flush(timeout_ms)

    def shutdown(self) -> None:
        self.provider.shutdown()
