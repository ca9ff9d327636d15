"""The collector on the real cluster: statuses, lag in seconds, per-item errors."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from consumer import kafka_compat
from lag.collector import GroupLag, LagCollector, PassResult
from lag.rules import Status
from testbed.cluster import ClusterState
from tests.lag.lagkit import commit, end_offsets, make_topic

pytestmark = pytest.mark.cluster


def passes(collector: LagCollector, n: int, every_s: float, between=None) -> list[PassResult]:
    out = []
    for i in range(n):
        if between is not None:
            between(i)
        out.append(collector.run_pass())
        time.sleep(every_s)
    return out


def produce(
    producer: KafkaProducer, topic: str, n: int, partition: int = 0, ts_ms: int | None = None
) -> None:
    for _ in range(n):
        producer.send(topic, b"v", partition=partition, timestamp_ms=ts_ms)
    producer.flush()


def test_caught_up_idle_group_is_ok(admin, topic_name, producer, group_name, make_collector) -> None:
    make_topic(admin, topic_name, partitions=2)
    tps = [TopicPartition(topic_name, p) for p in range(2)]
    for tp in tps:
        produce(producer, topic_name, 20, tp.partition)
    commit(admin, group_name, end_offsets(admin, tps))
    results = passes(make_collector([group_name]), 6, 0.7)
    assert group_name in results[-1].groups, results[-1].errors
    g = results[-1].groups[group_name]
    # Idle topic, caught-up group with no member, for twice the window: OK, not STOP.
    assert g.verdict.status is Status.OK, g.verdict.reason
    assert (g.lag_max, g.lag_sum, g.lag_seconds_max) == (0, 0, 0.0)
    assert all(p.method == "caught_up" for p in g.partitions)
    assert results[-1].admin_calls <= 5


@pytest.mark.timing  # a group join and commits under deadlines on real brokers
def test_stopped_consumer_with_producers_going_on_is_stop(
    cluster3: ClusterState, admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name)
    stop_producing = threading.Event()

    def keep_producing() -> None:
        while not stop_producing.is_set():
            producer.send(topic_name, b"v", partition=0)
            time.sleep(0.02)

    t = threading.Thread(target=keep_producing, daemon=True)
    t.start()
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=cluster3.bootstrap,
        group_id=group_name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
    )
    # It joins as linkwatch's own group consumers do: kafka-python 3.0.12 loses a join that
    # finishes between two polls when a metadata change asked for it (the topic unknown to the
    # broker the first join's metadata came from): no assignment for the session's life, in
    # about 1 of 3 to 1 of 40 tries (consumer/kafka_compat.steady_group_join has the races).
    kafka_compat.steady_group_join(consumer, 2000)
    collector = make_collector([group_name])
    try:
        running: list[PassResult] = []
        deadline = time.monotonic() + 60  # the join alone can take seconds on a loaded machine
        while time.monotonic() < deadline and len(running) < 5:
            consumer.poll(timeout_ms=200)
            consumer.commit()
            r = collector.run_pass()
            if group_name in r.groups and r.groups[group_name].partitions:
                running.append(r)
        assert running, "the consumer never committed"
        assert running[-1].groups[group_name].members_active
        assert running[-1].groups[group_name].verdict.status is not Status.STOP
        consumer.close()
        stopped_at = time.monotonic()
        after: list[tuple[float, GroupLag]] = []
        pass_ts: list[float] = []  # the time each pass evaluated at
        # Until STOP, then two more passes (the machine may be slow: bounded by a deadline).
        while time.monotonic() - stopped_at < 40:
            r = collector.run_pass()
            after.append((time.monotonic(), r.groups[group_name]))
            pass_ts.append(r.ts_s)
            stops = [i for i, (_, g) in enumerate(after) if g.verdict.status is Status.STOP]
            if stops and len(after) - stops[0] >= 3:
                break
            time.sleep(0.5)
    finally:
        stop_producing.set()
        t.join()
    statuses = [g.verdict.status for _, g in after]
    assert Status.STOP in statuses, [g.verdict.reason for _, g in after]
    first_stop = statuses.index(Status.STOP)
    slowest_pass = max(b - a for (a, _), (b, _) in itertools.pairwise([(stopped_at, None), *after]))
    # STOP within the window (3 s) plus a pass or two, however slow the machine.
    assert after[first_stop][0] - stopped_at <= 3.0 + 2 * slowest_pass + 1.0
    assert all(s is Status.STOP for s in statuses[first_stop:])
    g = after[-1][1]
    assert g.partitions[0].lag_messages > 0
    assert "no member" in g.verdict.reason
    assert g.partitions[0].verdict.numbers["no_progress_s"] > 3.0
    # Lag in seconds grows with wall time while the group is stopped.
    (g0, g1), (t0, t1) = (after[first_stop][1], after[-1][1]), (pass_ts[first_stop], pass_ts[-1])
    assert g0.lag_seconds_max is not None and g1.lag_seconds_max is not None
    assert t1 - t0 > 0.5
    assert g1.lag_seconds_max - g0.lag_seconds_max == pytest.approx(t1 - t0, abs=1.0)


def test_consumer_slower_than_producer_is_warn(
    admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    # A long window: WARN needs min_evaluations inside it, however slow the machine is.
    collector = make_collector([group_name], window_s=120.0)
    committed = 0

    def tick(i: int) -> None:
        nonlocal committed
        produce(producer, topic_name, 20)
        committed += 10
        commit(admin, group_name, {tp: committed})

    results = passes(collector, 5, 0.3, tick)
    g = results[-1].groups[group_name]
    assert g.verdict.status is Status.WARN, g.verdict.reason
    assert "grew at every one" in g.verdict.reason
    n = g.partitions[0].verdict.numbers
    assert n["produce_rate"] > n["consume_rate"] > 0


def test_offsets_reset_backwards_is_rewind(admin, topic_name, producer, group_name, make_collector) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    produce(producer, topic_name, 200)
    collector = make_collector([group_name])
    commit(admin, group_name, {tp: 150})
    before = collector.run_pass().groups[group_name]
    assert before.verdict.status is Status.OK
    admin.reset_group_offsets(group_name, {tp: 20})
    after = collector.run_pass().groups[group_name]
    assert after.verdict.status is Status.REWIND, after.verdict.reason
    assert after.partitions[0].verdict.numbers == {"from_offset": 150, "committed": 20, "lag": 180}


def test_lag_seconds_within_one_second_of_produce_timestamps(
    admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name, partitions=3)
    now_ms = int(time.time() * 1000)
    # Record i of every partition was produced 100 - i seconds ago.
    for p in range(3):
        for i in range(100):
            producer.send(topic_name, b"v", partition=p, timestamp_ms=now_ms - (100 - i) * 1000)
    producer.flush()
    committed = {TopicPartition(topic_name, p): 10 + 30 * p for p in range(3)}
    commit(admin, group_name, committed)
    result = make_collector([group_name]).run_pass()
    for part in result.groups[group_name].partitions:
        truth = result.ts_s - (now_ms - (100 - part.committed) * 1000) / 1000
        assert part.method == "record_timestamp"
        assert part.lag_seconds == pytest.approx(truth, abs=1.0)
    assert result.groups[group_name].lag_seconds_max == pytest.approx(
        result.ts_s - now_ms / 1000 + 90, abs=1.0
    )


def test_unreadable_record_is_interpolated_from_history(
    admin: KafkaAdminClient, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    collector = make_collector([group_name])
    commit(admin, group_name, {tp: 0})
    # Build history: end offsets at known times.
    for _ in range(4):
        produce(producer, topic_name, 50)
        collector.run_pass()
        time.sleep(0.5)
    commit(admin, group_name, {tp: 120})
    # Retention removes the record at the committed offset (and everything before 150).
    admin.delete_records({tp: 150})
    part = collector.run_pass().groups[group_name].partitions[0]
    assert part.method == "interpolated"
    assert part.lag_seconds is not None and 0.3 < part.lag_seconds < 3.0


def test_per_item_errors_do_not_stop_the_pass(
    admin: KafkaAdminClient, topic_name, producer, group_name, make_collector
) -> None:
    gone = make_topic(admin, topic_name + "-gone")
    kept = make_topic(admin, topic_name)
    produce(producer, kept, 10)
    produce(producer, gone, 10)
    other = group_name + "-ok"
    commit(admin, group_name, {TopicPartition(gone, 0): 5})
    commit(admin, other, {TopicPartition(kept, 0): 10})
    vanished = group_name + "-vanished"
    commit(admin, vanished, {TopicPartition(kept, 0): 3})
    collector = make_collector([group_name, other, vanished])
    assert collector.run_pass().groups[vanished].verdict.status is Status.OK
    admin.delete_topics([gone])
    admin.delete_groups([vanished])
    time.sleep(1.0)
    result = collector.run_pass()
    bad = result.groups[group_name]
    assert bad.verdict.status is Status.ERR
    # Either the offsets are still listed (partition ERR) or Kafka already dropped them.
    reasons = [p.verdict.reason for p in bad.partitions] or [bad.verdict.reason]
    assert gone in reasons[0], reasons
    assert "does not exist" in reasons[0] or "disappeared" in reasons[0]
    assert result.groups[other].verdict.status is Status.OK
    assert vanished not in result.groups
    assert result.errors == []


def test_negative_lag_is_clamped_and_counted(admin, topic_name, producer, group_name, make_collector) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    produce(producer, topic_name, 10)
    commit(admin, group_name, {tp: 25})  # beyond the end (e.g. end offsets read before the commit)
    collector = make_collector([group_name])
    result = collector.run_pass()
    part = result.groups[group_name].partitions[0]
    assert (part.lag_messages, result.clamped, collector.clamped_total) == (0, 1, 1)
