"""Two consumers in a group with repeated rebalances: nothing lost, duplicates bounded and counted."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from consumer import AsyncFetchConsumer, ConsumerConfig
from tests.consumer.conftest import create_topic, produce

pytestmark = [pytest.mark.cluster, pytest.mark.timing]

PARTITIONS = 6
PER_PARTITION = 400


class App:
    """An application loop on its own thread: process (record it), then ack."""

    def __init__(self, consumer: AsyncFetchConsumer, processed: list[tuple[int, int]], lock: threading.Lock):
        self.consumer, self.processed, self.lock = consumer, processed, lock
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.is_set():
            for d in self.consumer.poll(timeout_s=0.2, max_records=20):
                with self.lock:
                    self.processed.append((d.partition, d.offset))
                time.sleep(0.002)
                self.consumer.ack(d)


def test_repeated_rebalances_lose_nothing(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=PARTITIONS)
    group = f"g-{uuid.uuid4().hex[:6]}"

    def cfg(name: str) -> ConsumerConfig:
        return ConsumerConfig(
            bootstrap_servers=cluster3.bootstrap,
            group_id=group,
            client_id=name,
            commit_interval_ms=300,
            buffer_max_records=200,
            max_uncommitted_per_partition=100,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )

    processed: list[tuple[int, int]] = []
    lock = threading.Lock()
    producer = threading.Thread(
        target=lambda: [
            (produce(cluster3.bootstrap, topic_name, PARTITIONS, 40, start=i * 40), time.sleep(1.5))
            for i in range(PER_PARTITION // 40)
        ],
        daemon=True,
    )
    producer.start()
    a = AsyncFetchConsumer(cfg("a"), topics=[topic_name]).start()
    app_a = App(a, processed, lock)
    app_a.thread.start()
    stats = []
    for i in range(3):  # B joins and leaves: each is two rebalances
        b = AsyncFetchConsumer(cfg(f"b{i}"), topics=[topic_name]).start()
        app_b = App(b, processed, lock)
        app_b.thread.start()
        time.sleep(4)
        app_b.stop.set()
        app_b.thread.join(5)
        b.close()
        stats.append(b.stats)
        time.sleep(2)
    producer.join(60)
    expected = {(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if expected <= set(processed):
                break
        time.sleep(0.2)
    app_a.stop.set()
    app_a.thread.join(5)
    a.close()
    stats.append(a.stats)

    counts = Counter(processed)
    assert set(counts) == expected  # nothing lost, nothing invented
    duplicates = sum(n - 1 for n in counts.values())
    # Duplicates come only from records finished after their partition was revoked (stale
    # acks) and acked records beyond an unfinished one at revoke time (at risk).
    bound = sum(s.get("ack_stale", 0) + s.get("at_risk_on_revoke", 0) for s in stats)
    revocations = sum(s.get("revocations", 0) for s in stats)
    assert revocations >= 6
    assert sum(s.get("commit_failed", 0) for s in stats) == 0
    assert duplicates <= bound <= revocations * cfg("x").max_uncommitted_per_partition
    print(f"processed={len(processed)} duplicates={duplicates} bound={bound} revocations={revocations}")


class SlowApp(App):
    """A poll loop that holds each polled batch for a while: ``per_record_s`` per record, acked
    one by one as it goes (the application of issue 18: a few ms per record)."""

    def __init__(self, consumer, processed, lock, per_record_s: float, max_records: int):
        super().__init__(consumer, processed, lock)
        self.per_record_s, self.max_records = per_record_s, max_records

    def run(self) -> None:
        while not self.stop.is_set():
            for d in self.consumer.poll(timeout_s=0.2, max_records=self.max_records):
                with self.lock:
                    self.processed.append((d.partition, d.offset))
                time.sleep(self.per_record_s)
                self.consumer.ack(d)


def test_rebalance_storm_with_a_slow_poll_loop_waits_for_in_flight_records(cluster3, admin, topic_name):
    """Members join and leave every ~2 s while consumer A's loop takes 4 ms per record (up to
    100 records, 0.4 s, in its hands at any time). A revoke waits for A's polled records to be
    acked before committing, so the new owner does not process them again: every duplicate is
    a record counted as not acked within ``revoke_wait_ms`` (or acked beyond an unfinished one)."""
    partitions, per_round, rounds = 6, 30, 12
    create_topic(admin, topic_name, partitions=partitions)
    group = f"g-{uuid.uuid4().hex[:6]}"

    def cfg(name: str) -> ConsumerConfig:
        return ConsumerConfig(
            bootstrap_servers=cluster3.bootstrap,
            group_id=group,
            client_id=name,
            commit_interval_ms=300,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=1_000,
        )

    processed: list[tuple[int, int]] = []
    lock = threading.Lock()
    producer = threading.Thread(
        target=lambda: [
            (
                produce(cluster3.bootstrap, topic_name, partitions, per_round, start=i * per_round),
                time.sleep(1.0),
            )
            for i in range(rounds)
        ],
        daemon=True,
    )
    producer.start()
    a = AsyncFetchConsumer(cfg("slow"), topics=[topic_name]).start()
    app_a = SlowApp(a, processed, lock, per_record_s=0.004, max_records=100)
    app_a.thread.start()
    stats = []
    for i in range(4):  # the storm: each member's join and leave are two rebalances
        members = []
        for j in range(2):
            m = AsyncFetchConsumer(cfg(f"m{i}{j}"), topics=[topic_name]).start()
            app_m = App(m, processed, lock)
            app_m.thread.start()
            members.append((m, app_m))
            time.sleep(1.0)
        time.sleep(1.0)
        for m, app_m in members:
            app_m.stop.set()
            app_m.thread.join(5)
            m.close()
            stats.append(m.stats)
    producer.join(60)
    expected = {(p, o) for p in range(partitions) for o in range(rounds * per_round)}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if expected <= set(processed):
                break
        time.sleep(0.2)
    app_a.stop.set()
    app_a.thread.join(5)
    a.close()
    stats.append(a.stats)

    counts = Counter(processed)
    assert set(counts) == expected  # nothing lost, nothing invented
    duplicates = sum(n - 1 for n in counts.values())
    revocations = sum(s.get("revocations", 0) for s in stats)
    unacked = sum(s.get("revoke_wait_unacked", 0) for s in stats)
    at_risk = sum(s.get("at_risk_on_revoke", 0) for s in stats)
    print(
        f"processed={len(processed)} duplicates={duplicates} revocations={revocations} slow stats={a.stats}"
    )
    assert revocations >= 16
    assert a.stats.get("revocations", 0) >= 8
    assert sum(s.get("commit_failed", 0) for s in stats) == 0
    # Every duplicate is accounted for: records not acked within the wait, or acked beyond one.
    assert duplicates <= unacked + at_risk
