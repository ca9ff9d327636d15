"""On the real 3-broker cluster: every key that is not hot lands on the partition Kafka's own
default partitioner puts it on, through kafka-python and through the confluent-kafka wrapper,
while the hot key is spread over its candidates."""

from __future__ import annotations

import random
import time
from collections import defaultdict

import pytest
from confluent_kafka import Producer as ConfluentProducer
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from producer import SkewAwarePartitioner, candidate_partitions
from producer.confluent import SkewAwareConfluentProducer

PARTITIONS = 12
HOT = b"hot-key"


def _create(admin, name: str) -> None:
    # Partition p led by broker p % 3 + 1: four partitions per broker.
    admin.create_topics(
        [NewTopic(name, -1, -1, replica_assignments={p: [p % 3 + 1] for p in range(PARTITIONS)})]
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = admin.describe_topics([name])[0].get("partitions") or []
        if len([p for p in parts if p["leader_id"] >= 0]) == PARTITIONS:
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {name} has no leaders after 30s")


def _stream() -> list[bytes]:
    rng = random.Random(16)
    cold = [b"user-%d" % i for i in range(400)] * 3
    stream = cold + [HOT] * 600  # the hot key: a third of the records
    rng.shuffle(stream)
    return stream


def _read_back(bootstrap: str, topic: str, n: int) -> dict[bytes, dict[bytes, set[int]]]:
    """value tag -> key -> partitions it was found on."""
    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    found: dict[bytes, dict[bytes, set[int]]] = defaultdict(lambda: defaultdict(set))
    got, deadline = 0, time.monotonic() + 60
    try:
        while got < n and time.monotonic() < deadline:
            for tp, recs in c.poll(timeout_ms=500).items():
                for r in recs:
                    found[r.value][r.key].add(tp.partition)
                    got += 1
    finally:
        c.close()
    assert got == n, f"read {got} of {n} records back"
    return found


@pytest.mark.cluster
def test_cold_keys_land_where_kafkas_default_partitioner_puts_them(cluster3, admin, topic_name) -> None:
    _create(admin, topic_name)
    stream = _stream()
    ours, theirs = SkewAwarePartitioner(candidates=3), SkewAwarePartitioner(candidates=3)

    default = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all", linger_ms=5)
    skew = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all", linger_ms=5, partitioner=ours)
    confluent = SkewAwareConfluentProducer(
        ConfluentProducer({"bootstrap.servers": cluster3.bootstrap, "acks": "all", "linger.ms": 5}), theirs
    )
    try:
        for key in stream:
            default.send(topic_name, key=key, value=b"default")
            ours.watch(skew.send(topic_name, key=key, value=b"skew"))
            confluent.produce(topic_name, key=key, value=b"confluent")
            confluent.poll(0)
        default.flush(30)
        skew.flush(30)
        assert confluent.flush(30) == 0
    finally:
        default.close()
        skew.close()

    found = _read_back(cluster3.bootstrap, topic_name, 3 * len(stream))
    kafka_placement = found[b"default"]
    cold = {k for k in stream if k != HOT}
    for tag, part in ((b"skew", ours), (b"confluent", theirs)):
        assert HOT in part.hot_keys(topic_name) and not cold & set(part.hot_keys(topic_name))
        placed = found[tag]
        moved = {k: placed[k] for k in cold if placed[k] != kafka_placement[k]}
        assert moved == {}, f"{tag!r}: cold keys off Kafka's placement"
        assert all(len(kafka_placement[k]) == 1 for k in cold)
        # The hot key: spread over its three candidates, nowhere else.
        assert placed[HOT] == set(candidate_partitions(HOT, PARTITIONS, 3)), tag
        assert part.counts["acks_ignored"] == 0 and part.counts["ack_errors"] == 0
    assert kafka_placement[HOT] == {candidate_partitions(HOT, PARTITIONS, 3)[0]}
