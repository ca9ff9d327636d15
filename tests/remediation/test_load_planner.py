"""The load-balance planner (``rebalance_load``) on inline cluster views: no-move rows, H1, H2,
H3 after the hold time only, rack spread, and a Hypothesis property on the factor."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkwatch.records import Finding
from remediation.base import PlanError
from remediation.load import (
    RebalanceLoadConfig,
    RebalanceLoadRemediation,
    plan_h1,
    revert_due,
    state_of,
)
from remediation.view import ClusterView, PartitionState, ReplicaDir

RACKS = {1: "a", 2: "b", 3: "c"}


def view(
    assign: dict[int, list[int]],
    leaders: dict[int, int] | None = None,
    *,
    brokers: dict[int, str | None] | None = None,
    size: int = 1000,
    topic: str = "t",
) -> ClusterView:
    leaders = leaders or {p: r[0] for p, r in assign.items()}
    parts = {(topic, p): PartitionState(topic, p, tuple(r), tuple(r), leaders[p]) for p, r in assign.items()}
    reps = [ReplicaDir(b, "/d", topic, p, size) for p, r in assign.items() for b in r]
    return ClusterView(brokers=brokers or dict(RACKS), partitions=parts, replicas=reps)


def skew(loads: dict[int, float], ratios: tuple[float, ...] = (2.0, 2.0, 2.0), **extra: Any) -> Finding:
    return Finding(
        cluster="c",
        source="analyzer",
        ts_ms=0,
        rule="skewed_partitions",
        subject="topic:t",
        severity="warning",
        summary="",
        evidence={
            "topic": "t",
            "values": {"bytes_in": {"ratio": list(ratios), "loads": {str(p): v for p, v in loads.items()}}},
            "baseline": {"bytes_in": {"avg": 0.0, "max_imbalance": 1.0}},
            "hot_keys": [{"key": "k1", "count": 900, "share": 0.9, "n": 1000}],
            **extra,
        },
        action="",
    )


def rem(**cfg: Any) -> RebalanceLoadRemediation:
    return RebalanceLoadRemediation(RebalanceLoadConfig(**cfg))


# Six partitions, RF 3, replicas spread over the three racks.
SPREAD = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(6)}
ALL_ON_1 = {p: 1 for p in range(6)}  # every leader on broker 1
EVEN = dict.fromkeys(range(6), 1e5)


@pytest.mark.parametrize(
    ("name", "v", "finding", "why"),
    [
        ("balanced cluster", view(SPREAD), skew(EVEN), "balanced"),
        ("one noisy window", view(SPREAD, ALL_ON_1), skew(EVEN, ratios=(0.1, 2.0, 0.2)), "noisy"),
        ("low traffic", view(SPREAD, ALL_ON_1), skew(dict.fromkeys(range(6), 10.0)), "low traffic"),
    ],
)
def test_no_move_rows(name: str, v: ClusterView, finding: Finding, why: str) -> None:
    plan = rem().plan(finding, v)
    assert plan.steps == (), name
    assert why in plan.reason


def test_h1_leadership_first_and_enough() -> None:
    plan = rem().plan(skew(EVEN), view(SPREAD, ALL_ON_1))
    assert plan.steps and all(s.kind == "lead" for s in plan.steps)  # no bytes when leaders suffice
    assert plan.steps[-1].params["factor_after"] <= 0.25
    factors = [s.params["factor_after"] for s in plan.steps]
    assert factors == sorted(factors, reverse=True)
    assert all(s.params["bytes"] == 0 for s in plan.steps)
    assert "propose" not in {s.kind for s in plan.steps}


def test_h1_replica_move_fewest_bytes_when_leadership_cannot() -> None:
    # RF 1: every partition lives only on broker 1; only replica moves help; one is larger.
    assign = {p: [1] for p in range(6)}
    v = view(assign)
    v.replicas = [ReplicaDir(1, "/d", "t", p, 5000 if p == 0 else 1000) for p in range(6)]
    plan = rem().plan(skew(EVEN), v)
    assert plan.steps and all(s.kind == "move" for s in plan.steps)
    assert 0 not in {s.params["partition"] for s in plan.steps}  # the 5000-byte replica stays
    assert plan.steps[-1].params["factor_after"] <= 0.25


def test_h2_when_one_partition_is_too_hot() -> None:
    loads = {0: 1e6, **{p: 1e4 for p in range(1, 6)}}
    plan = rem().plan(skew(loads), view(SPREAD, ALL_ON_1))
    proposal = [s for s in plan.steps if s.kind == "propose"]
    assert len(proposal) == 1 and plan.steps[-1].kind == "propose"
    p = proposal[0].params
    assert p["hot_partition"] == 0 and p["partitions_proposed"] > 6
    assert p["partitions_proposed"] % 3 == 0 and p["hot_keys"] == ["k1"]
    assert "SkewAwarePartitioner" in p["partitioner"]
    assert "H2" in plan.reason


def test_h2_not_proposed_when_h1_suffices() -> None:
    plan = rem().plan(skew(EVEN), view(SPREAD, ALL_ON_1))
    assert all(s.kind != "propose" for s in plan.steps)


def test_rack_spread_never_broken() -> None:
    # RF 2 on racks a/b; broker 4 is in rack a too: moving the b-replica there would put both in a.
    brokers = {1: "a", 2: "b", 3: "c", 4: "a"}
    assign = {p: [1, 2] for p in range(4)}
    v = view(assign, brokers=brokers)
    plan = rem(max_steps=20).plan(skew(dict.fromkeys(range(4), 1e5)), v)
    assert plan.steps
    state = {p: list(r) for p, r in assign.items()}
    for s in plan.steps:
        state[s.params["partition"]] = s.params["after"]
    for p, reps in state.items():
        racks = [brokers[b] for b in reps]
        assert len(set(racks)) == len(racks), (p, reps)


@pytest.mark.parametrize(
    ("healthy_since", "now", "due"),
    [(None, 10_000.0, False), (1000.0, 1000.0 + 1799, False), (1000.0, 1000.0 + 1800, True)],
)
def test_h3_after_hold_time_only(healthy_since: float | None, now: float, due: bool) -> None:
    assert revert_due(healthy_since, now, 1800.0) is due


def _action(statuses: list[str], status: str = "done") -> dict[str, Any]:
    """A persisted rebalance_load action as the remediator stores it: plan, then per-step status."""
    plan = rem().plan(skew(EVEN), view(SPREAD, ALL_ON_1)).to_dict()
    plan["steps"] = plan["steps"][: len(statuses)]
    return {
        "id": "a1",
        "subject": "topic:t",
        "status": status,
        "plan": plan,
        "steps": [{"status": s} for s in statuses],
    }


PROPOSE_ONLY = {
    "id": "a2",
    "subject": "topic:t",
    "status": "done",
    "plan": {"steps": [{"kind": "propose", "subject": "topic:t", "params": {}, "deadline_s": 1.0}]},
    "steps": [{"status": "done"}],
}
GONE_AT = 1000.0


@pytest.mark.parametrize(
    ("name", "action", "healthy_since", "now", "due"),
    [
        ("still skewed: never, however long ago it was applied", _action(["done", "done"]), None, 1e9, False),
        ("skew gone, hold not over", _action(["done", "done"]), GONE_AT, GONE_AT + 1799, False),
        ("skew gone for the hold time", _action(["done", "done"]), GONE_AT, GONE_AT + 1800, True),
        ("partly applied, then abandoned", _action(["done", "abandoned"], "abandoned"), GONE_AT, 1e9, True),
        ("nothing applied", _action(["abandoned"], "abandoned"), GONE_AT, 1e9, False),
        ("a proposal only (H2): nothing to revert", PROPOSE_ONLY, GONE_AT, 1e9, False),
    ],
)
def test_h3_triggers_itself_from_the_persisted_action(
    name: str, action: dict[str, Any], healthy_since: float | None, now: float, due: bool
) -> None:
    asked: list[str] = []

    def since(subject: str) -> float | None:
        asked.append(subject)
        return healthy_since

    assert rem(hold_s=1800).revert_due(action, since, now) is due, name
    assert set(asked) <= {"topic:t"}  # the topic the action answered, nothing else


def test_h3_undo_reverts_only_what_is_still_ours() -> None:
    r = rem()
    plan = r.plan(skew(EVEN), view(SPREAD, ALL_ON_1))
    action = {"id": "a1", "subject": "topic:t", "plan": plan.to_dict()}
    after = {p: list(SPREAD[p]) for p in SPREAD}
    for s in plan.steps:
        after[s.params["partition"]] = s.params["after"]
    moved = sorted(s.params["partition"] for s in plan.steps)
    after[moved[0]] = list(SPREAD[moved[0]])[::-1]  # an operator changed this one since
    undo = r.undo(action, view(after))
    assert sorted(s.params["partition"] for s in undo.steps) == moved[1:]
    for s in undo.steps:
        assert s.params["after"] == list(SPREAD[s.params["partition"]])


@pytest.mark.parametrize(
    ("evidence", "error"),
    [
        ({}, "needs a skewed_partitions finding"),
        ({"topic": "t", "values": {"size": {"loads": {}}}}, "bytes_in loads"),
        ({"topic": "t", "values": {"bytes_in": {"loads": {"x": 1}}}}, "malformed loads"),
    ],
)
def test_bad_findings(evidence: dict[str, Any], error: str) -> None:
    f = Finding(
        cluster="c", source="s", ts_ms=0, rule="slow_broker", subject="broker:1", severity="warning",
        summary="", evidence=evidence, action="",
    )  # fmt: skip
    with pytest.raises(PlanError, match=error):
        rem().plan(f, view(SPREAD))


@st.composite
def clusters(draw: st.DrawFn) -> tuple[ClusterView, dict[int, float]]:
    nb = draw(st.integers(2, 4))
    brokers = {b: draw(st.sampled_from([None, "a", "b", "c"])) for b in range(1, nb + 1)}
    n = draw(st.integers(1, 8))
    assign, leaders, loads = {}, {}, {}
    for p in range(n):
        reps = draw(st.lists(st.sampled_from(sorted(brokers)), min_size=1, max_size=min(3, nb), unique=True))
        assign[p] = reps
        leaders[p] = draw(st.sampled_from(reps))
        loads[p] = float(draw(st.integers(0, 10_000)))
    return view(assign, leaders, brokers=brokers), loads


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(clusters(), st.sampled_from([0.0, 0.5]))
def test_property_factor_never_increases(case: tuple[ClusterView, dict[int, float]], fw: float) -> None:
    v, loads = case
    cfg = RebalanceLoadConfig(follower_weight=fw)
    s = state_of(v, "t", loads)
    moves = plan_h1(s, cfg)
    last = s.factor(fw)
    for m in moves:
        assert m.factor_after <= last + 1e-9  # no planned step raises the factor
        last = m.factor_after
    if s.factor(fw) <= cfg.max_factor:
        assert moves == []  # balanced input: the plan is empty


@settings(max_examples=60, deadline=None, derandomize=True, database=None)
@given(st.integers(1, 6), st.integers(1, 10_000))
def test_property_balanced_input_gives_empty_plan(n: int, load: int) -> None:
    # Every broker leads n partitions of equal load: I = 0.
    assign = {p: [p % 3 + 1, (p + 1) % 3 + 1] for p in range(3 * n)}
    s = state_of(view(assign), "t", dict.fromkeys(assign, float(load)))
    assert s.factor(0.0) == 0.0 and plan_h1(s, RebalanceLoadConfig()) == []
