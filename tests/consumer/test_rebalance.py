"""Two consumers in a group with repeated rebalances: nothing lost, duplicates bounded and counted."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest

from consumer import AsyncFetchConsumer, ConsumerConfig
from tests.consumer.conftest import create_topic, produce

pytestmark = pytest.mark.cluster

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
