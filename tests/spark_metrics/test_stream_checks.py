"""The stream's record checks (:func:`spark_metrics.streaming.classify`): one table of what can
arrive on the samples topic, each row with the reason it is dropped for (or none), compared
whole-frame. The event-time bound is relative to the query's processing time, so the rows
carry times relative to now."""

from __future__ import annotations

import time

import orjson
from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from linkwatch import records as R
from spark_metrics.streaming import DROP_REASONS, EventTimeBounds, classify, envelope

BOUNDS = EventTimeBounds(max_age_ms=3_600_000, max_lead_ms=30_000)
MAX_BYTES = 4096


def _record(at_ms: int, **over: object) -> bytes:
    # ``over`` may replace or (with ...) remove any field, ``ts_ms`` too
    body = {"v": 1, "kind": "stage_sketch", "key": f"k-{at_ms}", "ts_ms": at_ms, "cluster": "c"}
    body.update(over)
    return orjson.dumps({k: v for k, v in body.items() if v is not ...})


def _cases(now: int) -> list[tuple[str, bytes | None, str | None]]:
    """(name, Kafka value, drop reason)."""
    return [
        ("valid", _record(now - 5_000), None),
        ("valid, an hour minus a minute old", _record(now - 3_540_000), None),
        ("valid, 10 s ahead (clock skew within the lead)", _record(now + 10_000), None),
        ("tombstone", None, "tombstone"),
        ("empty", b"", "empty"),
        ("only whitespace", b"  \n", "empty"),
        ("tabs and a carriage return", b"\t\r\n", "empty"),
        ("oversize", _record(now, pad="x" * MAX_BYTES), "oversize"),
        ("garbage bytes", b"\x00\xff\xfe garbage", "not_json"),
        ("truncated object", _record(now)[:-5], "not_json"),
        ("JSON array", b"[1, 2, 3]", "not_object"),
        ("JSON array of records", b"[" + _record(now) + b"]", "not_object"),
        ("JSON null", b"null", "not_object"),
        ("JSON null among whitespace", b" null\n", "not_object"),
        ("JSON string", b'"stage_sketch"', "not_object"),
        ("JSON number", b"17", "not_object"),
        ("no version", _record(now, v=...), "bad_version"),
        ("version 0", _record(now, v=0), "bad_version"),
        ("version not a number", _record(now, v="one"), "bad_version"),
        (
            "version too large for a long",
            _record(now, v=1).replace(b'"v":1', b'"v":' + b"9" * 30),
            "bad_version",
        ),
        ("future version", _record(now, v=R.SCHEMA_VERSION + 1), "future_version"),
        ("unknown kind", _record(now, kind="telepathy"), "unknown_kind"),
        ("no kind", _record(now, kind=...), "unknown_kind"),
        ("no key", _record(now, key=...), "missing_field"),
        ("no ts_ms", _record(now, ts_ms=...), "missing_field"),
        ("ts_ms a fraction", _record(now, ts_ms=now + 0.5), "bad_type"),
        ("ts_ms a word", _record(now, ts_ms="yesterday"), "bad_type"),
        (
            "ts_ms beyond a long",
            _record(now).replace(b'"ts_ms":%d' % now, b'"ts_ms":' + b"9" * 25),
            "bad_type",
        ),
        ("1970", _record(0), "too_old"),
        ("two hours old", _record(now - 7_200_000), "too_old"),
        ("2099", _record(4_070_908_800_000), "too_new"),
        ("before 1970", _record(-5), "too_old"),
        ("ten minutes ahead", _record(now + 600_000), "too_new"),
    ]


def test_every_discarded_record_has_its_reason(spark) -> None:
    now = int(time.time() * 1000)
    cases = _cases(now)
    raw = spark.createDataFrame([(name, value) for name, value, _ in cases], "name string, value binary")
    got = classify(raw.select("value", "name"), BOUNDS, MAX_BYTES)
    # classify keeps only its own columns: the row order is the input's (no shuffle).
    names = [name for name, _, _ in cases]
    rows = got.select("drop_reason").collect()
    assert len(rows) == len(cases)
    want = spark.createDataFrame([(n, r) for n, _, r in cases], "name string, drop_reason string")
    have = spark.createDataFrame(
        [(n, row["drop_reason"]) for n, row in zip(names, rows, strict=True)],
        "name string, drop_reason string",
    )
    assertDataFrameEqual(have, want)
    assert {r for _, _, r in cases if r} == set(DROP_REASONS), "a reason without a row in the table"


def test_kept_records_carry_their_envelope(spark) -> None:
    """Without bounds (batch reads) any time from 1970 to the year 9999 is kept; a later one
    (which Spark's timestamps cannot hold) is not, and fails nothing."""
    ts = 1_700_000_000_123
    raw = spark.createDataFrame(
        [
            (_record(ts),),
            (b"[]",),
            (_record(4_070_908_800_000).replace(b"k-", b"f-"),),
            (_record(9 * 10**18),),
        ],
        "value binary",
    )
    got = envelope(raw).select("kind", "key", "ts_ms", "hour")
    future = 4_070_908_800_000
    assertDataFrameEqual(
        got,
        [
            Row(kind="stage_sketch", key=f"k-{ts}", ts_ms=ts, hour=ts // 3_600_000),
            Row(kind="stage_sketch", key=f"f-{future}", ts_ms=future, hour=future // 3_600_000),
        ],
    )
