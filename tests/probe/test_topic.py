"""The probe topic's plan as a table: create, brokers joining and leaving, leadership drift,
duplicates, no-op rows (settled topic, reassignment in progress)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probe.topic import NO_LEADER, Plan, TopicView, owners, plan, replicas_for


def view(brokers, replicas, leaders=None, reassigning=False) -> TopicView:
    leaders = leaders if leaders is not None else {p: r[0] for p, r in replicas.items()}
    return TopicView(tuple(brokers), {p: tuple(r) for p, r in replicas.items()}, leaders, reassigning)


# (id, view, replication factor, expected plan)
CASES = [
    ("no topic yet: one partition per broker", view([1, 2, 3], {}), 1, Plan(create=((1,), (2,), (3,)))),
    (
        "no topic yet, rf 2: followers are the next brokers",
        view([1, 2, 3], {}),
        2,
        Plan(create=((1, 2), (2, 3), (3, 1))),
    ),
    ("settled: nothing to do", view([1, 2, 3], {0: [1], 1: [2], 2: [3]}), 1, Plan()),
    (
        "broker 4 joins: a partition is created for it",
        view([1, 2, 3, 4], {0: [1], 1: [2], 2: [3]}),
        1,
        Plan(create=((4,),)),
    ),
    (
        "leadership drifted: preferred leader elected back",
        view([1, 2, 3], {0: [1, 2], 1: [2, 3], 2: [3, 1]}, {0: 1, 1: 3, 2: 3}),
        2,
        Plan(elect=(1,)),
    ),
    (
        "broker 2 left, rf 2: its partition (led by 3 now) goes to the joining broker 4",
        view([1, 3, 4], {0: [1, 2], 1: [2, 3], 2: [3, 1]}, {0: 1, 1: 3, 2: 3}),
        2,
        Plan(reassign={1: (4, 1)}),
    ),
    (
        "broker 2 left, rf 1: its partition is offline; broker 4 gets a new one",
        view([1, 3, 4], {0: [1], 1: [2], 2: [3]}, {0: 1, 1: NO_LEADER, 2: 3}),
        1,
        Plan(create=((4,),)),
    ),
    (
        "broker 2 left and nobody joined: nothing to do (no broker lacks a partition)",
        view([1, 3], {0: [1, 2], 1: [2, 3], 2: [3, 1]}, {0: 1, 1: 3, 2: 3}),
        2,
        Plan(),
    ),
    (
        "two partitions prefer broker 1, broker 3 has none: the duplicate moves to 3",
        view([1, 2, 3], {0: [1], 1: [2], 2: [1]}),
        1,
        Plan(reassign={2: (3,)}),
    ),
    (
        "reassignment in progress: wait",
        view([1, 2, 3, 4], {0: [1], 1: [2], 2: [3]}, reassigning=True),
        1,
        Plan(),
    ),
    ("no live broker known: nothing", view([], {0: [1]}), 1, Plan()),
    (
        "preferred leader gone: the partition is reused for broker 3, never elected back to 2",
        view([1, 3], {0: [1, 2], 1: [2, 1]}, {0: 1, 1: 1}),
        2,
        Plan(reassign={1: (3, 1)}),
    ),
]


@pytest.mark.parametrize(("v", "rf", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_plan(v: TopicView, rf: int, expected: Plan) -> None:
    assert plan(v, rf) == expected


def test_replicas_wrap_and_shrink_to_the_cluster() -> None:
    assert replicas_for(3, [1, 2, 3], 3) == (3, 1, 2)
    assert replicas_for(2, [2], 3) == (2,)


def test_plan_describes_itself() -> None:
    p = Plan(create=((4,),), reassign={1: (5, 1)}, elect=(0,))
    assert p.describe() == "probe topic: create [4]; reassign 1->[5, 1]; elect preferred leaders of 0"
    assert Plan().describe() == "probe topic: nothing to do"


def _applied(v: TopicView, p: Plan) -> TopicView:
    """The cluster after a plan has completed: new and moved partitions led by their first replica,
    elected ones by their preferred leader."""
    replicas = dict(v.replicas)
    leaders = dict(v.leaders)
    for r in p.create:
        n = len(replicas)
        replicas[n], leaders[n] = r, r[0]
    for part, r in p.reassign.items():
        replicas[part], leaders[part] = r, r[0]
    for part in p.elect:
        leaders[part] = replicas[part][0]
    return TopicView(v.brokers, replicas, leaders)


_brokers = st.sets(st.integers(1, 8), min_size=1, max_size=6)


@st.composite
def views(draw: st.DrawFn) -> tuple[TopicView, int]:
    live = sorted(draw(_brokers))
    known = sorted(set(live) | draw(st.sets(st.integers(1, 8), max_size=3)))  # some have left
    rf = draw(st.integers(1, 3))
    n = draw(st.integers(0, 8))
    replicas, leaders = {}, {}
    for part in range(n):
        reps = tuple(draw(st.lists(st.sampled_from(known), min_size=1, max_size=rf, unique=True)))
        online = [b for b in reps if b in live]
        replicas[part] = reps
        leaders[part] = draw(st.sampled_from(online)) if online else NO_LEADER
    return TopicView(tuple(live), replicas, leaders), rf


@settings(max_examples=300, deadline=None, derandomize=True)
@given(views())
def test_one_plan_settles_the_topic(case: tuple[TopicView, int]) -> None:
    """Whatever the topic looks like, after its plan every live broker owns one partition and
    leads it, and planning again does nothing."""
    v, rf = case
    after = _applied(v, plan(v, rf))
    own = owners(after)
    assert set(own) == set(v.brokers)
    assert all(after.leaders[p] == b for b, p in own.items())
    assert plan(after, rf) == Plan()
