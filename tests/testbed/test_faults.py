"""Each fault measurably changes what the broker reports, and is undone afterwards."""

from __future__ import annotations

import statistics
import time

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import ConfigResourceType, NewTopic

from testbed import faults
from testbed.cluster import ClusterState
from testbed.faults.configs import entries_on_every_broker
from testbed.load import ensure_topic, partition_leaders
from tests.waiting import wait_until


def _process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _ack_latencies_ms(producer: KafkaProducer, topic: str, partition: int, n: int) -> list[float]:
    out = []
    for i in range(n):
        start = time.monotonic()
        producer.send(topic, value=b"x" * 100, partition=partition).get(timeout=30)
        out.append((time.monotonic() - start) * 1000)
        time.sleep(0.02 + (i % 7) * 0.013)  # spread sends over the pause cycle
    return sorted(out)


@pytest.mark.timing
def test_pause_duty_cycle_slows_only_that_broker_and_is_undone(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    ensure_topic(admin, topic_name, partitions=6, replication=3)
    leaders = partition_leaders(admin, topic_name)
    on2 = next(p for p, b in leaders.items() if b == 2)
    on1 = next(p for p, b in leaders.items() if b == 1)
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks=1, linger_ms=0)
    try:
        _ack_latencies_ms(producer, topic_name, on2, 5)  # warm up connections and metadata
        base2 = _ack_latencies_ms(producer, topic_name, on2, 30)
        victim = cluster3.node(2)
        with faults.PauseDutyCycle(victim.pid, pause_ms=450, period_ms=600) as pause:
            slow2 = _ack_latencies_ms(producer, topic_name, on2, 30)
            during1 = _ack_latencies_ms(producer, topic_name, on1, 30)
        assert pause.cycles > 0
        after2 = _ack_latencies_ms(producer, topic_name, on2, 30)
    finally:
        producer.close()
    mean = statistics.fmean
    # Paused 450 ms of every 600, most requests to broker 2 wait out part of a pause.
    assert mean(slow2) > max(50.0, 3 * mean(base2)), (base2, slow2)
    assert mean(during1) < mean(slow2) / 2, (during1, slow2)
    assert mean(after2) < mean(slow2) / 2, (after2, slow2)
    assert _process_state(victim.pid) != "T"
    assert not faults.ACTIVE


def test_starving_request_handlers_changes_the_broker_config_and_restores_it(
    cluster3: ClusterState, admin
) -> None:
    before = faults.broker_config(admin, 3, "num.io.threads")
    with faults.starve_request_handlers(admin, 3, threads=1):
        assert faults.broker_config(admin, 3, "num.io.threads") == "1"
        assert faults.broker_config(admin, 1, "num.io.threads") == before
    assert faults.broker_config(admin, 3, "num.io.threads") == before


def _replica_sizes(admin, topic: str, partition: int) -> dict[int, int]:
    sizes = {}
    for entry in admin.describe_log_dirs():
        for d in entry["log_dirs"]:
            for t in d["topics"]:
                for p in t["partitions"]:
                    if t["name"] == topic and p["partition_index"] == partition:
                        sizes[entry["broker"]] = p["partition_size"]
    return sizes


@pytest.mark.timing
def test_replication_throttle_holds_a_moving_replica_back_and_is_removed(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    # Kafka throttles only replicas that are not in sync: the case that matters is a replica
    # being added by a reassignment. Put 5 MB on brokers 1+2, then add a replica on broker 3.
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [1, 2]})])
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all", linger_ms=5)
    for _ in range(500):
        producer.send(topic_name, value=b"y" * 10_000, partition=0)
    producer.flush(30)
    producer.close()
    tp = TopicPartition(topic_name, 0)
    with faults.throttle_replication(admin, 3, 50_000, [topic_name]):
        assert faults.broker_config(admin, 3, "follower.replication.throttled.rate") == "50000"
        admin.alter_partition_reassignments({tp: [1, 2, 3]})
        time.sleep(4)
        sizes = _replica_sizes(admin, topic_name, 0)
        # Broker 1 holds ~5 MB; broker 3 got one unthrottled fetch (1 MB, replica.fetch.max.bytes)
        # and then ~50 kB/s: well under half of it after 4 s.
        assert sizes[1] > 4_500_000
        assert sizes.get(3, 0) < sizes[1] / 2, sizes
    assert faults.broker_config(admin, 3, "follower.replication.throttled.rate") is None
    deadline = time.monotonic() + 60
    while (sizes := _replica_sizes(admin, topic_name, 0)).get(3, 0) < sizes[1]:
        assert time.monotonic() < deadline, f"broker 3 did not catch up once unthrottled: {sizes}"
        time.sleep(0.5)


def test_revert_all_undoes_a_fault_left_active(cluster3: ClusterState) -> None:
    victim = cluster3.node(3)
    pause = faults.PauseDutyCycle(victim.pid, pause_ms=200, period_ms=400).start()
    time.sleep(0.5)
    assert faults.revert_all() == [f"pause pid {victim.pid}"]
    assert not pause.running
    time.sleep(0.1)
    assert _process_state(victim.pid) != "T"


@pytest.mark.parametrize(("pause_ms", "period_ms"), [(0, 100), (100, 100), (200, 100), (-1, 10)])
def test_pause_duty_cycle_rejects_bad_cycles(pause_ms: int, period_ms: int) -> None:
    with pytest.raises(ValueError, match="pause_ms"):
        faults.PauseDutyCycle(1, pause_ms=pause_ms, period_ms=period_ms)


@pytest.mark.timing
def test_restore_preferred_leaders_moves_leadership_back(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    """Reordering the replicas of a partition (same set, so nothing is copied) leaves its leader
    where it was: the partition is then led by a replica that is not the preferred one, as after a
    broker stalled. The helper elects the preferred replica and returns once it leads."""
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [1, 2, 3], 1: [3, 1, 2]})])
    ensure_topic(admin, topic_name, partitions=2, replication=3)
    assert faults.restore_preferred_leaders(admin, [topic_name]) == {topic_name: [1, 3]}
    admin.alter_partition_reassignments(
        {TopicPartition(topic_name, 0): [2, 1, 3], TopicPartition(topic_name, 1): [3, 1, 2]}
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.describe_topics([topic_name])[0]["partitions"]
        if next(p for p in meta if p["partition_index"] == 0)["replica_nodes"][0] == 2:
            break
        time.sleep(0.2)
    assert partition_leaders(admin, topic_name) == {0: 1, 1: 3}, "reordering replicas moved the leader"
    assert faults.restore_preferred_leaders(admin, [topic_name], timeout_s=60) == {topic_name: [2, 3]}
    assert partition_leaders(admin, topic_name) == {0: 2, 1: 3}


def test_topic_config_override_is_deleted_though_its_default_reads_back_as_a_value(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    # flush.messages has no "unset" value: deleted, it reads back as Long.MAX_VALUE.
    ensure_topic(admin, topic_name, partitions=1, replication=3)
    # Right after the creation, the broker that answers DescribeConfigs may not know the topic
    # yet (a whole-suite run read None): read its value once a broker reports one.
    before = wait_until(
        lambda: faults.topic_config(admin, topic_name, "flush.messages"),
        30,
        "flush.messages of the new topic",
    )
    with faults.topic_configs(admin, [topic_name], {"flush.messages": "1"}):
        # In force on every broker when the fault is on (any of them may answer the next read).
        on_each = entries_on_every_broker(admin, ConfigResourceType.TOPIC, topic_name, "flush.messages")
        assert [e["value"] for e in on_each] == ["1"] * len(cluster3.nodes)
        assert faults.topic_config(admin, topic_name, "flush.messages") == "1"
        assert faults.ACTIVE
    assert faults.topic_config(admin, topic_name, "flush.messages") == before == str(2**63 - 1)
    assert not faults.ACTIVE


def test_topic_configs_needs_topics_and_configs() -> None:
    # Checked before any admin call: no cluster needed.
    with (
        pytest.raises(ValueError, match="needs topics"),
        faults.topic_configs(None, [], {"flush.messages": "1"}),
    ):
        pass
