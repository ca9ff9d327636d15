"""The key sampler keeps the keys' proportions when it falls behind.

A fetch drains one partition before the next, so a sampler that reads only part of a backlog
used to count the first partitions' keys and not the hottest one's. It now skips ahead by the
same share of every partition's backlog (``catch_up_skips``): the property tests hold the
arithmetic, the real-broker tests the proportions read back from a skewed topic.
"""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.key_sampler import KeySampler, catch_up_skips

backlogs = st.dictionaries(st.integers(0, 20), st.integers(0, 10**9), max_size=12)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(backlogs, st.integers(0, 10**7))
def test_skips_leave_at_most_the_budget_in_proportion(backlog: dict[int, int], budget: int) -> None:
    skips = catch_up_skips(backlog, budget)
    total = sum(backlog.values())
    left = {p: n - skips.get(p, 0) for p, n in backlog.items()}
    assert all(0 <= skips.get(p, 0) <= n for p, n in backlog.items())
    assert set(skips) <= set(backlog)
    if total <= budget:
        assert skips == {}
        return
    assert sum(left.values()) <= budget
    # Every partition keeps the same share of its backlog, to one record.
    share = budget / total
    assert all(abs(left[p] - n * share) < 1 for p, n in backlog.items())


@pytest.mark.parametrize(
    ("backlog", "budget", "skips"),
    [
        ({0: 4000, 1: 1000}, 500, {0: 3600, 1: 900}),  # behind: a tenth of each is read
        ({0: 300, 1: 100}, 500, {}),  # not behind: nothing skipped
        ({0: 0, 1: 1000}, 100, {1: 900}),  # an idle partition is left alone
        ({0: 3, 1: 3, 2: 3}, 0, {0: 3, 1: 3, 2: 3}),  # no budget: everything skipped
    ],
)
def test_skips_table(backlog: dict[int, int], budget: int, skips: dict[int, int]) -> None:
    assert catch_up_skips(backlog, budget) == skips


def _skewed_topic(bootstrap: str, per_partition: dict[int, tuple[str, int]]) -> str:
    """A topic whose partition p holds ``n`` records of one key, for ``p: (key, n)``."""
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic

    topic = f"keys-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, len(per_partition), 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1)
    for p, (key, n) in per_partition.items():
        for i in range(n):
            producer.send(topic, key=key.encode(), value=b"%d" % i, partition=p)
    producer.flush(60)
    producer.close()
    return topic


def _counts(sampler: KeySampler, topic: str) -> dict[str, int]:
    return {str(k): c for k, c in sampler.counters[topic].frequent()}


@pytest.mark.cluster
def test_a_sampler_behind_counts_keys_in_their_proportions(cluster3) -> None:
    topic = _skewed_topic(cluster3.bootstrap, {0: ("hot", 4000), 1: ("warm", 1000), 2: ("cool", 500)})
    sampler = KeySampler(cluster3.bootstrap, [topic], max_records=550, from_beginning=True, max_poll_s=30.0)
    try:
        read, deadline = 0, time.monotonic() + 60
        while read < 550 and time.monotonic() < deadline:
            read += sampler.poll()
    finally:
        sampler.close()
    counts = _counts(sampler, topic)
    # A tenth of every partition's backlog: 400, 100 and 50 records (drained in turn, the first
    # partition alone would have filled the 550).
    assert counts == {"hot": 400, "warm": 100, "cool": 50}
    assert read == 550 and sampler.skipped == 5500 - 550


@pytest.mark.cluster
def test_a_sampler_not_behind_reads_everything(cluster3) -> None:
    topic = _skewed_topic(cluster3.bootstrap, {0: ("hot", 800), 1: ("warm", 200)})
    sampler = KeySampler(
        cluster3.bootstrap, [topic], max_records=20_000, from_beginning=True, max_poll_s=30.0
    )
    try:
        read, deadline = 0, time.monotonic() + 60
        while read < 1000 and time.monotonic() < deadline:
            read += sampler.poll()
    finally:
        sampler.close()
    assert read == 1000 and sampler.skipped == 0
    assert _counts(sampler, topic) == {"hot": 800, "warm": 200}
