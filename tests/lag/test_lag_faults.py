"""A broker stopped during a pass: its items fail with reasons, the pass goes on and ends."""

from __future__ import annotations

import contextlib
import time
import uuid

import pytest
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic, OffsetSpec

from lag.collector import CollectorConfig, LagCollector
from lag.rules import Status
from lag.timestamps import TimestampReader
from probe.commits import coordinator_partition
from testbed.cluster import ClusterState
from testbed.faults import PauseDutyCycle
from tests.lag.lagkit import commit, end_offsets

pytestmark = [pytest.mark.cluster, pytest.mark.timing]


def offsets_topic_leaders(admin: KafkaAdminClient, timeout_s: float = 60.0) -> dict[int, int]:
    """``__consumer_offsets`` partition -> leader. On a cluster where no group has been looked up
    yet the topic does not exist: a group lookup (FindCoordinator) makes the brokers create it."""
    deadline = time.monotonic() + timeout_s
    while True:
        metas = admin.describe_topics(["__consumer_offsets"])
        leaders = {p["partition_index"]: p["leader_id"] for m in metas for p in m.get("partitions") or []}
        if leaders and all(b >= 0 for b in leaders.values()):
            return leaders
        assert time.monotonic() < deadline, f"__consumer_offsets has no leaders after {timeout_s:.0f}s"
        with contextlib.suppress(Exception):  # the lookup fails until the topic is up: that is the point
            admin.list_group_offsets(f"g-{uuid.uuid4().hex[:10]}")
        time.sleep(1.0)


def group_coordinated_by(admin: KafkaAdminClient, avoid: int) -> str:
    leaders = offsets_topic_leaders(admin)
    while True:
        g = f"g-{uuid.uuid4().hex[:10]}"
        if leaders[coordinator_partition(g, len(leaders))] != avoid:
            return g


def wait_broker_back(admin: KafkaAdminClient, broker: int, prefix: str) -> None:
    """Leave the session cluster as we found it: the broker leads a new partition again."""
    probe = f"{prefix}-probe"
    created = False
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        try:
            if not created:  # refused while the broker is still fenced
                admin.create_topics([NewTopic(probe, replica_assignments={0: [broker]})])
                created = True
            if admin.list_partition_offsets({TopicPartition(probe, 0): OffsetSpec.LATEST}):
                return
        except Exception:
            time.sleep(0.5)
    raise AssertionError(f"broker {broker} did not come back within 90 s")


def test_stopped_broker_fails_only_its_items(
    cluster3: ClusterState, admin, topic_name: str, producer
) -> None:
    on1, on3 = topic_name + "-b1", topic_name + "-b3"
    admin.create_topics(
        [NewTopic(on1, replica_assignments={0: [1]}), NewTopic(on3, replica_assignments={0: [3]})]
    )
    time.sleep(1.0)
    for t in (on1, on3):
        for _ in range(5):
            producer.send(t, b"v", partition=0)
    producer.flush()
    healthy = group_coordinated_by(admin, avoid=3)
    hurt = group_coordinated_by(admin, avoid=3)
    tp1, tp3 = TopicPartition(on1, 0), TopicPartition(on3, 0)
    commit(admin, healthy, end_offsets(admin, [tp1]))
    commit(admin, hurt, {tp3: 2})
    quick = KafkaAdminClient(bootstrap_servers=cluster3.node(1).bootstrap, request_timeout_ms=4000)
    reader = TimestampReader(cluster3.node(1).bootstrap, timeout_s=1.0)
    try:
        collector = LagCollector(quick, reader, CollectorConfig(include=[f"^{healthy}$", f"^{hurt}$"]))
        assert collector.run_pass().groups[hurt].verdict.status is Status.OK
        with PauseDutyCycle(cluster3.node(3).pid, pause_ms=60_000, period_ms=60_001):
            time.sleep(0.5)
            started = time.monotonic()
            result = collector.run_pass()
            took = time.monotonic() - started
    finally:
        reader.close()
        quick.close()
        wait_broker_back(admin, 3, topic_name)
    assert took < 60, took
    assert healthy in result.groups and hurt in result.groups, result.errors
    assert result.groups[healthy].verdict.status is Status.OK, (
        result.groups[healthy].verdict.reason,
        result.errors,
    )
    bad = result.groups[hurt]
    assert bad.verdict.status is Status.ERR
    assert (
        "unavailable" in bad.partitions[0].verdict.reason or "no leader" in bad.partitions[0].verdict.reason
    )
