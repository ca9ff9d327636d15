"""A stream no producer can stop, on the real 3-broker cluster with real Spark.

The running analyzer (both queries: the archive and the window state) reads a samples topic
that carries, between valid records, the poison set: garbage bytes, an empty value, a
tombstone, a JSON array and a JSON null, wrong versions, an unknown kind, a record without a
key, a non-integer time, a record of 1970, one of 2099 and one of 5 MB. Every valid record
sent after the poison must reach the archive and be judged (the detectors see its windows and
find what they hold), and every poison record must be counted by its reason. Before the
event-time bound, the 2099 record moved the archive query's watermark to 2099 and every later
record was dropped as late, for ever (the checkpoint keeps the watermark).
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest

from analyzer.base import InMemorySink
from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from linkwatch import records as R
from linkwatch.kafka_client import KafkaClientConfig
from spark_metrics.streaming import DROP_REASONS
from testbed.load import ensure_topic
from tests.aggregation.window_records import CLUSTER, WINDOW_S, logdir, stage

pytestmark = [pytest.mark.cluster, pytest.mark.timing]

WMS = WINDOW_S * 1000
BIG = 5 << 20
WITHIN_S = 300.0  # generous: the first micro-batches carry Spark's start on a loaded 2-core machine
Y2099_MS = 4_070_908_800_000


def _valid(windows: list[int], hot_disk: bool) -> list[R.Record]:
    """Stage sketches of brokers 1-3 per window; with ``hot_disk``, log-dir readings in which
    broker 3's /d1 is 95 % full against 20 % elsewhere (a finding only these records can raise)."""
    out: list[R.Record] = []
    for w in windows:
        out += [stage(b, w + b, [float(b)] * (10 * b)) for b in (1, 2, 3)]
        if hot_disk:
            out += [logdir(b, "/d1", w + 10 + b, 1000, 950 if b == 3 else 200, 0.1) for b in (1, 2, 3)]
    return out


def _poison(now_ms: int) -> list[tuple[bytes | None, str]]:
    """(Kafka value, the reason it must be counted under); the 2099 record goes first."""

    def rec(at_ms: int, **over: object) -> bytes:  # ``over`` may replace ts_ms too
        body = stage(1, at_ms, [1.0]).to_dict() | over
        return orjson.dumps({k: v for k, v in body.items() if v is not ...})

    return [
        (rec(Y2099_MS), "too_new"),
        (rec(0), "too_old"),
        (b"\x00\xff\xfe not a record", "not_json"),
        (b"", "empty"),
        (None, "tombstone"),
        (b"[1, 2, 3]", "not_object"),
        (b"null", "not_object"),
        (rec(now_ms, v=R.SCHEMA_VERSION + 1), "future_version"),
        (rec(now_ms, v=0), "bad_version"),
        (rec(now_ms, kind="telepathy"), "unknown_kind"),
        (rec(now_ms, key=...), "missing_field"),
        (rec(now_ms, ts_ms="soon"), "bad_type"),
        (rec(now_ms, padding="x" * BIG), "oversize"),
    ]


def _send(producer, topic: str, items: list[tuple[bytes | None, bytes]]) -> None:
    for key, value in items:
        producer.send(topic, key=key, value=value)
    producer.flush(60)


def _until(what: str, check, within_s: float = WITHIN_S) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"not within {within_s:.0f}s: {what}"
        time.sleep(1.0)


def _archived_keys(service: AnalysisService) -> set[str]:
    if not any(service.archive_dir.glob("kind=*/hour=*/*.parquet")):
        return set()
    return {r["key"] for r in service.spark.read.parquet(str(service.archive_dir)).select("key").collect()}


@pytest.mark.timeout(900)
def test_valid_records_after_the_poison_set_are_archived_judged_and_the_poison_counted(
    cluster3, admin, topic_name: str, tmp_path: Path
) -> None:
    from kafka import KafkaProducer

    ensure_topic(admin, topic_name, 3, 1, configs={"max.message.bytes": str(8 << 20)})
    cfg = AnalyzerConfig(
        cluster=CLUSTER,
        kafka=KafkaClientConfig(bootstrap_servers=cluster3.bootstrap),
        samples_topic=topic_name,
        window_s=WINDOW_S,
        lookback_windows=150,  # the records' windows stay in the lookback however slow the start
        interval_s=1.0,
        trigger_s=1.0,
        watermark="60 seconds",
        state_dir=tmp_path / "analyzer",
        publish_findings=False,
        detectors={"disk_imbalance": {"min_used_bytes": 0, "recent_windows": 3, "min_windows": 2}},
        metrics=AnalyzerMetricsConfig(enabled=False),
    )
    service = AnalysisService(cfg, sinks=[InMemorySink()]).start()
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all", max_request_size=8 << 20)
    try:
        now = int(time.time() * 1000)
        w0 = now - now % WMS
        before = _valid([w0 - 3 * WMS, w0 - 2 * WMS], hot_disk=False)
        _send(producer, topic_name, [(r.dedup_key().encode(), r.to_json()) for r in before])
        poison = _poison(now)
        _send(producer, topic_name, [(b"poison-%d" % i, value) for i, (value, _) in enumerate(poison)])
        want = dict.fromkeys((*DROP_REASONS, "late"), 0)
        for _, reason in poison:
            want[reason] += 1
        # The poison is behind the archive query (the 2099 record in an earlier micro-batch than
        # anything sent next, so it had its chance to move the watermark) before more is sent.
        _until("the poison counted", lambda: service.stream_drops.counts() == want, WITHIN_S)

        now = int(time.time() * 1000)
        # Windows after the earlier ones (the same window twice would be a re-send, dropped by
        # key): the newest may still be open, a few seconds ahead of the clock.
        w1 = max(now - now % WMS - 2 * WMS, w0 - WMS)
        after = _valid([w1, w1 + WMS, w1 + 2 * WMS], hot_disk=True)
        _send(producer, topic_name, [(r.dedup_key().encode(), r.to_json()) for r in after])
        valid_keys = {r.dedup_key() for r in before + after}
        _until("every valid record archived", lambda: _archived_keys(service) >= valid_keys)
        assert _archived_keys(service) == valid_keys, "a poison record reached the archive"

        hot = ("hot_disk", "log_dir:3:/d1")
        _until("the hot disk of the records after the poison judged", lambda: hot in _judged(service))
        data = service.last
        got = {(r.broker, r.window_start_ms): r.count for r in data.broker_stages}
        sent = {
            (r.broker, r.ts_ms - r.ts_ms % WMS): r.sketch["count"]
            for r in before + after
            if r.KIND == "stage_sketch"
        }
        assert got == sent, "the evaluation did not hold exactly the valid windows"
        assert max(service.state.window_starts) <= int(time.time() * 1000), "a future window is held"
        assert service.stream_drops.counts() == want, "a record was counted twice, or a valid one dropped"
        assert not service.state.dropped, f"the window state dropped records: {dict(service.state.dropped)}"
    finally:
        producer.close(10)
        service.stop()


def _judged(service: AnalysisService) -> set[tuple[str, str]]:
    service.tick()
    return set(service.engine.tracker.active)
