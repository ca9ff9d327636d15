"""Helpers for lag tests on the real cluster: topics, offset commits, end offsets."""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka import errors as Errors
from kafka.admin import NewTopic, OffsetSpec
from kafka.structs import OffsetAndMetadata


def make_topic(admin: KafkaAdminClient, name: str, partitions: int = 1, rf: int = 1, **configs: str) -> str:
    admin.create_topics([NewTopic(name, partitions, rf, topic_configs=configs)])
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        try:
            ends = admin.list_partition_offsets(
                {TopicPartition(name, p): OffsetSpec.LATEST for p in range(partitions)}
            )
            if len(ends) == partitions:
                return name
        except Exception:
            pass
        time.sleep(0.2)
    raise AssertionError(f"topic {name} did not become ready")


def commit(admin: KafkaAdminClient, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit as an Empty group (the coordinator may need a moment after start-up)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = admin.alter_group_offsets(
                group, {tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()}
            )
            failed = {tp: e for tp, e in answer.items() if e is not Errors.NoError}
        except Exception as e:
            failed = {None: e}
        if not failed:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"commit for {group} failed: {failed}")
        time.sleep(0.3)


def end_offsets(admin: KafkaAdminClient, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    return {
        tp: o.offset for tp, o in admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps}).items()
    }


@dataclass
class MonthOld:
    """A one-partition topic whose first 4,000 records are 30 days old (rolled into several
    segments), then 40 fresh ones; ``old`` committed at 45 (reads a month back), ``fresh`` at
    4,035 (a few records behind the end)."""

    tp: TopicPartition
    old: str
    fresh: str
    leader: int


def month_old_topic(admin: KafkaAdminClient, bootstrap: str, topic: str, group: str) -> MonthOld:
    make_topic(admin, topic, **{"segment.ms": "50", "retention.ms": "-1"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, batch_size=64 * 1024)
    month_ago = int(time.time() * 1000) - 30 * 86400 * 1000
    for chunk in range(10):  # 4 MB of old data; segment.ms 50 rolls a segment per chunk
        for _ in range(400):
            producer.send(topic, b"x" * 1000, partition=0, timestamp_ms=month_ago + chunk * 1000)
        producer.flush()
        time.sleep(0.06)
    for _ in range(40):
        producer.send(topic, b"y" * 100, partition=0)
    producer.flush()
    producer.close()
    tp = TopicPartition(topic, 0)
    old, fresh = group + "-old", group + "-fresh"
    commit(admin, old, {tp: 45})
    commit(admin, fresh, {tp: 4000 + 35})
    leader = admin.describe_topics([topic])[0]["partitions"][0]["leader_id"]
    return MonthOld(tp, old, fresh, leader)


def write_load(stop: threading.Event, path: Path) -> None:
    """Real writes (about 4 MB/s) while /proc is sampled, so the measured rate is not zero."""
    block = os.urandom(1024 * 1024)
    with open(path, "wb") as f:
        while not stop.is_set():
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
            f.seek(0)
            stop.wait(0.25)
