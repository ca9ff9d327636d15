"""The shared state and the lease on the real cluster, in one process: only a confirmed member of
the group's current generation holds the lease, and two members never hold it at once; the state
a holder writes is what the next one reads; a newer holder fences the older one's writes and
changes; a dry run creates nothing on the cluster; operator commands reach the holder through its
inbox."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kafka.structs import ConsumerGroupMetadata, MemberState

from remediation import control
from remediation.config import LeaseConfig
from remediation.lease import KafkaLease, ensure_lease_topic, member_confirmed
from remediation.service import build
from remediation.state import Fenced, TopicStateStore, ensure_state_topic, from_documents, read_documents
from testbed.cluster import ClusterState
from tests.remediation.kit import config, create_topic, demoting, finding, replicas
from tests.waiting import wait_until

# (the client's view of its membership, holds the lease if it is assigned the partition)
MEMBERSHIP = [
    ("joined and stable", ConsumerGroupMetadata("g", 4, "m-1", None, MemberState.STABLE), True),
    ("never joined", ConsumerGroupMetadata("g"), False),
    # The heartbeat was answered "unknown member": generation reset, old assignment still shown.
    ("expelled, not rejoined yet", ConsumerGroupMetadata("g", -1, "", None, MemberState.UNJOINED), False),
    ("rejoining", ConsumerGroupMetadata("g", 4, "m-1", None, MemberState.REBALANCING), False),
    ("stable without a member id", ConsumerGroupMetadata("g", 4, "", None, MemberState.STABLE), False),
]


@pytest.mark.parametrize(("case", "meta", "holds"), MEMBERSHIP, ids=[c[0] for c in MEMBERSHIP])
def test_only_a_confirmed_member_of_the_current_generation_holds(case: str, meta, holds: bool) -> None:
    assert member_confirmed(meta) is holds


@pytest.mark.cluster
def test_two_members_never_hold_the_lease_at_once(cluster3: ClusterState, admin, topic_name: str) -> None:
    """A standby joining, then the holder leaving: sampled every 50 ms, at most one holds."""
    cfg = LeaseConfig(
        topic=f"{topic_name}-lease",
        group=f"{topic_name}-g",
        state_topic=f"{topic_name}-state",
        session_timeout_ms=6000,
    )
    ensure_lease_topic(admin, cfg.topic)
    first = KafkaLease(cluster3.bootstrap, cfg, "first")
    second: KafkaLease | None = None
    both: list[float] = []
    try:
        assert first.wait(30), f"the first member never held the lease: {first.describe()}"
        assert "held=True" in first.describe() and f"('{cfg.topic}', 0)" in first.describe()
        second = KafkaLease(cluster3.bootstrap, cfg, "second")
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:  # the rebalance the standby causes
            if first.held() and second.held():
                both.append(time.monotonic())
            time.sleep(0.05)
        assert first.held() and not second.held(), "the standby took the lease from a live holder"
        first.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not second.held():
            time.sleep(0.05)
        assert second.held(), "the standby did not take the lease after the holder left"
        assert not both, f"both members held the lease at {len(both)} samples"
    finally:
        first.close()
        if second is not None:
            second.close()


@pytest.mark.cluster
@pytest.mark.timing
def test_the_holders_calls_are_not_starved_by_the_lease_thread(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    """Every state write and tick asks the lease for its commands and position, under the lock
    its thread polls under. Holding it through a 200 ms poll and re-taking it at once, the thread
    kept it nearly always: a call waited 0.7 s median (the steps of an action crawled, and under
    load a frozen-holder test waited past a minute for its first change). A call waits at most
    one short poll now; the median sits far below the old one whatever the host's load."""
    cfg = LeaseConfig(topic=f"{topic_name}-lease", group=f"{topic_name}-g", state_topic=f"{topic_name}-state")
    ensure_lease_topic(admin, cfg.topic)
    lease = KafkaLease(cluster3.bootstrap, cfg, "one")
    try:
        assert lease.wait(30), lease.describe()
        waits: list[float] = []
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            started = time.monotonic()
            lease.commands()
            lease.command_position()
            waits.append(time.monotonic() - started)
            time.sleep(0.01)
        waits.sort()
        assert waits[len(waits) // 2] < 0.1, (
            f"median wait {waits[len(waits) // 2]:.3f} s over {len(waits)} calls"
        )
        assert len(waits) > 50, f"only {len(waits)} calls in 3 s"
    finally:
        lease.close()


RF3 = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(6)}


def _store(bootstrap: str, lease: KafkaLease, topic: str, txn: str) -> TopicStateStore:
    return TopicStateStore(
        bootstrap,
        topic,
        transactional_id=txn,
        lease_tp=lease.tp,
        group_metadata=lease.group_metadata,
        command_position=lease.command_position,
        wait_held=lease.wait_held,
    )


# Takes the lease first through a real group join: one loaded whole-suite run (2026-11-30) saw no
# assignment in 30 s and the member unknown to the coordinator at close (LeaveGroup answered
# UnknownMemberId), the loss the inbox test below also met. A failure is rerun once and says the
# member's view of the group.
@pytest.mark.cluster
@pytest.mark.timing
def test_a_newer_holder_fences_the_older_ones_writes(cluster3: ClusterState, admin, topic_name: str) -> None:
    cfg = LeaseConfig(topic=f"{topic_name}-lease", group=f"{topic_name}-g", state_topic=f"{topic_name}-state")
    ensure_lease_topic(admin, cfg.topic)
    ensure_state_topic(admin, cfg.state_topic)
    lease = KafkaLease(cluster3.bootstrap, cfg, "one")
    try:
        assert lease.wait(30), lease.describe()
        old = _store(cluster3.bootstrap, lease, cfg.state_topic, f"{topic_name}.state")
        old.activate()
        old.data["demoted"]["2"] = "a1"
        old.data["actions"]["a1"] = {"id": "a1", "status": "done", "steps": []}
        old.save()
        # A new holder (same transactional id) takes over: it reads what the old one wrote...
        new = _store(cluster3.bootstrap, lease, cfg.state_topic, f"{topic_name}.state")
        new.activate()
        assert new.data["demoted"] == {"2": "a1"} and "a1" in new.data["actions"]
        # ...and the old one can no longer write, nor prove the lease for a change.
        old.data["demoted"]["3"] = "a2"
        with pytest.raises(Fenced):
            old.save()
        with pytest.raises(Fenced):
            old.fence()
        new.fence()  # the newer one can
        new.data["paused"] = True
        new.save()
        docs = from_documents(read_documents(cluster3.bootstrap, cfg.state_topic))
        assert docs["demoted"] == {"2": "a1"} and docs["paused"] is True
        new.deactivate()
    finally:
        lease.close()


@pytest.mark.cluster
def test_a_dry_run_creates_nothing_on_the_cluster(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, RF3)
    lease = {
        "enabled": True,
        "topic": f"{topic_name}-lease",
        "state_topic": f"{topic_name}-state",
        "group": f"{topic_name}-g",
    }
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        execute=False,
        lease=lease,
        **demoting(topic_name),
    )
    before = replicas(admin, topic_name)
    rem = build(cfg)
    try:
        assert rem.handle(finding("slow_broker", "broker:2"))["event"] == "dry_run"
    finally:
        rem.close()
    assert not {lease["topic"], lease["state_topic"]} & set(admin.list_topics())
    assert replicas(admin, topic_name) == before


# The holder keeps the lease only while its group session holds (heartbeats from a real broker's
# group coordinator): one loaded whole-suite run lost it mid-test (LeaveGroup at close answered
# UnknownMemberId), so no holder answered. A failure is rerun once.
@pytest.mark.cluster
@pytest.mark.timing
def test_commands_reach_the_holder_through_its_inbox(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    lease = {
        "enabled": True,
        "topic": f"{topic_name}-lease",
        "state_topic": f"{topic_name}-state",
        "group": f"{topic_name}-g",
    }
    cfg, _ = config(
        tmp_path, cluster3.bootstrap, lease=lease, rules={"slow_broker": "noop"}, remediations={"noop": None}
    )
    rem = build(cfg, member="holder")
    stop = threading.Event()
    try:
        assert rem.lease.wait(30), rem.lease.describe()
        rem.activate()

        def loop() -> None:
            while not stop.is_set():
                rem.tick()
                stop.wait(0.2)

        threading.Thread(target=loop, daemon=True).start()
        reply = control.send(cfg, control.command("pause", "test"), timeout_s=30)
        assert reply["ok"]
        wait_until(lambda: rem.state.data["paused"], 10, "paused")
        docs = from_documents(read_documents(cluster3.bootstrap, lease["state_topic"]))
        assert docs["paused"] is True  # written by the holder, in the shared state
        assert control.send(cfg, control.command("undo", "test", action="nope"), timeout_s=30)["ok"] is False
    finally:
        stop.set()
        rem.close()
    # No holder now: the command fails saying so, unless it may take the lease.
    with pytest.raises(control.NoHolder):
        control.send(cfg, control.command("resume", "test"), timeout_s=3)
    reply = control.send(cfg, control.command("resume", "test"), timeout_s=3, take_lease=True)
    assert reply["ok"]
    assert from_documents(read_documents(cluster3.bootstrap, lease["state_topic"]))["paused"] is False
