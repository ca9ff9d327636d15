"""Rack spread, under-replicated and offline partitions: rules on explicit layouts and the real cluster."""

from __future__ import annotations

import time

import pytest
from kafka.admin import NewTopic

from lag.collector import PassResult
from lag.rack import PartitionPlacement, RackConfig, RackWatch, spread
from testbed.cluster import ClusterState

RACKS = {1: "a", 2: "b", 3: "c", 4: "a"}


def pp(
    replicas: tuple[int, ...], isr: tuple[int, ...] | None = None, leader: int | None = None
) -> PartitionPlacement:
    isr = replicas if isr is None else isr
    return PartitionPlacement("t", 0, replicas[0] if leader is None else leader, replicas, isr)


# (placement, expected kinds): kinds among one_rack, single_replica, under_replicated, offline
SPREAD_CASES = [
    ("spread over three racks", pp((1, 2, 3)), set()),
    ("spread over two racks", pp((1, 2)), set()),
    ("two replicas in rack a", pp((1, 4)), {"one_rack"}),
    ("one replica", pp((2,)), {"single_replica"}),
    ("follower out of ISR", pp((1, 2, 3), isr=(1, 2)), {"under_replicated"}),
    ("no leader", pp((1, 2), isr=(), leader=-1), {"offline"}),
    ("one rack and under-replicated", pp((1, 4), isr=(1,)), {"one_rack", "under_replicated"}),
    ("broker without a rack is not judged", pp((1, 9)), set()),
]


@pytest.mark.parametrize(("name", "placement", "kinds"), SPREAD_CASES, ids=[c[0] for c in SPREAD_CASES])
def test_spread_rules(name: str, placement: PartitionPlacement, kinds: set[str]) -> None:
    r = spread([placement], RACKS, RackConfig())
    got = {k for k in ("one_rack", "single_replica", "under_replicated", "offline") if getattr(r, k)}
    assert got == kinds
    if name.startswith("broker without"):
        assert r.unknown_rack_brokers == {9}


def test_internal_topics_and_single_replicas_can_be_left_out() -> None:
    internal = PartitionPlacement("__consumer_offsets", 0, 1, (1,), (1,), internal=True)
    assert spread([internal], RACKS, RackConfig()).single_replica == {}
    assert spread([internal], RACKS, RackConfig(include_internal=True)).single_replica == {
        "__consumer_offsets": [0]
    }
    assert spread([pp((2,))], RACKS, RackConfig(single_replica_is_finding=False)).single_replica == {}


def wait_full_isr(admin, topics: list[str]) -> None:
    """New followers need a moment (longer on a busy machine) before they join the ISR."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            described = admin.describe_topics(topics)
            parts = [p for t in described for p in t.get("partitions", [])]
            if (
                len(described) == len(topics)
                and parts
                and all(len(p["isr_nodes"]) == len(p["replica_nodes"]) for p in parts)
            ):
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise AssertionError(f"ISR of {topics} did not fill within 60 s")


@pytest.mark.cluster
def test_rack_findings_on_the_real_cluster(cluster3: ClusterState, admin, topic_name: str) -> None:
    one = topic_name + "-rf1"
    pair = topic_name + "-pair"
    spread3 = topic_name + "-rf3"
    admin.create_topics(
        [
            NewTopic(one, 2, 1),
            NewTopic(pair, replica_assignments={0: [1, 2], 1: [2, 3]}),
            NewTopic(spread3, 3, 3),
        ]
    )
    wait_full_isr(admin, [one, pair, spread3])
    # Brokers 1 and 2 are in racks a and b; say they share a rack, as if both sat under one switch.
    watch = RackWatch(RackConfig(racks={2: "rack-a"}), "test", "i1")

    def snapshot() -> PassResult:
        return PassResult(
            ts_s=time.time(), topics=admin.describe_topics(), brokers=admin.describe_cluster()["brokers"]
        )

    findings = {(f.rule, f.subject): f for f in watch.update(snapshot()) if topic_name in f.subject}
    assert set(findings) == {("single_replica", f"topic:{one}"), ("rack_spread", f"topic:{pair}")}
    f = findings[("rack_spread", f"topic:{pair}")]
    assert f.evidence["partitions"] == [0] and f.evidence["rack_of_partition"] == {"0": "rack-a"}
    assert findings[("single_replica", f"topic:{one}")].evidence["count"] == 2
    # Nothing changed: nothing new is said.
    assert [f for f in watch.update(snapshot()) if topic_name in f.subject] == []
    admin.delete_topics([pair])
    time.sleep(1.0)
    closed = [f for f in watch.update(snapshot()) if topic_name in f.subject]
    assert [(f.rule, f.active) for f in closed] == [("rack_spread", False)]
