"""The driver's window feed (``analyzer/window_feed.py``): its record checks against the archive
query's (the same table as ``tests/spark_metrics/test_stream_checks.py``), and the feed itself
on the real 3-broker cluster."""

from __future__ import annotations

import threading
import time
from collections import Counter

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.window_state import KINDS as STATE_KINDS
from analyzer.window_feed import WindowFeed, admitted
from linkwatch import records as R
from testbed.load import ensure_topic
from tests.aggregation.window_records import stage
from tests.core.test_reach import closed_port
from tests.spark_metrics.test_stream_checks import BOUNDS, MAX_BYTES, _cases

KINDS = frozenset(STATE_KINDS)


def _admit(values: list[bytes | None], now_ms: int, dropped: Counter) -> list[R.Record]:
    return admitted(values, now_ms, BOUNDS.max_age_ms, BOUNDS.max_lead_ms, MAX_BYTES, dropped, KINDS)


def test_what_the_archive_query_drops_never_reaches_the_state() -> None:
    """Every row of the archive query's table: a row it drops is skipped here, uncounted (the
    archive counts it once); a row it keeps reaches the state, which merges it or counts why
    not (these rows carry an envelope only, so the schema refuses their body)."""
    now = int(time.time() * 1000)
    for name, value, reason in _cases(now):
        dropped: Counter = Counter()
        kept = _admit([value], now, dropped)
        reached = len(kept) + sum(dropped.values())
        assert reached == (0 if reason else 1), f"{name}: the archive's reason {reason}, the feed's {dropped}"


def test_valid_records_are_kept_a_refused_body_is_counted_and_other_kinds_skipped() -> None:
    now = int(time.time() * 1000)
    good = stage(1, now - 1_000, [1.0, 2.0])
    bad_value = orjson.loads(stage(2, now - 1_000, [1.0]).to_json()) | {"capture_ratio": 7.0}
    bad_type = orjson.loads(stage(3, now - 1_000, [1.0]).to_json()) | {"broker": "three"}
    finding = R.Finding(
        cluster="c1",
        source="analyzer",
        ts_ms=now,
        rule="slow_broker",
        subject="broker:1",
        severity="warning",
        summary="s",
        evidence={},
        action="none",
    )
    dropped: Counter = Counter()
    kept = _admit(
        [good.to_json(), orjson.dumps(bad_value), orjson.dumps(bad_type), finding.to_json()], now, dropped
    )
    assert kept == [good]
    assert dropped == Counter({"bad_value": 1, "bad_type": 1})


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=64), st.text(max_size=64).map(str.encode)), max_size=20)
)
def test_no_value_raises(values: list[bytes | None]) -> None:
    _admit(values, int(time.time() * 1000), Counter())


# --- on the real cluster ---------------------------------------------------------------------


def _produce(bootstrap: str, topic: str, recs: list[R.Record], partition: int | None = None) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for r in recs:
            producer.send(topic, key=r.dedup_key().encode(), value=r.to_json(), partition=partition)
        producer.flush(30)
    finally:
        producer.close(10)


def _feed(bootstrap: str, topic: str, since_ms: int, on_records, **kw) -> WindowFeed:
    return WindowFeed(
        bootstrap,
        topic,
        on_records,
        since_ms,
        STATE_KINDS,
        Counter(),
        max_age_ms=BOUNDS.max_age_ms,
        max_lead_ms=BOUNDS.max_lead_ms,
        max_record_bytes=MAX_BYTES,
        **kw,
    ).start()


def _until(what: str, check, within_s: float = 60.0) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, f"not within {within_s:.0f}s: {what}"
        time.sleep(0.2)


@pytest.mark.cluster
def test_the_feed_starts_at_its_horizon_and_reads_partitions_added_later(cluster3, admin, topic_name) -> None:
    from kafka.admin import NewPartitions

    import analyzer.window_feed as wf

    ensure_topic(admin, topic_name, 2, 1)
    now = int(time.time() * 1000)
    old = [stage(b, now - 5_000, [1.0]) for b in (1, 2)]
    _produce(cluster3.bootstrap, topic_name, old)
    time.sleep(0.05)
    horizon = int(time.time() * 1000)
    new = [stage(b, now, [2.0]) for b in (1, 2, 3)]
    _produce(cluster3.bootstrap, topic_name, new)
    got: list[R.Record] = []
    lock = threading.Lock()

    def take(recs: list[R.Record]) -> None:
        with lock:
            got.extend(recs)

    refresh = wf.METADATA_REFRESH_S
    wf.METADATA_REFRESH_S = 1.0  # see the added partition within a second, not 30
    feed = _feed(cluster3.bootstrap, topic_name, horizon, take)
    try:
        _until("the records after the horizon", lambda: len(got) >= len(new))
        assert sorted(r.dedup_key() for r in got) == sorted(r.dedup_key() for r in new), (
            "read before its horizon"
        )
        admin.create_partitions({topic_name: NewPartitions(total_count=3)})
        added = stage(4, now + 1, [3.0])
        _until("partition 2 known to a producer", lambda: _sent_to(cluster3.bootstrap, topic_name, added, 2))
        _until("the added partition's record", lambda: added.dedup_key() in {r.dedup_key() for r in got})
        assert feed.isActive and feed.exception() is None
        assert feed.recentProgress and all(p["name"] == wf.FEED_NAME for p in feed.recentProgress)
    finally:
        wf.METADATA_REFRESH_S = refresh
        feed.stop()
    assert not feed.isActive


@pytest.mark.cluster
def test_caught_up_only_once_every_partition_is_read_to_where_it_started(cluster3, admin, topic_name) -> None:
    """What the service waits for before judging the state: at the moment the feed says it is
    caught up, every record the topic held at its start is in the state, whichever partition it
    is in, however many polls it took (a poll brings some partitions' records, not others')."""
    ensure_topic(admin, topic_name, 3, 1)
    now = int(time.time() * 1000)
    before = [stage(b, now - 1_000 + i, [float(i)]) for i in range(200) for b in (1, 2, 3)]
    for p in range(3):
        _produce(cluster3.bootstrap, topic_name, before[p::3], partition=p)
    got: list[str] = []
    at_catch_up: list[set[str]] = []
    lock = threading.Lock()

    def take(recs: list[R.Record]) -> None:
        with lock:
            got.extend(r.dedup_key() for r in recs)

    def caught() -> None:
        with lock:
            at_catch_up.append(set(got))

    feed = _feed(cluster3.bootstrap, topic_name, now - 60_000, take, max_records=40, on_caught_up=caught)
    try:
        _until("caught up", feed.caught_up.is_set)
        assert len(at_catch_up) == 1
        assert at_catch_up[0] == {r.dedup_key() for r in before}
        assert len(feed.recentProgress) >= len(before) // 40, "read in one poll: the test shows nothing"
        assert feed.behind == []
        later = stage(4, now, [9.0])
        _produce(cluster3.bootstrap, topic_name, [later])
        _until("a record after the start", lambda: later.dedup_key() in got)
        assert len(at_catch_up) == 1, "said twice"
    finally:
        feed.stop()


@pytest.mark.cluster
def test_an_empty_topic_is_caught_up_at_once(cluster3, admin, topic_name) -> None:
    ensure_topic(admin, topic_name, 2, 1)
    feed = _feed(cluster3.bootstrap, topic_name, int(time.time() * 1000) - 60_000, lambda _recs: None)
    try:
        _until("caught up", feed.caught_up.is_set, 30.0)
    finally:
        feed.stop()


def _sent_to(bootstrap: str, topic: str, rec: R.Record, partition: int) -> bool:
    """Produce ``rec`` to ``partition``; False while the producer's metadata lacks it."""
    from kafka.errors import KafkaError

    try:
        _produce(bootstrap, topic, [rec], partition=partition)
    except (AssertionError, KafkaError):  # kafka-python: "Unrecognized partition"
        return False
    return True


@pytest.mark.cluster
def test_a_failing_consumer_of_the_records_ends_the_feed_and_says_why(cluster3, admin, topic_name) -> None:
    ensure_topic(admin, topic_name, 1, 1)
    now = int(time.time() * 1000)

    def fail(_recs: list[R.Record]) -> None:
        raise RuntimeError("the state refused")

    feed = _feed(cluster3.bootstrap, topic_name, now - 60_000, fail)
    try:
        _produce(cluster3.bootstrap, topic_name, [stage(1, now, [1.0])])
        _until("the feed ended", lambda: not feed.isActive)
        assert isinstance(feed.exception(), RuntimeError)
    finally:
        feed.stop()


def test_an_unreachable_cluster_is_one_warning_and_the_feed_waits_for_it(caplog) -> None:
    """No broker at the address: the feed keeps trying (the Spark queries do too) instead of
    ending, which would have the service rebuild the state from the archive at every tick."""
    import logging

    caplog.set_level(logging.WARNING, logger="analyzer.window_feed")
    port = closed_port()
    feed = _feed(f"127.0.0.1:{port}", "linkwatch.samples", 0, lambda _recs: None)
    said = lambda: [r.getMessage() for r in caplog.records if f"127.0.0.1:{port}" in r.getMessage()]  # noqa: E731
    try:
        _until("the warning", said, 30.0)
        time.sleep(1.0)
        assert feed.isActive and feed.exception() is None
    finally:
        started = time.monotonic()
        feed.stop()
    assert not feed.isActive and time.monotonic() - started < 10.0
    assert len(said()) == 1, said()
