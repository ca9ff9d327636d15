"""Helpers for lag tests on the real cluster: topics, offset commits, end offsets."""

from __future__ import annotations

import time

from kafka import KafkaAdminClient, TopicPartition
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
