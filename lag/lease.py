"""Which of several collector instances publishes findings: a lease by group membership.

Two ``linkwatch lag`` instances may run for availability. Both evaluate every pass (so either
can take over with its windows already warm) and both export metrics, but only the holder of
the lease publishes findings. The lease is partition 0 of a one-partition topic, handed out by
Kafka's own group coordinator: every instance joins consumer group ``group_id`` subscribed to
``topic``; the member assigned the partition holds the lease. When the holder stops cleanly it
leaves the group and another member gets the partition at its next pass; when it dies, after
``session_timeout_ms``. No extra service (ZooKeeper, a database) is needed.

While a rebalance is in progress nobody holds the lease, so a finding may be delayed by one
pass, never doubled. Findings also carry a key per (group, episode) (``ts_ms`` = episode start),
so a reader can collapse the rare duplicate at a handover.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from consumer import kafka_compat
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs

METADATA_MAX_AGE_MS = 5_000
TOPIC_WAIT_S = 10.0
HELD_POLL_MS = 200  # each held() drives the group (joins, rebalances) for up to this long


class Lease(Protocol):
    def held(self) -> bool:
        """True if this instance may publish findings now. Never raises."""

    def close(self) -> None: ...


class AlwaysHeld:
    """The single-instance default: no coordination."""

    def held(self) -> bool:
        return True

    def close(self) -> None:
        return None


class GroupLease:
    def __init__(
        self,
        kafka: KafkaClientConfig | str,
        topic: str = "linkwatch.lag.lease",
        group_id: str = "linkwatch-lag-lease",
        instance: str = "",
        session_timeout_ms: int = 10_000,
        interval_s: float = 10.0,
    ) -> None:
        self.topic = topic
        self._tp = TopicPartition(topic, 0)
        self._consumer = KafkaConsumer(
            **kafka_python_kwargs(kafka, f"lag-{instance}" if instance else "lag"),
            group_id=group_id,
            enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=max(500, session_timeout_ms // 5),
            # Also the rebalance timeout: how long a handover may wait for members to rejoin.
            # ``held`` polls once per pass, so it must exceed the pass interval comfortably.
            max_poll_interval_ms=max(session_timeout_ms * 3, int(interval_s * 3000)),
            # The group leader assigns the partition from its own metadata. A member whose
            # metadata lacks the lease topic (it asked before the topic reached that broker) would
            # assign nobody the lease until its next refresh: 5 minutes by default. A metadata
            # request every few seconds per instance is cheap and bounds that gap.
            metadata_max_age_ms=METADATA_MAX_AGE_MS,
        )
        self._wait_for_topic(topic, TOPIC_WAIT_S)
        self._consumer.subscribe([topic])
        # kafka-python 3.0.12's group-join races (a first assignment without the topic's
        # metadata snapshot, a join that finished between two polls never completed or thrown
        # away): each left a live instance without the lease until its session ended.
        kafka_compat.steady_group_join(self._consumer, HELD_POLL_MS)

    def _wait_for_topic(self, topic: str, timeout_s: float) -> None:
        """Learn the lease topic's partition before joining, so a first assignment is not empty
        (bounded: past ``timeout_s`` the metadata refresh above finds it later)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if self._consumer.partitions_for_topic(topic):
                    return
            time.sleep(0.2)

    def held(self) -> bool:
        try:
            # poll drives joins and rebalances; the lease topic carries no data we need.
            self._consumer.poll(timeout_ms=HELD_POLL_MS, max_records=1)
            return self._tp in self._consumer.assignment()
        except Exception:
            return False

    def close(self) -> None:
        self._consumer.close(autocommit=False)


def ensure_lease_topic(admin: Any, topic: str, replication_factor: int, dry_run: bool) -> str:
    """Create the one-partition lease topic if missing. Returns what was (or would be) done."""
    existing = {t["name"] for t in admin.describe_topics() if t.get("error_code", 0) == 0}
    if topic in existing:
        return f"lease topic {topic} exists"
    if dry_run:
        return f"dry run: would create lease topic {topic} (1 partition, RF {replication_factor})"
    admin.create_topics([NewTopic(topic, 1, replication_factor)])
    return f"created lease topic {topic} (1 partition, RF {replication_factor})"
