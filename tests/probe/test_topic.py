"""The probe topic's plan as a table: create, brokers joining and leaving, leadership drift,
duplicates, no-op rows (settled topic, reassignment in progress)."""

from __future__ import annotations

import pytest

from probe.topic import NO_LEADER, Plan, TopicView, plan, replicas_for


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
