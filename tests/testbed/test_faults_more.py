"""The stalled follower, the slow disk, CPU starvation and the slow client on the session cluster:
each does to the broker what it says (the follower paused and its leaderships moved, the flush
config and the disk cap set, the JVM pinned beside its spinners), on that broker only, and the
cluster is as before once it is reverted. The slow client, which needs no load, also shows where
it should in the broker's own request log: its fetches' send time, not the other clients'."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass

import psutil
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from linkwatch.errors import SetupError
from linkwatch.sketch import exact_quantile
from testbed import faults
from testbed.cluster import ClusterState
from testbed.load import partition_leaders
from tests.agent.traffic import create_topic

pytestmark = pytest.mark.cluster

MARKER = " Completed request:"


@dataclass(frozen=True)
class Request:
    """What the tests compare from one ``Completed request`` line."""

    api: str  # requestApiKeyName; FETCH split into FETCH_CONSUMER / FETCH_FOLLOWER
    client_id: str
    topics: frozenset[str]
    stages: dict[str, float]  # "local" -> localTimeMs, ...


def _parse(line: str) -> Request | None:
    _, sep, rest = line.partition(MARKER)
    if not sep:
        return None
    obj = json.loads(rest.rsplit(" (kafka.request.logger)", 1)[0])
    header, body = obj["requestHeader"], obj.get("request") or {}
    api = header["requestApiKeyName"]
    if api == "FETCH":
        follower = "replicaState" in body or body.get("replicaId", -1) >= 0
        api = "FETCH_FOLLOWER" if follower else "FETCH_CONSUMER"
    topics = {t.get("name") or t.get("topic") for t in body.get("topicData") or body.get("topics") or []}
    stages = {k.removesuffix("TimeMs"): float(v) for k, v in obj.items() if k.endswith("TimeMs")}
    return Request(api, header.get("clientId") or "", frozenset(t for t in topics if t), stages)


class LogTap:
    """The requests each broker logs from the moment the tap is made."""

    def __init__(self, cluster: ClusterState) -> None:
        self.files = {n.node_id: n.request_log for n in cluster.nodes}
        self.offsets = {b: p.stat().st_size if p.exists() else 0 for b, p in self.files.items()}

    def read(self) -> dict[int, list[Request]]:
        time.sleep(0.5)  # log4j writes a line when the response is sent: let the last ones land
        out: dict[int, list[Request]] = {}
        for b, path in self.files.items():
            with open(path, "rb") as f:
                start = self.offsets[b] if f.seek(0, 2) >= self.offsets[b] else 0  # rolled over: from 0
                f.seek(start)
                data = f.read()
            out[b] = [r for line in data.decode().splitlines() if (r := _parse(line))]
        return out


def _replica_orders(admin, topic: str) -> dict[int, list[int]]:
    return {p["partition_index"]: p["replica_nodes"] for p in admin.describe_topics([topic])[0]["partitions"]}


def _states_seen(pid: int, seconds: float) -> set[str]:
    """The states /proc shows for process ``pid`` (``T``: stopped) sampled every 20 ms."""
    seen: set[str] = set()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/stat") as f:
            seen.add(f.read().rsplit(")", 1)[1].split()[0])
        time.sleep(0.02)
    return seen


# What each fault does to the cluster, and that it is undone. What each one does to the requests
# (which broker's which stage grows against its peers') is the fault matrix's to judge, end to end
# with the agents and the analyzer under load (bench/fault_matrix.py: EFFECTS, each fault's stage
# p99 against the peers'); held here under a load for seconds per phase, the same measurement
# took a core for 25 s a test.


def test_stalled_follower_moves_leadership_off_pauses_that_broker_and_is_undone(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    # Broker 2 is first (preferred leader) of partition 1; the helper must move that leadership.
    create_topic(admin, topic_name, leaders=[1, 2, 3])
    orders = _replica_orders(admin, topic_name)
    pid = cluster3.node(2).pid
    with faults.stall_follower(admin, 2, pid, [topic_name], pause_ms=400) as leaders:
        assert 2 not in leaders[topic_name], leaders
        assert 2 not in partition_leaders(admin, topic_name).values()
        assert all(order[-1] == 2 or 2 not in order for order in _replica_orders(admin, topic_name).values())
        assert "T" in _states_seen(pid, 1.5), "broker 2 was never seen stopped"
    assert not faults.ACTIVE
    assert "T" not in _states_seen(pid, 1.2), "broker 2 still stopped after the fault"
    assert _replica_orders(admin, topic_name) == orders
    assert partition_leaders(admin, topic_name) == {0: 1, 1: 2, 2: 3}


def test_stall_follower_refuses_a_broker_that_is_no_replica(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    create_topic(admin, topic_name, rf=2, leaders=[1, 3])
    with (
        pytest.raises(SetupError, match=r"broker 2 cannot be a follower of .*-0 \(replicas \[1, 3\]\)"),
        faults.stall_follower(admin, 2, cluster3.node(2).pid, [topic_name]),
    ):
        pass
    assert not faults.ACTIVE


def test_stall_follower_names_a_topic_missing_from_the_metadata(
    cluster3: ClusterState, admin, topic_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from testbed.faults import stalled_follower

    monkeypatch.setattr(stalled_follower, "TOPIC_METADATA_WAIT_S", 0.5)  # asked again, then refused
    with (
        pytest.raises(SetupError, match=rf"topic {topic_name} has no partitions in the metadata after 0.5 s"),
        faults.stall_follower(admin, 2, cluster3.node(2).pid, [topic_name]),
    ):
        pass
    assert not faults.ACTIVE


# A flush per append alone, and with the broker's disk writes capped (a slow disk of its own,
# faults.slow_disk; the cap's own effect on fsyncs: tests/testbed/test_faults_disk.py).
@pytest.mark.parametrize("cap", [None, 300], ids=["flush per append", "a disk of its own"])
def test_slow_log_appends_set_on_that_broker_only_and_are_undone(
    cluster3: ClusterState, admin, cap: int | None
) -> None:
    node = cluster3.node(2)
    if cap is not None:
        try:
            faults.block_device(node.log_dirs[0])
            home = faults.blkio_cgroup(node.pid)
        except SetupError as e:
            pytest.skip(f"no cgroup v1 blkio throttle here: {e}")
    key = "log.flush.interval.messages"
    default = faults.broker_config(admin, 2, key)
    with (
        faults.slow_log_appends(admin, 2)
        if cap is None
        else faults.slow_disk(admin, 2, node.pid, node.log_dirs[0], cap)
    ) as group:
        assert faults.broker_config(admin, 2, key) == "1"
        assert faults.broker_config(admin, 1, key) == default
        if group is not None:
            assert faults.blkio_cgroup(node.pid).endswith(os.path.basename(group))
            with open(f"{group}/blkio.throttle.write_iops_device") as f:
                assert f.read().split()[-1] == str(cap)
    assert not faults.ACTIVE
    assert faults.broker_config(admin, 2, key) == default
    if group is not None:
        assert faults.blkio_cgroup(node.pid) == home
        assert not os.path.exists(group)


def _spinners(before: set[int], cpu: int, timeout_s: float = 5.0) -> list[psutil.Process]:
    """This process's children started since ``before`` once each has pinned itself to ``cpu``
    (a spinner sets its own affinity after it starts)."""
    deadline = time.monotonic() + timeout_s
    while True:
        new = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        with contextlib.suppress(psutil.NoSuchProcess):
            if new and all(p.cpu_affinity() == [cpu] for p in new):
                return new
        if time.monotonic() > deadline:
            return new
        time.sleep(0.05)


def test_starved_cpu_pins_that_broker_beside_its_spinners_and_its_affinity_comes_back(
    cluster3: ClusterState,
) -> None:
    pid = cluster3.node(2).pid
    masks = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")}
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with faults.starve_cpu(pid, busy_processes=2) as cpu:
        assert os.sched_getaffinity(pid) == {cpu}
        spinners = _spinners(before, cpu)
        assert len(spinners) == 2 and all(p.cpu_affinity() == [cpu] for p in spinners), spinners
        assert all(os.getsid(p.pid) == p.pid for p in spinners), "spinners share the test's session"
    assert not faults.ACTIVE
    assert not [p for p in spinners if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    still = {t: m for t, m in masks.items() if os.path.exists(f"/proc/{pid}/task/{t}")}
    assert {t: os.sched_getaffinity(t) for t in still} == still


@pytest.mark.parametrize("busy", [0, 9])
def test_starve_cpu_bounds_its_spinners(busy: int) -> None:
    with (
        pytest.raises(ValueError, match="busy_processes"),
        faults.starve_cpu(os.getpid(), busy_processes=busy),
    ):
        pass


# Real brokers under an injected fault on a shared machine: timing-sensitive (one rerun).
@pytest.mark.timing
def test_slow_client_grows_send_time_for_its_own_fetches_only(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    admin.create_topics([NewTopic(topic_name, replica_assignments={0: [2, 1, 3]})])
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all", linger_ms=5)
    for _ in range(1200):
        producer.send(topic_name, value=b"z" * 1000, partition=0)
    producer.flush(30)
    producer.close()
    assert partition_leaders(admin, topic_name) == {0: 2}
    node = cluster3.node(2)
    reader = KafkaConsumer(bootstrap_servers=cluster3.bootstrap, client_id="healthy-reader")
    reader.assign([TopicPartition(topic_name, 0)])
    tap = LogTap(cluster3)
    slow = faults.SlowClient(
        "127.0.0.1", node.ports.client, topic_name, client_id="stalled-reader", stall_ms=600
    )
    with slow:
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:  # the healthy reader re-reads the same data meanwhile
            reader.poll(timeout_ms=200)
            reader.seek_to_beginning()
    reader.close()
    assert not faults.ACTIVE and not slow.error, slow.error
    served = tap.read()[2]
    fetches = [r for r in served if r.api == "FETCH_CONSUMER"]
    stalled = [r.stages["send"] for r in fetches if r.client_id == "stalled-reader"]
    others = [r.stages["send"] for r in served if r.client_id != "stalled-reader"]
    healthy = [r for r in fetches if r.client_id == "healthy-reader"]
    msg = (
        f"send ms of stalled-reader {sorted(stalled)}; others p99 {exact_quantile(others, 0.99):.1f} ms "
        f"over {len(others)} requests ({len(healthy)} healthy fetches); response {slow.response_bytes} B"
    )
    print(msg)
    assert slow.response_bytes > 500_000 and slow.fetches >= 3, msg
    assert len(stalled) >= 3 and exact_quantile(stalled, 0.5) >= 300, msg
    assert healthy and exact_quantile(others, 0.99) <= 100, msg
    after = LogTap(cluster3)
    time.sleep(1.5)
    assert not [r for r in after.read()[2] if r.client_id == "stalled-reader"], "still fetching once stopped"
