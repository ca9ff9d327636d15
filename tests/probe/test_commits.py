"""Which broker coordinates a group (Java's String.hashCode, Kafka's Utils.abs), and the choice of
one probe group per coordinator broker: tables and a Hypothesis property; the commit metrics."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from probe.commits import CommitWindow, coordinator_partition, java_string_hash, pick_groups
from probe.metrics import ProbeMetrics

HASHES = [  # values of Java's "…".hashCode()
    ("", 0),
    ("hello", 99162322),
    ("Aa", 2112),
    ("BB", 2112),
    ("polygenelubricants", -(1 << 31)),  # Integer.MIN_VALUE: Utils.abs makes it 0
    ("linkwatch.probe.commit", java_string_hash("linkwatch.probe.commit")),
    ("\U0001f600", 1772899),  # one code point, two UTF-16 units
    ("é", 233),
]


@pytest.mark.parametrize(("s", "h"), HASHES)
def test_java_string_hash(s: str, h: int) -> None:
    assert java_string_hash(s) == h


def test_coordinator_partition_follows_utils_abs() -> None:
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert coordinator_partition("hello", 50) == 99162322 % 50
    negative = "linkwatch.probe.commit.host-1.0"
    assert java_string_hash(negative) < 0
    assert coordinator_partition(negative, 12) == abs(java_string_hash(negative)) % 12


LEADERS = {p: p % 3 + 1 for p in range(12)}  # 12 partitions led round-robin by brokers 1-3


@pytest.mark.parametrize(
    ("leaders", "brokers", "current", "expected_brokers", "kept"),
    [
        (LEADERS, [1, 2, 3], None, {1, 2, 3}, set()),
        ({p: 1 if p < 6 else 2 for p in range(12)}, [1, 2, 3], None, {1, 2}, set()),  # 3 leads nothing
        (LEADERS, [1, 3], None, {1, 3}, set()),  # broker 2 not live
        ({}, [1, 2, 3], None, set(), set()),  # no __consumer_offsets yet
        ({p: -1 for p in range(12)}, [1, 2, 3], None, set(), set()),  # leaderless
    ],
)
def test_pick_groups(leaders, brokers, current, expected_brokers, kept) -> None:
    groups = pick_groups("p.i", leaders, brokers, current)
    assert set(groups) == expected_brokers
    for b, g in groups.items():
        assert leaders[coordinator_partition(g, len(leaders))] == b


def test_a_group_is_kept_while_its_coordinator_stays_and_repicked_when_it_moves() -> None:
    first = pick_groups("p.i", LEADERS, [1, 2, 3])
    assert pick_groups("p.i", LEADERS, [1, 2, 3], {b: g for b, g in first.items()}) == first
    moved = dict(LEADERS)
    moved[coordinator_partition(first[2], 12)] = 1  # broker 2's group now coordinated by broker 1
    again = pick_groups("p.i", moved, [1, 2, 3], first)
    assert again[1] == first[1] and again[3] == first[3]
    assert again[2] != first[2] and moved[coordinator_partition(again[2], 12)] == 2


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    st.integers(1, 60).flatmap(lambda n: st.lists(st.integers(-1, 8), min_size=n, max_size=n)),
    st.sets(st.integers(0, 8), max_size=9),
)
def test_every_live_coordinator_gets_a_group_it_coordinates(leader_list, live) -> None:
    leaders = dict(enumerate(leader_list))
    groups = pick_groups("x", leaders, live)
    assert set(groups) == set(leader_list) & live
    assert all(leaders[coordinator_partition(g, len(leaders))] == b for b, g in groups.items())
    assert len(set(groups.values())) == len(groups)


def test_commit_metrics_by_coordinator_broker() -> None:
    metrics = ProbeMetrics("c1")
    w1, w2 = CommitWindow(1), CommitWindow(2)
    for ms in (2.0, 3.0, 40.0):
        w1.latency.add(ms)
    w1.ok = 3
    w2.errors["NotCoordinatorError"] += 2
    metrics.update_commits({1: w1, 2: w2})
    metrics.update_commits({1: w1})
    registry = CollectorRegistry()
    registry.register(metrics)
    text = generate_latest(registry).decode()
    assert 'linkwatch_probe_commits_total{broker="1",cluster="c1"} 6.0' in text
    assert (
        'linkwatch_probe_commit_errors_total{broker="2",cluster="c1",reason="NotCoordinatorError"} 2.0'
        in text
    )
    p100 = registry.get_sample_value(
        "linkwatch_probe_commit_latency_seconds", {"cluster": "c1", "broker": "1", "quantile": "1.0"}
    )
    assert p100 == pytest.approx(0.040, rel=0.02)
    assert 'linkwatch_probe_commit_latency_seconds{broker="2"' not in text  # no success in its last window
