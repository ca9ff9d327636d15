"""The record schema round-trips every kind and rejects malformed input with a drop reason."""

from __future__ import annotations

import pytest

from linkwatch import records
from linkwatch.records import RecordError, StageSketch, decode
from linkwatch.sketch import LatencySketch

ENVELOPE = {"cluster": "c1", "source": "broker-1", "ts_ms": 1_700_000_000_000}


def _sketch() -> dict:
    s = LatencySketch()
    for v in (0.0, 1.5, 3.0, 250.0):
        s.add(v)
    return s.to_dict()


EXAMPLES = [
    StageSketch(**ENVELOPE, broker=1, request="Produce", stage="total", window_s=10, sketch=_sketch()),
    records.SlowRequest(
        **ENVELOPE,
        broker=1,
        request="Produce",
        client_id="c",
        correlation_id=7,
        connection="a-b-0-1",
        stages_ms={"total": 512.0},
        partitions=[{"topic": "t", "partition": 0, "bytes": 10}],
    ),
    records.BrokerGauges(**ENVELOPE, broker=2, window_s=10, values={"RequestHandlerAvgIdlePercent": 0.7}),
    records.LogDirUsage(
        **ENVELOPE, broker=1, log_dir="/d", capacity_bytes=10, used_bytes=5, partition_bytes=4, partitions=3
    ),
    records.PartitionSize(
        **ENVELOPE,
        broker=1,
        log_dir="/d",
        topic="t",
        partition=0,
        size_bytes=9,
        segments=1,
        oldest_segment_ms=1,
        newest_segment_ms=2,
    ),
    records.HostStats(
        **ENVELOPE,
        broker=1,
        window_s=10,
        cpu_percent=5.0,
        page_cache_bytes=1,
        disk_write_bytes_per_s=2.0,
        disk_read_bytes_per_s=0.0,
        net_rx_bytes_per_s=1.0,
        net_tx_bytes_per_s=1.0,
    ),
    records.ConsumerLag(
        **ENVELOPE,
        group="g",
        topic="t",
        partition=0,
        committed_offset=5,
        end_offset=9,
        lag_messages=4,
        lag_seconds=1.5,
        lag_seconds_method="record_timestamp",
        status="OK",
        reason="caught up recently",
    ),
    records.ClientFetch(
        **ENVELOPE,
        client_id="c",
        group="g",
        broker=1,
        window_s=10,
        wait_fetch=_sketch(),
        fetch_latency=_sketch(),
        end_to_end=_sketch(),
        buffer_bytes=100,
    ),
    records.ProbeSample(
        **ENVELOPE,
        broker=2,
        topic="linkwatch.probe",
        window_s=10,
        deadline_ms=5000,
        sent=10,
        acked=9,
        ok=8,
        unavailable={"deadline": 2},
        produce=_sketch(),
        end_to_end=_sketch(),
    ),
    records.Finding(
        **ENVELOPE,
        rule="slow_broker",
        subject="broker:2",
        severity="warning",
        summary="s",
        evidence={"p99_ms": 512},
        action="demote leadership",
    ),
]


def test_every_kind_has_an_example() -> None:
    assert {type(r).KIND for r in EXAMPLES} == set(records.KINDS)


@pytest.mark.parametrize("record", EXAMPLES, ids=lambda r: r.KIND)
def test_round_trip(record: records.Record) -> None:
    raw = record.to_json()
    assert decode(raw) == record
    assert decode(raw).dedup_key() == record.dedup_key()


def test_same_fact_same_key_different_window_different_key() -> None:
    a = EXAMPLES[0]
    b = StageSketch(
        **{**ENVELOPE, "ts_ms": ENVELOPE["ts_ms"] + 10_000},
        broker=1,
        request="Produce",
        stage="total",
        window_s=10,
        sketch=_sketch(),
    )
    assert a.dedup_key() == decode(a.to_json()).dedup_key() != b.dedup_key()


def test_unknown_fields_from_a_newer_writer_are_ignored() -> None:
    obj = EXAMPLES[2].to_dict() | {"added_later": 1}
    assert records.from_dict(obj) == EXAMPLES[2]


def test_int_where_float_expected_is_accepted() -> None:
    obj = EXAMPLES[5].to_dict() | {"cpu_percent": 5}
    assert records.from_dict(obj).cpu_percent == 5.0


MALFORMED = [
    (b"", "not_json"),
    (b"\xff\xfe garbage", "not_json"),
    (b'{"v":1,"kind":"host"', "not_json"),
    (b"[1,2]", "not_object"),
    (b'"text"', "not_object"),
    (b'{"kind":"host"}', "bad_version"),
    (b'{"v":"1","kind":"host"}', "bad_version"),
    (b'{"v":true,"kind":"host"}', "bad_version"),
    (b'{"v":99,"kind":"host"}', "future_version"),
    (b'{"v":1}', "unknown_kind"),
    (b'{"v":1,"kind":"mystery"}', "unknown_kind"),
    (b'{"v":1,"kind":"host","cluster":"c","source":"s","ts_ms":1}', "missing_field"),
    (
        StageSketch(**ENVELOPE, broker=1, request="Produce", stage="total", window_s=10, sketch={})
        .to_json()
        .replace(b'"broker":1', b'"broker":"1"'),
        "bad_type",
    ),
    (
        StageSketch(**ENVELOPE, broker=1, request="Produce", stage="total", window_s=10, sketch={})
        .to_json()
        .replace(b'"broker":1', b'"broker":true'),
        "bad_type",
    ),
    (EXAMPLES[6].to_json().replace(b'"lag_seconds":1.5', b'"lag_seconds":"slow"'), "bad_type"),
    # The share of requests logged under sampled capture lies in (0, 1].
    *(
        (
            StageSketch(**ENVELOPE, broker=1, request="Produce", stage="total", window_s=10, sketch={})
            .to_json()
            .replace(b'"capture_ratio":1.0', b'"capture_ratio":' + bad),
            reason,
        )
        for bad, reason in [
            (b"0", "bad_value"),
            (b"1.5", "bad_value"),
            (b"-0.25", "bad_value"),
            (b'"x"', "bad_type"),
        ]
    ),
    (
        EXAMPLES[2]
        .to_json()
        .replace(b'"RequestHandlerAvgIdlePercent":0.7', b'"RequestHandlerAvgIdlePercent":"x"'),
        "bad_type",
    ),
]


@pytest.mark.parametrize(("raw", "reason"), MALFORMED)
def test_malformed_records_are_rejected_with_a_reason(raw: bytes, reason: str) -> None:
    with pytest.raises(RecordError) as info:
        decode(raw)
    assert info.value.reason == reason


def test_a_sampled_sketch_keeps_its_capture_ratio() -> None:
    rec = StageSketch(
        **ENVELOPE, broker=1, request="Produce", stage="total", window_s=10, sketch={}, capture_ratio=1 / 6
    )
    assert decode(rec.to_json()) == rec
    # An older writer leaves the field out: a full capture.
    legacy = rec.to_json().replace(b',"capture_ratio":0.16666666666666666', b"")
    assert legacy != rec.to_json() and decode(legacy).capture_ratio == 1.0
