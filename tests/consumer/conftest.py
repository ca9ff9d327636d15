"""Helpers for the consumer tests: topics spread over the three brokers and a keyed producer."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from kafka import KafkaProducer
from kafka.admin import NewTopic


def create_topic(admin, name: str, partitions: int = 6, replication: int = 1) -> dict[int, int]:
    """Create ``name`` with partition p led by broker ``p % 3 + 1`` and wait for the leaders;
    returns them (partition -> leader). A describe right after may still reach a broker whose
    metadata lacks the topic: use the returned leaders, not a second describe."""
    assignment = {p: [(p + r) % 3 + 1 for r in range(replication)] for p in range(partitions)}
    admin.create_topics([NewTopic(name, -1, -1, replica_assignments=assignment)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        led = leaders(admin, name)
        if led == {p: a[0] for p, a in assignment.items()}:
            return led
        time.sleep(0.2)
    raise AssertionError(f"topic {name} has no leaders after 30s")


def leaders(admin, name: str) -> dict[int, int]:
    """partition -> leader broker id."""
    described = admin.describe_topics([name])
    parts = described[0].get("partitions") or [] if described else []
    return {p["partition_index"]: p["leader_id"] for p in parts}


def produce(
    bootstrap: str, topic: str, partitions: int, per_partition: int, start: int = 0
) -> dict[int, list[bytes]]:
    """Send ``p:i`` values to every partition; returns what was sent per partition."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    sent: dict[int, list[bytes]] = defaultdict(list)
    for i in range(start, start + per_partition):
        for p in range(partitions):
            value = f"{p}:{i}".encode()
            producer.send(topic, value=value, partition=p)
            sent[p].append(value)
    producer.flush(30)
    producer.close()
    return dict(sent)


@pytest.fixture
def spread_topic(admin, topic_name: str) -> str:
    create_topic(admin, topic_name, partitions=6)
    return topic_name
