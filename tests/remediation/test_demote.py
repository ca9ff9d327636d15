"""``demote_leadership``'s plans and undo, pure: table rows over inline cluster views (including
rows that must change nothing), and the undo after every prefix of a plan that took effect."""

from __future__ import annotations

from typing import Any

import pytest

from remediation.base import Plan
from remediation.demote import DemoteConfig, DemoteLeadershipRemediation
from remediation.view import ClusterView, PartitionState
from tests.remediation.kit import finding

BROKERS = {1: None, 2: None, 3: None}
# Partition -> replicas (first = preferred = leader); broker 2 prefers 1, follows 0 and 2.
RF3 = {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}


def view(
    replicas: dict[int, tuple[int, ...]] = RF3,
    *,
    isr: dict[int, tuple[int, ...]] | None = None,
    min_insync: int | None = 2,
    reassigning: tuple[int, ...] = (),
) -> ClusterView:
    parts = {("t", p): PartitionState("t", p, r, (isr or {}).get(p, r), r[0]) for p, r in replicas.items()}
    return ClusterView(
        brokers=dict(BROKERS),
        partitions=parts,
        min_insync={"t": min_insync} if min_insync is not None else {},
        reassigning={("t", p): {"adding": [], "removing": []} for p in reassigning},
    )


def remediation(**settings: Any) -> DemoteLeadershipRemediation:
    return DemoteLeadershipRemediation(DemoteConfig(**settings))


def moves(plan: Plan, kind: str) -> dict[int, list[int]]:
    return {m["partition"]: m["to"] for s in plan.steps if s.kind == kind for m in s.params["moves"]}


def elected(plan: Plan) -> list[int]:
    return [p for s in plan.steps if s.kind == "elect" for _, p in s.params["partitions"]]


# (name, settings, view arguments, reorders, elections, drops)
ROWS: list[tuple[str, dict[str, Any], dict[str, Any], dict, list, dict]] = [
    ("keep: leadership only", {}, {}, {1: [3, 1, 2]}, [1], {}),
    (
        "drop: out of every replica set, the one it led reordered first",
        {"followers": "drop"},
        {},
        {1: [3, 1, 2]},
        [1],
        {0: [1, 3], 1: [3, 1], 2: [3, 1]},
    ),
    # No false change: a set that would go below min.insync.replicas keeps the broker.
    (
        "drop: min.insync.replicas 3 keeps every set",
        {"followers": "drop"},
        {"min_insync": 3},
        {1: [3, 1, 2]},
        [1],
        {},
    ),
    (
        "drop: min_replicas_left 3 keeps every set",
        {"followers": "drop", "min_replicas_left": 3},
        {},
        {1: [3, 1, 2]},
        [1],
        {},
    ),
    # Unknown min.insync.replicas: assumed to forbid any shrink.
    (
        "drop: unknown min.insync.replicas keeps every set",
        {"followers": "drop"},
        {"min_insync": None},
        {1: [3, 1, 2]},
        [1],
        {},
    ),
    (
        "drop: an under-replicated partition is left alone",
        {"followers": "drop"},
        {"isr": {0: (1, 3)}},
        {1: [3, 1, 2]},
        [1],
        {1: [3, 1], 2: [3, 1]},
    ),
    (
        "drop: a partition being reassigned keeps the broker",
        {"followers": "drop"},
        {"reassigning": (2,)},
        {1: [3, 1, 2]},
        [1],
        {0: [1, 3], 1: [3, 1]},
    ),
    (
        "drop: a two-replica set is never shrunk to one",
        {"followers": "drop"},
        {"replicas": {0: (1, 2), 1: (2, 3)}, "min_insync": 1},
        {1: [3, 2]},
        [1],
        {},
    ),
]


@pytest.mark.parametrize(
    ("settings", "args", "reorders", "elections", "drops"),
    [pytest.param(*row[1:], id=row[0]) for row in ROWS],
)
def test_plan_rows(settings: dict, args: dict, reorders: dict, elections: list, drops: dict) -> None:
    plan = remediation(**settings).plan(finding("slow_broker", "broker:2"), view(**args))
    assert moves(plan, "reorder") == reorders
    assert elected(plan) == elections
    assert moves(plan, "drop") == drops
    assert plan.demotes == (2,)
    # Steps in order: leadership moves before any replica set shrinks.
    assert [s.kind for s in plan.steps] == [
        k for k in ("reorder", "elect", "drop") if k in {s.kind for s in plan.steps}
    ]


def test_a_broker_that_only_follows_is_left_alone_unless_followers_are_dropped() -> None:
    follows = {0: (1, 2, 3), 2: (3, 1, 2)}
    assert remediation().plan(finding("slow_broker", "broker:2"), view(follows)).steps == ()
    plan = remediation(followers="drop").plan(finding("slow_broker", "broker:2"), view(follows))
    assert [s.kind for s in plan.steps] == ["drop"] and moves(plan, "drop") == {0: [1, 3], 2: [3, 1]}


def apply(v: ClusterView, plan: Plan, upto: int) -> ClusterView:
    """The view after the first ``upto`` steps of ``plan`` took effect (reassignments only)."""
    replicas = {p: s.replicas for (_, p), s in v.partitions.items()}
    for step in plan.steps[:upto]:
        for m in step.params.get("moves", []):
            replicas[m["partition"]] = tuple(m["to"])
    return view(replicas)


def as_action(plan: Plan) -> dict[str, Any]:
    return {"id": plan.id, "subject": plan.subject, "plan": plan.to_dict()}


@pytest.mark.parametrize("followers", ["keep", "drop"])
def test_undo_after_any_prefix_puts_back_the_exact_replica_lists(followers: str) -> None:
    rem = remediation(followers=followers)
    before = view()
    plan = rem.plan(finding("slow_broker", "broker:2"), before)
    for upto in range(len(plan.steps) + 1):
        during = apply(before, plan, upto)
        undo = rem.undo(as_action(plan), during)
        after = apply(during, undo, len(undo.steps))
        assert {k: s.replicas for k, s in after.partitions.items()} == {
            k: s.replicas for k, s in before.partitions.items()
        }, (followers, upto)
        # A restore that brings the broker back waits for it in the ISR, so longer.
        rejoin = any(set(m["to"]) - set(m["from"]) for s in undo.steps for m in s.params.get("moves", []))
        deadlines = {s.kind: s.deadline_s for s in undo.steps}
        if undo.steps:
            assert deadlines["reorder"] == (600.0 if rejoin else 60.0)
        assert rejoin == (followers == "drop" and upto == len(plan.steps))


def test_undo_leaves_a_set_someone_else_changed_since() -> None:
    rem = remediation(followers="drop")
    plan = rem.plan(finding("slow_broker", "broker:2"), view())
    changed = view({0: (1, 3, 4), 1: (3, 1), 2: (3, 1)})  # partition 0 moved by an operator
    undo = rem.undo(as_action(plan), changed)
    assert sorted(moves(undo, "reorder")) == [1, 2]


def test_a_rejoined_broker_is_done_only_once_back_in_sync() -> None:
    rem = remediation(followers="drop")
    plan = rem.plan(finding("slow_broker", "broker:2"), view())
    undo = rem.undo(as_action(plan), apply(view(), plan, len(plan.steps)))
    step = undo.steps[0]
    catching_up = view({0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}, isr={0: (1, 3), 1: (3, 1), 2: (3, 1)})
    assert not rem.verify(step, catching_up)
    assert rem.verify(step, view())
    assert not rem.verify(step, view(reassigning=(0,)))


def test_followers_setting_is_validated() -> None:
    with pytest.raises(ValueError, match="followers"):
        DemoteConfig(followers="remove")
    with pytest.raises(ValueError, match="min_replicas_left"):
        DemoteConfig(min_replicas_left=0)
