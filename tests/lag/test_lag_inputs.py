"""Inputs the collector once misread, each on the real cluster (issue 18, items 13-17):
transaction markers, records deleted past the committed offset, partitions without a commit,
a live group that has not committed yet, and a rewind the consumer has since passed."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from consumer import kafka_compat
from lag.collector import CollectorConfig, LagCollector, PassResult
from lag.rules import Status
from lag.runner import format_statuses
from lag.timestamps import TimestampReader
from testbed.cluster import ClusterState
from tests.lag.lagkit import commit, end_offsets, make_topic

pytestmark = pytest.mark.cluster
WINDOW_S = 3.0  # make_collector's window


def past_the_window(collector: LagCollector) -> list[PassResult]:
    """A pass now and one after the window has passed (STOP/STALL could only show then)."""
    first = collector.run_pass()
    time.sleep(WINDOW_S + 0.5)
    return [first, collector.run_pass()]


def transactions(bootstrap: str, topic: str, sizes: list[int], commit_last: bool = True) -> None:
    """Each size is one transaction (its commit marker takes one offset after its records)."""
    txn = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"lw-{uuid.uuid4().hex[:8]}")
    txn.init_transactions()
    for i, n in enumerate(sizes):
        txn.begin_transaction()
        for _ in range(n):
            txn.send(topic, b"v", partition=0)
        txn.flush()
        if commit_last or i < len(sizes) - 1:
            txn.commit_transaction()
        else:
            txn.abort_transaction()
    txn.close()


def test_exactly_once_commit_before_the_last_marker_is_caught_up(
    cluster3: ClusterState, admin, topic_name, group_name
) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    transactions(cluster3.bootstrap, topic_name, [10, 5])  # records 0-9, marker 10, 11-15, marker 16
    # The coordinator writes the markers after the commit returns: wait for the last one.
    deadline = time.monotonic() + 30
    while end_offsets(admin, [tp])[tp] < 17 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert end_offsets(admin, [tp])[tp] == 17
    # What an exactly-once application commits (sendOffsetsToTransaction): the offset after
    # the last record it processed, which is the commit marker's offset.
    eos, mid = group_name, group_name + "-mid"
    commit(admin, eos, {tp: 16})
    commit(admin, mid, {tp: 8})  # two records and two markers ahead: really behind
    # A long read timeout: waiting it out on the marker (as a read that finds no record used
    # to) would show in the pass time.
    reader = TimestampReader(cluster3.bootstrap, timeout_s=10.0)
    config = CollectorConfig(include=[f"^{eos}$", f"^{mid}$"], window_s=WINDOW_S, min_evaluations=3)
    collector = LagCollector(admin, reader, config)
    try:
        results = past_the_window(collector)
        reads = reader.reads
        again = collector.run_pass()
    finally:
        reader.close()
    print(f"marker check: pass {results[0].duration_s:.2f}s, then {again.duration_s:.2f}s; {reads} reads")
    assert results[0].duration_s < 5.0
    for r in results:
        g = r.groups[eos]
        assert g.verdict.status is Status.OK, g.verdict.reason
        assert (g.partitions[0].lag_messages, g.partitions[0].method) == (0, "caught_up")
        assert "caught up" in g.partitions[0].verdict.reason
    behind = results[-1].groups[mid].partitions[0]
    assert behind.lag_messages > 0 and behind.verdict.status is Status.STOP, behind.verdict.reason
    # Bounded cost: the marker is read once (first pass); later passes answer from the cache.
    assert reads == 2 and reader.reads == 2 and again.groups[eos].verdict.status is Status.OK


def test_records_deleted_past_the_committed_offset_are_err_with_the_count(
    admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    for _ in range(100):
        producer.send(topic_name, b"v", partition=0)
    producer.flush()
    behind, ahead = group_name, group_name + "-ahead"
    commit(admin, behind, {tp: 20})
    commit(admin, ahead, {tp: 70})
    admin.delete_records({tp: 60})
    collector = make_collector([behind, ahead])
    for r in past_the_window(collector):
        p = r.groups[behind].partitions[0]
        assert p.verdict.status is Status.ERR, p.verdict.reason
        assert "below the log start 60" in p.verdict.reason
        assert "40 messages were deleted unread" in p.verdict.reason
        assert p.lag_messages == 40  # only what still exists: 60..99
        assert p.verdict.numbers["deleted_unread"] == 40
        assert r.groups[behind].verdict.status is Status.ERR
    # Committed above the log start: an ordinary stopped group, lag counted from the commit.
    # Unless its coordinator did not answer ListGroups in that pass (a loaded full run): the
    # state is then "Unknown", read as having members, and only STALL may be said, never STOP.
    g = r.groups[ahead]
    p = g.partitions[0]
    expected = Status.STALL if g.state == "Unknown" else Status.STOP
    assert (p.verdict.status, p.lag_messages) == (expected, 30), (g.state, p.verdict.reason)


def test_partitions_without_a_commit_are_reported(
    admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name, partitions=4)
    tps = [TopicPartition(topic_name, p) for p in range(4)]
    for p in range(3):  # partition 3 stays empty
        for _ in range(10):
            producer.send(topic_name, b"v", partition=p)
    producer.flush()
    commit(admin, group_name, {tps[0]: 10, tps[1]: 10})
    first, last = past_the_window(make_collector([group_name]))
    g = first.groups[group_name]
    by_p = {p.partition: p for p in g.partitions}
    assert sorted(by_p) == [0, 1, 2, 3], [p.name for p in g.partitions]
    assert (by_p[2].committed, by_p[2].lag_messages) == (-1, 10)
    assert by_p[2].verdict.status is Status.OK and "no committed offset" in by_p[2].verdict.reason
    assert "2 without a committed offset" in g.verdict.reason
    by_p = {p.partition: p for p in last.groups[group_name].partitions}
    assert by_p[2].verdict.status is Status.STOP, by_p[2].verdict.reason
    assert "no committed offset" in by_p[2].verdict.reason and "10 messages" in by_p[2].verdict.reason
    assert by_p[3].verdict.status is Status.OK and "no message" in by_p[3].verdict.reason
    assert (by_p[0].verdict.status, by_p[1].verdict.status) == (Status.OK, Status.OK)
    assert last.groups[group_name].verdict.status is Status.STOP
    assert last.groups[group_name].lag_sum == 10


@pytest.mark.timing  # a group join under a deadline on real brokers (a clean-clone run missed it once)
def test_live_group_that_has_not_committed_yet_is_not_an_error(
    cluster3: ClusterState, admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name)
    producer.send(topic_name, b"v", partition=0)
    producer.flush()
    consumer = KafkaConsumer(
        topic_name,
        bootstrap_servers=cluster3.bootstrap,
        group_id=group_name,
        enable_auto_commit=False,
        session_timeout_ms=6000,
    )
    # It joins as linkwatch's own group consumers do: kafka-python 3.0.12 loses a join that
    # finishes between two polls when a metadata change asked for it (the topic unknown to the
    # broker the first join's metadata came from): no assignment for the session's life, in
    # about 1 of 3 to 1 of 40 tries (consumer/kafka_compat.steady_group_join has the races).
    kafka_compat.steady_group_join(consumer, 2000)
    try:
        deadline = time.monotonic() + 45
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(timeout_ms=200)
        # What the group and the consumer's metadata said, so a miss names where the join stopped.
        assert consumer.assignment(), (
            f"the consumer never joined: group {admin.describe_groups([group_name])}, "
            f"partitions known to the consumer {consumer.partitions_for_topic(topic_name)}"
        )
        result = make_collector([group_name]).run_pass()
    finally:
        consumer.close(autocommit=False)
    g = result.groups[group_name]
    assert g.members_active
    assert g.verdict.status is Status.OK, g.verdict.reason
    assert "not committed" in g.verdict.reason and "deleted" not in g.verdict.reason
    # What the demo prints at its start, while its consumer has joined but not committed yet.
    line = next(x for x in format_statuses(result).splitlines() if x.startswith(group_name))
    assert " OK " in line and "ERR" not in line, line


def test_a_passed_rewind_says_messages_were_reprocessed(
    admin, topic_name, producer, group_name, make_collector
) -> None:
    make_topic(admin, topic_name)
    tp = TopicPartition(topic_name, 0)
    for _ in range(200):
        producer.send(topic_name, b"v", partition=0)
    producer.flush()
    collector = make_collector([group_name])
    commit(admin, group_name, {tp: 150})
    collector.run_pass()
    admin.reset_group_offsets(group_name, {tp: 20})
    assert collector.run_pass().groups[group_name].verdict.status is Status.REWIND
    commit(admin, group_name, {tp: 200})
    g = collector.run_pass().groups[group_name]
    assert g.verdict.status is Status.OK, g.verdict.reason
    assert "130 messages were reprocessed" in g.partitions[0].verdict.reason
    assert g.partitions[0].verdict.numbers["reprocessed"] == 130
    assert "reprocessed" in g.verdict.reason
