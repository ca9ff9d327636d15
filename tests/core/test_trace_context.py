"""Trace context in record headers: inject/extract round trip, and malformed input as ``None``."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from linkwatch.trace_context import extract, has_traceparent, inject

TRACER = TracerProvider().get_tracer("t")
W3C = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}")
GOOD = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

header_names = st.sampled_from(["traceparent", "tracestate", "x", "key", "TRACEPARENT"])
header_values = st.one_of(st.none(), st.binary(max_size=80))
header_lists = st.lists(st.tuples(header_names, header_values), max_size=6)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(header_lists)
def test_inject_replaces_trace_headers_and_keeps_the_others(headers):
    span = TRACER.start_span("s")
    out = inject(span, headers)
    assert [h for h in out if h[0] not in ("traceparent", "tracestate")] == [
        h for h in headers if h[0] not in ("traceparent", "tracestate")
    ]
    assert [k for k, _ in out].count("traceparent") == 1
    ctx = extract(out)
    assert ctx is not None
    assert (ctx.trace_id, ctx.span_id) == (span.get_span_context().trace_id, span.get_span_context().span_id)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(header_lists)
def test_extract_never_raises(headers):
    ctx = extract(headers)
    assert ctx is None or ctx.is_valid
    if not any(k == "traceparent" and v is not None for k, v in headers):
        assert ctx is None


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.text(max_size=80), st.binary(max_size=80))
def test_malformed_traceparent_is_none(text, raw):
    for value in (text.encode("utf-8"), raw):
        ctx = extract([("traceparent", value)])
        if ctx is not None:  # only a well-formed W3C value may parse
            assert W3C.match(value.decode("ascii").strip())


MALFORMED = [
    b"",
    b"garbage",
    b"00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
    b"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
    b"ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff is invalid
    b"00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",  # short trace id
    b"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
    b"\xff\xfe",
]


@pytest.mark.parametrize("value", MALFORMED)
def test_malformed_table(value):
    assert extract([("traceparent", value)]) is None


def test_first_traceparent_wins_and_tracestate_travels():
    ctx = extract([("traceparent", GOOD), ("tracestate", b"vendor=1"), ("traceparent", b"garbage")])
    assert ctx is not None and ctx.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert ctx.trace_state.get("vendor") == "1"
    assert extract({"traceparent": GOOD}) is not None  # confluent-kafka's dict form
    assert has_traceparent([("traceparent", None)]) and not has_traceparent(None)


def test_tracestate_is_injected_when_present():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    parent = extract([("traceparent", GOOD), ("tracestate", b"vendor=1")])
    from opentelemetry.trace import NonRecordingSpan, set_span_in_context

    span = provider.get_tracer("t").start_span("child", context=set_span_in_context(NonRecordingSpan(parent)))
    out = dict(inject(span, []))
    assert out["tracestate"] == b"vendor=1"
    assert out["traceparent"].startswith(b"00-0af7651916cd43dd8448eb211c80319c-")
