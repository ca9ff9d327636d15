"""W3C trace context in record headers, and a produce span per record.

:class:`TracingProducer` wraps a kafka-python ``KafkaProducer``; :class:`TracingConfluentProducer`
wraps a ``confluent_kafka.Producer``. Each ``send``/``produce``:

1. starts a span ``"send <topic>"`` of kind PRODUCER, child of the caller's current span
   (a new trace when there is none), with the messaging attributes ``messaging.system=kafka``,
   ``messaging.operation.type=send``, ``messaging.destination.name``, ``messaging.client.id``;
2. writes that span's context into the record's headers as ``traceparent`` (and ``tracestate``
   when the context has one), replacing any the caller passed (:mod:`linkwatch.trace_context`): the consumer's span then links to
   this produce span (:mod:`consumer.async_fetch`);
3. ends the span when the send completes: on success with ``messaging.destination.partition.id``
   and ``messaging.kafka.offset``; on failure with the exception recorded and status ERROR. A
   send that raises at once (serialization, buffer full) ends the span the same way and the
   error propagates to the caller.

kafka-python only: the span also gets ``messaging.kafka.broker_id`` and
``messaging.kafka.correlation_id`` of the Produce request whose response acknowledged the record
(:func:`consumer.kafka_compat.note_produce_requests`). The broker's request log names that
request by (client id, correlation id); :mod:`linkwatch.trace_join` puts the agent's stage spans
of a slow request (its exemplar) under the produce spans of the records it carried. The client
id must then be unique per producer process (kafka-python's default ``kafka-python-producer-N``
is unique only within a process: pass ``client_id=`` per instance).

confluent-kafka: the same is ``produce(topic, value, headers=[("traceparent", …)],
on_delivery=callback)`` with the span ended in the delivery callback, which is what
:class:`TracingConfluentProducer` does. librdkafka does not expose the correlation id of the
request that carried a message, so its produce spans are not joined with the broker's stage
spans (``docs/tracing.md``, "Limits").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from consumer import kafka_compat
from linkwatch.trace_context import Headers, inject


def start_produce_span(tracer: Tracer, topic: str, client_id: str, context: Context | None = None) -> Span:
    """The PRODUCER span of one record (not yet ended)."""
    return tracer.start_span(
        f"send {topic}",
        context=context,
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "kafka",
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
            "messaging.destination.name": topic,
            "messaging.client.id": client_id,
        },
    )


def end_ok(span: Span, partition: int, offset: int) -> None:
    span.set_attribute("messaging.destination.partition.id", str(partition))
    span.set_attribute("messaging.kafka.offset", offset)
    span.end()


def end_failed(span: Span, error: BaseException) -> None:
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
    span.end()


class TracingProducer:
    """A kafka-python ``KafkaProducer`` whose ``send`` traces each record (module docstring).

    Everything but ``send`` is the wrapped producer's own (``flush``, ``close``, …). Installs
    :func:`consumer.kafka_compat.note_produce_requests` on the producer (kafka-python 3.0.12
    only: another version is refused at construction).
    """

    def __init__(self, producer: Any, tracer: Tracer | None = None) -> None:
        self._producer = producer
        self.client_id: str = producer.config["client_id"]
        self.tracer = tracer if tracer is not None else trace.get_tracer("linkwatch.producer")
        self.requests = kafka_compat.note_produce_requests(producer)

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Any:
        """``KafkaProducer.send`` with the trace headers added; returns its future."""
        span = start_produce_span(self.tracer, topic, self.client_id)
        try:
            future = self._producer.send(
                topic, value=value, key=key, headers=inject(span, headers), partition=partition,
                timestamp_ms=timestamp_ms,
            )  # fmt: skip
        except BaseException as e:
            end_failed(span, e)
            raise
        future.add_callback(self._acked, span, future)
        future.add_errback(self._failed, span)
        return future

    def _acked(self, span: Span, future: Any, metadata: Any) -> None:
        carrier = self.requests.carrier(future)
        if carrier is not None:
            span.set_attribute("messaging.kafka.broker_id", carrier[0])
            span.set_attribute("messaging.kafka.correlation_id", carrier[1])
        end_ok(span, metadata.partition, metadata.offset)

    def _failed(self, span: Span, error: BaseException) -> None:
        end_failed(span, error)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


class TracingConfluentProducer:
    """A ``confluent_kafka.Producer`` whose ``produce`` traces each record (module docstring).

    The span ends in the delivery report, so ``poll``/``flush`` must be called as usual for it
    to end. ``client_id`` is what the span names (librdkafka's ``client.id``). Everything but
    ``produce`` is the wrapped producer's own; confluent-kafka is not a dependency of linkwatch.
    """

    def __init__(self, producer: Any, client_id: str, tracer: Tracer | None = None) -> None:
        self._producer = producer
        self.client_id = client_id
        self.tracer = tracer if tracer is not None else trace.get_tracer("linkwatch.producer")

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Headers | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        **kwargs: Any,
    ) -> None:
        span = start_produce_span(self.tracer, topic, self.client_id)

        def report(err: Any, msg: Any) -> None:
            if err is None:
                end_ok(span, msg.partition(), msg.offset())
            else:
                end_failed(span, RuntimeError(str(err)))
            if on_delivery is not None:
                on_delivery(err, msg)

        try:
            self._producer.produce(
                topic, value=value, key=key, headers=inject(span, headers), on_delivery=report, **kwargs
            )
        except BaseException as e:
            end_failed(span, e)
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)
