"""The W3C trace context in Kafka record headers, shared by the producer and consumer helpers.

Headers ``traceparent`` and ``tracestate`` (values ASCII bytes), as OpenTelemetry's Kafka
instrumentations write them. :func:`inject` replaces any trace header already there (one record,
one context); :func:`extract` reads the first of each and returns ``None`` for a missing or
malformed ``traceparent``: the caller counts a malformed one, it never raises for bad data.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE_HEADERS = ("traceparent", "tracestate")
_PROPAGATOR = TraceContextTextMapPropagator()
Headers = Sequence[tuple[str, bytes | None]] | Mapping[str, Any]


def _pairs(headers: Headers | None) -> list[tuple[str, Any]]:
    # confluent-kafka also takes a dict; kafka-python a list of (str, bytes)
    if headers is None:
        return []
    return list(headers.items()) if isinstance(headers, Mapping) else list(headers)


def inject(span: Span, headers: Headers | None) -> list[tuple[str, bytes]]:
    """``headers`` without trace headers, then ``span``'s ``traceparent`` (and ``tracestate``)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    kept = [(k, v) for k, v in _pairs(headers) if k not in TRACE_HEADERS]
    return kept + [(k, carrier[k].encode("ascii")) for k in TRACE_HEADERS if k in carrier]


def has_traceparent(headers: Headers | None) -> bool:
    return any(k == "traceparent" for k, _ in _pairs(headers))


def extract(headers: Headers | None) -> SpanContext | None:
    """The (remote) span context in ``headers``; ``None`` if ``traceparent`` is missing or bad."""
    carrier: dict[str, str] = {}
    for k, v in _pairs(headers):
        if k in TRACE_HEADERS and k not in carrier and v is not None:
            carrier[k] = v.decode("ascii", "replace") if isinstance(v, bytes | bytearray) else str(v)
    if "traceparent" not in carrier:
        return None
    ctx = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return ctx if ctx.is_valid else None
