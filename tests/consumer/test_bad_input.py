"""Bad input and failing records: retried, then dead-lettered or the partition stops — counted."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer

from consumer import AsyncFetchConsumer, ConsumerConfig
from tests.consumer.conftest import create_topic

pytestmark = pytest.mark.cluster

# value -> what the application does with it
GOOD, FLAKY, POISON = b'{"ok": 1}', b'{"flaky": 1}', b'{"poison": 1}'
MALFORMED = [b"{not json", b"\xff\xfe\x00", b""]  # each a deserializer error


def _send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for v in values:
        producer.send(topic, value=v, partition=0)
    producer.send(topic, value=GOOD, partition=1)
    producer.flush()
    producer.close()


def _run(
    consumer: AsyncFetchConsumer, expect_done: int, timeout_s: float = 30
) -> tuple[list[bytes], dict[bytes, int]]:
    done: list[bytes] = []
    seen: dict[bytes, int] = {}
    deadline = time.monotonic() + timeout_s
    while len(done) < expect_done and time.monotonic() < deadline:
        for d in consumer.poll(0.3):
            seen[d.raw_value] = seen.get(d.raw_value, 0) + 1
            if d.raw_value == POISON or (d.raw_value == FLAKY and d.attempts < 2):
                consumer.fail(d, "boom")
            else:
                consumer.ack(d)
                done.append(d.raw_value)
    return done, seen


def test_dead_letter_path(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=2)
    create_topic(admin, f"{topic_name}.dead-letter", partitions=3, replication=3)  # none made on use
    _send(cluster3.bootstrap, topic_name, [GOOD, *MALFORMED, FLAKY, POISON, GOOD])
    group = f"g-{uuid.uuid4().hex[:6]}"
    cfg = ConsumerConfig(bootstrap_servers=cluster3.bootstrap, group_id=group, max_retries=2)
    with AsyncFetchConsumer(cfg, topics=[topic_name], value_deserializer=json.loads) as consumer:
        done, seen = _run(consumer, expect_done=4)
        time.sleep(0.5)
        consumer.commit()
        stats = dict(consumer.stats)
    assert sorted(done) == sorted([GOOD, FLAKY, GOOD, GOOD])
    assert seen[FLAKY] == 3 and seen[POISON] == 3  # first try + 2 retries
    assert stats["deserialize_error"] == 3 and stats["dead_lettered"] == 4 and stats["retried"] == 4
    # A single member never rebalances after its first join (it used to: kafka-python compared
    # the assignment with an empty metadata snapshot, so every record became stale once).
    assert stats.get("revocations", 0) == 0 and stats.get("ack_stale", 0) == 0
    reader = KafkaConsumer(
        f"{topic_name}.dead-letter", bootstrap_servers=cluster3.bootstrap, auto_offset_reset="earliest"
    )
    dead = []
    deadline = time.monotonic() + 20
    while len(dead) < 4 and time.monotonic() < deadline:
        dead += [r for recs in reader.poll(500).values() for r in recs]
    reader.close()
    assert sorted(r.value for r in dead) == sorted([*MALFORMED, POISON])
    assert all(dict(r.headers)["linkwatch.source"].startswith(f"{topic_name}-0@".encode()) for r in dead)
    committed = admin.list_group_offsets(group)[group]
    assert {tp.partition: om.offset for tp, om in committed.items()} == {
        0: 7,
        1: 1,
    }  # all 7 records of partition 0 done


def test_stop_partition_path(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=2)
    _send(cluster3.bootstrap, topic_name, [GOOD, POISON, GOOD, GOOD])
    group = f"g-{uuid.uuid4().hex[:6]}"
    cfg = ConsumerConfig(
        bootstrap_servers=cluster3.bootstrap, group_id=group, max_retries=1, on_exhausted="stop_partition"
    )
    with AsyncFetchConsumer(cfg, topics=[topic_name]) as consumer:
        done, _ = _run(consumer, expect_done=2, timeout_s=40)
        deadline = time.monotonic() + 20
        while not consumer.stopped_partitions() and time.monotonic() < deadline:
            for d in consumer.poll(0.3):  # the poison record's retries
                assert d.raw_value == POISON
                consumer.fail(d, "boom")
        time.sleep(1)
        more = consumer.poll(1.0)  # nothing after the poison record of partition 0
        for d in more:
            consumer.ack(d)
        consumer.commit()
        stopped = consumer.stopped_partitions()
    # Records already handed over in the poison record's batch may still be processed, but
    # nothing more is delivered for the stopped partition and its commit stays at the poison.
    assert done.count(GOOD) >= 2 and POISON not in done
    assert [(d.partition, d.offset) for d in more if d.partition == 0] == []
    assert stopped == {(topic_name, 0): 1}
    committed = admin.list_group_offsets(group)[group]
    assert {tp.partition: om.offset for tp, om in committed.items()}.get(0) == 1  # stays at the poison
