"""A group committed on many partitions (CI size: 1,000; the 10,000-partition run is
``bench/lag_big_group.py``, figures in ``bench/results/lag.md``): the pass completes with every
partition evaluated, per-item faults mid-pass (topic deleted, group deleted, offsets past the
end) are reported per item, and the state kept between passes is capped by ``max_partitions``."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from lag.collector import CollectorConfig, LagCollector
from lag.outputs import lag_records
from lag.rules import Status
from testbed.cluster import ClusterState
from testbed.faults import DeleteMidPass
from tests.lag.lagkit import commit, make_topic

pytestmark = pytest.mark.cluster
PARTITIONS, GONE, BEYOND = 1000, 20, 7


@pytest.fixture
def big_topic(cluster3: ClusterState, admin: KafkaAdminClient, topic_name: str) -> Iterator[str]:
    make_topic(admin, topic_name, partitions=PARTITIONS)
    yield topic_name
    admin.delete_topics([topic_name])  # 1,000 partitions would slow every later metadata call


def test_pass_over_a_group_of_1000_partitions_with_faults_mid_pass(
    cluster3: ClusterState, admin: KafkaAdminClient, big_topic: str, group_name: str
) -> None:
    gone = make_topic(admin, big_topic + "-gone", partitions=GONE)
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, linger_ms=50)
    for p in range(PARTITIONS):
        for _ in range(3):
            producer.send(big_topic, b"v", partition=p)
    producer.flush()
    producer.close()
    tps = [TopicPartition(big_topic, p) for p in range(PARTITIONS)]
    offsets = {tp: 1 for tp in tps} | {TopicPartition(gone, p): 0 for p in range(GONE)}
    offsets |= {tp: 500 for tp in tps[:BEYOND]}  # past the end (3): clamped and counted
    commit(admin, group_name, offsets)
    vanishing = group_name + "-vanishing"
    commit(admin, vanishing, {tps[0]: 1})
    faulty = DeleteMidPass(admin, [gone], [vanishing])
    collector = LagCollector(
        faulty, None, CollectorConfig(include=[f"^{group_name}$", f"^{vanishing}$"], max_timestamp_reads=0)
    )
    started = time.monotonic()
    result = collector.run_pass()
    took = time.monotonic() - started
    assert faulty.groups_done and faulty.topics_done
    g = result.groups[group_name]
    by_status = Counter(p.verdict.status for p in g.partitions)
    assert len(g.partitions) == PARTITIONS + GONE, result.errors
    assert by_status == {Status.OK: PARTITIONS, Status.ERR: GONE}, by_status
    errs = [p for p in g.partitions if p.verdict.status is Status.ERR]
    assert {p.topic for p in errs} == {gone}
    assert all("does not exist (topic deleted?)" in p.verdict.reason for p in errs), errs[0].verdict.reason
    assert (
        g.verdict.status is Status.ERR
        and f"ERR on {GONE} of {PARTITIONS + GONE} partitions" in g.verdict.reason
    )
    ok = [p for p in g.partitions if p.topic == big_topic]
    assert sum(p.lag_messages for p in ok) == (PARTITIONS - BEYOND) * 2
    assert result.clamped == BEYOND
    assert result.groups[vanishing].verdict.status is Status.ERR
    assert "group deleted during the pass" in result.groups[vanishing].verdict.reason
    assert result.errors == [] and result.admin_calls <= 8, (result.errors, result.admin_calls)
    assert len(list(lag_records(result, "t", "t"))) == PARTITIONS + GONE
    assert collector.tracked_partitions == PARTITIONS + GONE
    # The next pass forgets the deleted topic's partitions; the vanished group is gone.
    again = collector.run_pass()
    assert len(again.groups[group_name].partitions) == PARTITIONS and vanishing not in again.groups
    assert collector.tracked_partitions == PARTITIONS
    print(
        f"pass over {PARTITIONS + GONE} partitions with faults: {took:.1f}s, {result.admin_calls} admin calls"
    )

    # Bounded: a collector capped at 600 pairs evaluates 600, says so, and keeps no more state.
    capped = LagCollector(admin, None, CollectorConfig(include=[f"^{group_name}$"], max_partitions=600))
    for _ in range(2):
        res = capped.run_pass()
        assert len(res.groups[group_name].partitions) == 600
        assert res.errors == [f"group {group_name}: partition budget 600 spent"]
        assert capped.tracked_partitions == 600


class StaleMetadata(DeleteMidPass):
    """:class:`DeleteMidPass` deleting ``topics`` (its committed offsets are read first: the
    coordinator drops a deleted topic's offsets), with ``describe_topics`` answering with the
    metadata read before the deletion: what the collector sees when the broker it asks has not
    yet applied a deletion that the partition leaders already know of (the race the pass above
    can meet)."""

    def __init__(self, admin: KafkaAdminClient, topics: list[str]) -> None:
        super().__init__(admin, topics, [])
        self._stale = admin.describe_topics()

    def describe_topics(self, *a, **kw) -> list[dict]:
        return self._stale


def test_a_topic_deleted_behind_stale_metadata_is_reported_as_deleted(
    admin: KafkaAdminClient, topic_name: str, group_name: str
) -> None:
    kept, gone = (
        make_topic(admin, topic_name, partitions=2),
        make_topic(admin, topic_name + "-gone", partitions=3),
    )
    commit(admin, group_name, {TopicPartition(t, p): 0 for t, n in ((kept, 2), (gone, 3)) for p in range(n)})
    stale = StaleMetadata(admin, [gone])
    assert gone in {t["name"] for t in stale.describe_topics()}
    collector = LagCollector(stale, None, CollectorConfig(include=[f"^{group_name}$"], max_timestamp_reads=0))
    g = collector.run_pass().groups[group_name]
    assert stale.topics_done
    reasons = {(p.topic, p.partition): (p.verdict.status, p.verdict.reason) for p in g.partitions}
    assert {k: s for k, (s, _) in reasons.items()} == {
        **{(kept, p): Status.OK for p in range(2)},
        **{(gone, p): Status.ERR for p in range(3)},
    }
    assert all(
        r == f"topic-partition {gone}-{p} does not exist (topic deleted?)"
        for (t, p), (_, r) in reasons.items()
        if t == gone
    ), reasons
    admin.delete_topics([kept])
