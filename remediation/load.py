"""``rebalance_load``: the load-balance planner (H1 move, H2 split, H3 revert).

Input: a ``skewed_partitions`` finding; its evidence carries, per measure, the per-partition
loads of the last window (``values[measure].loads``) and the topic's imbalance per window
(``values[measure].ratio``). Broker load is what the brokers serve for that topic: a leader
carries its partition's load, a follower ``follower_weight`` of it (replication fetches). The
factor is the analyzer's ``I = max/avg − 1`` (:func:`linkwatch.imbalance.imbalance`), over every
broker of the view (a broker serving nothing counts as 0) and over the topic's partitions.

No plan (empty) when: the broker factor is at or under ``max_factor``; the topic was skewed in
fewer than ``min_windows`` of the finding's windows (one noisy window); the topic's total load is
under ``min_total`` (low traffic).

**H1** (:func:`plan_h1`, pure): while the broker factor is above ``max_factor``, take the step
that lowers it with the fewest bytes moved: a preferred-leader change to an in-sync replica
first (a replica reorder plus an election: no bytes), else a replica move off the most loaded
broker to a broker not holding the partition whose rack holds no other replica of it (rack
spread is never broken), the smallest replica that brings the factor under ``max_factor``, else
the one that lowers it most per byte. Ties between brokers sharing the max are broken by the sum
of squared broker loads, so no step raises the factor and every step makes progress; at most
``max_steps``.

**H2** (:func:`plan_h2`): when one partition alone carries more than ``(1 + max_factor)`` × the
average broker load, no placement can fix it; the plan then carries a **proposal** (a ``propose``
step that only logs): more partitions for the topic and the skew-aware partitioner for its hot
keys. Partitions are never created automatically.

**H3** (:func:`revert_due`, :meth:`RebalanceLoadRemediation.revert_due` and
:meth:`RebalanceLoadRemediation.undo`): the applied H1 steps are remembered in the remediator's
persisted state (the action record: its plan and each step's status, so a restart keeps them);
on every tick, an action with at least one H1 step ``done`` whose topic has had no active
finding for ``hold_s`` is due, and its H1 steps are reverted, newest first, each only if the
partition is still as this action left it (an operator's later change is never undone). While
the topic is still skewed, or before the hold time, nothing is reverted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from linkwatch.imbalance import imbalance
from linkwatch.records import Finding
from remediation.base import Context, Plan, PlanError, Remediation, RemediationConfig, Step
from remediation.intake import finite_number
from remediation.view import ClusterView, elect_preferred, submit_reassignments


class RebalanceLoadConfig(RemediationConfig):
    measure: str = "bytes_in"  # which evidence measure is the load (bytes_in, messages_in)
    max_factor: float = Field(0.25, gt=0)  # plan while the broker factor is above this
    follower_weight: float = Field(0.0, ge=0, le=1)  # a follower's share of its partition's load
    min_total: float = Field(10_240.0, ge=0)  # the topic's total load under which nothing moves
    min_windows: int = Field(2, ge=1)  # windows of the finding that must be skewed
    max_steps: int = Field(20, ge=1)
    allow_replica_moves: bool = True
    step_deadline_s: float = Field(600.0, gt=0)
    hold_s: float = Field(1800.0, ge=0)  # H3: skew gone this long before H1 moves are reverted


Assignment = dict[int, tuple[int, ...]]  # partition -> replicas, preferred leader first


@dataclass
class LoadState:
    """One topic's placement and loads; ``leaders`` may differ from the preferred replica."""

    brokers: dict[int, str | None]
    loads: dict[int, float]  # partition -> load
    replicas: Assignment
    leaders: dict[int, int]
    isr: dict[int, tuple[int, ...]]
    sizes: dict[int, int] = field(default_factory=dict)  # partition -> bytes of one replica

    def broker_loads(self, follower_weight: float) -> dict[int, float]:
        out = dict.fromkeys(self.brokers, 0.0)
        for p, load in self.loads.items():
            for b in self.replicas.get(p, ()):
                out[b] = out.get(b, 0.0) + (load if b == self.leaders.get(p) else follower_weight * load)
        return out

    def factor(self, follower_weight: float) -> float:
        return imbalance(self.broker_loads(follower_weight))[0]

    def score(self, follower_weight: float) -> tuple[float, float]:
        """(factor, sum of squared broker loads): a step must lower this pair. The second term
        breaks ties between brokers sharing the max, where no single step lowers the factor."""
        loads = self.broker_loads(follower_weight)
        return imbalance(loads)[0], sum(v * v for v in loads.values())


def state_of(view: ClusterView, topic: str, loads: dict[int, float]) -> LoadState:
    parts = {p: s for (t, p), s in view.partitions.items() if t == topic}
    sizes: dict[int, int] = {}
    for r in view.replicas:
        if r.topic == topic and not r.future:
            sizes[r.partition] = max(sizes.get(r.partition, 0), r.size_bytes)
    return LoadState(
        brokers=dict(view.brokers),
        loads={p: v for p, v in loads.items() if p in parts},
        replicas={p: s.replicas for p, s in parts.items()},
        leaders={p: s.leader for p, s in parts.items()},
        isr={p: s.isr for p, s in parts.items()},
        sizes=sizes,
    )


@dataclass(frozen=True)
class Move:
    """``lead``: a preferred-leader change (replicas reordered, no bytes); ``move``: a replica."""

    kind: str
    partition: int
    before: tuple[int, ...]
    after: tuple[int, ...]
    bytes: int
    factor_after: float
    score_after: tuple[float, float] = (0.0, 0.0)


def _apply(s: LoadState, m: Move) -> LoadState:
    replicas = {**s.replicas, m.partition: m.after}
    leaders = dict(s.leaders)
    if m.kind == "lead" or leaders.get(m.partition) not in m.after:
        leaders[m.partition] = m.after[0]
    isr = {**s.isr, m.partition: tuple(b for b in m.after if b in s.isr[m.partition] or b not in m.before)}
    return LoadState(s.brokers, s.loads, replicas, leaders, isr, s.sizes)


def _rack_ok(brokers: dict[int, str | None], others: tuple[int, ...], dst: int) -> bool:
    rack = brokers.get(dst)
    return rack is None or rack not in {brokers.get(b) for b in others}


def _candidates(s: LoadState, cfg: RebalanceLoadConfig, hot: int) -> tuple[list[Move], list[Move]]:
    """Leadership changes and replica moves off broker ``hot``, each with the factor after it."""
    leads, moves = [], []
    for p, reps in sorted(s.replicas.items()):
        if hot not in reps or s.loads.get(p, 0.0) <= 0:
            continue
        if s.leaders.get(p) == hot:
            for b in reps:
                if b != hot and b in s.isr.get(p, ()):
                    after = (b, *[r for r in reps if r != b])
                    leads.append(Move("lead", p, reps, after, 0, 0.0))
        if not cfg.allow_replica_moves:
            continue
        others = tuple(r for r in reps if r != hot)
        for dst in sorted(s.brokers):
            if dst not in reps and _rack_ok(s.brokers, others, dst):
                after = tuple(dst if r == hot else r for r in reps)
                moves.append(Move("move", p, reps, after, s.sizes.get(p, 0), 0.0))
    return [_scored(s, m, cfg) for m in leads], [_scored(s, m, cfg) for m in moves]


def _scored(s: LoadState, m: Move, cfg: RebalanceLoadConfig) -> Move:
    score = _apply(s, m).score(cfg.follower_weight)
    return Move(m.kind, m.partition, m.before, m.after, m.bytes, score[0], score)


def _best(s: LoadState, cfg: RebalanceLoadConfig) -> Move | None:
    """The next H1 step, or None when no step lowers the factor."""
    now = s.score(cfg.follower_weight)
    loads = s.broker_loads(cfg.follower_weight)
    hot = max(sorted(loads), key=loads.__getitem__)
    leads, moves = _candidates(s, cfg, hot)
    leads = [m for m in leads if _lower(m.score_after, now)]
    if leads:
        return min(leads, key=lambda m: (m.score_after, m.partition, m.after))
    moves = [m for m in moves if _lower(m.score_after, now)]
    enough = [m for m in moves if m.factor_after <= cfg.max_factor]
    if enough:
        return min(enough, key=lambda m: (m.bytes, m.factor_after, m.partition, m.after))
    if moves:
        return max(moves, key=lambda m: ((now[1] - m.score_after[1]) / (m.bytes + 1), -m.partition))
    return None


def _lower(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """``a`` strictly below ``b`` (lexicographic, with a tolerance for float noise)."""
    if a[0] < b[0] - 1e-9:
        return True
    return abs(a[0] - b[0]) <= 1e-9 and a[1] < b[1] * (1 - 1e-9)


def plan_h1(s: LoadState, cfg: RebalanceLoadConfig) -> list[Move]:
    """H1: greedy steps, none raising the broker factor, until it is under ``max_factor``."""
    out: list[Move] = []
    while len(out) < cfg.max_steps and s.factor(cfg.follower_weight) > cfg.max_factor:
        m = _best(s, cfg)
        if m is None:
            break
        out.append(m)
        s = _apply(s, m)
    return out


def too_hot(s: LoadState, cfg: RebalanceLoadConfig) -> int | None:
    """H2 trigger: the partition whose load alone exceeds what a balanced broker may carry."""
    total = sum(s.broker_loads(cfg.follower_weight).values())
    if not s.brokers or total <= 0:
        return None
    limit = (1 + cfg.max_factor) * total / len(s.brokers)
    hot = max(sorted(s.loads), key=s.loads.__getitem__, default=None)
    return hot if hot is not None and s.loads[hot] > limit else None


def plan_h2(topic: str, s: LoadState, hot: int, hot_keys: list[dict[str, Any]]) -> dict[str, Any]:
    """H2 proposal: split the hot partition's load over ``d`` partitions (the skew-aware
    partitioner's candidates for its hot keys); the count is rounded up to a multiple of the
    broker count so the new partitions spread evenly."""
    n = len(s.loads) or 1
    avg = sum(s.loads.values()) / n
    d = max(2, math.ceil(s.loads[hot] / avg)) if avg > 0 else 2
    nb = max(1, len(s.brokers))
    partitions = math.ceil((n + d - 1) / nb) * nb
    return {
        "topic": topic,
        "hot_partition": hot,
        "partitions_now": n,
        "partitions_proposed": partitions,
        "partitioner": "producer.partitioner:SkewAwarePartitioner",
        "candidates": d,
        "hot_keys": [k.get("key") for k in hot_keys[:20]],
        "note": "proposal only: partitions are never created automatically",
    }


# Rule H3 — revert only after the skew has been gone for the whole hold time.
def revert_due(healthy_since: float | None, now: float, hold_s: float) -> bool:
    return healthy_since is not None and now - healthy_since >= hold_s


def applied_h1(action: dict[str, Any]) -> list[int]:
    """Indexes of the action's H1 steps (lead / move) whose persisted status is ``done``."""
    plan_steps, status = action["plan"]["steps"], action.get("steps") or []
    return [
        i
        for i, (d, st) in enumerate(zip(plan_steps, status, strict=False))
        if d["kind"] in ("lead", "move") and st.get("status") == "done"
    ]


def _evidence(finding: Finding, cfg: RebalanceLoadConfig) -> tuple[str, dict[int, float], list[float]]:
    ev = finding.evidence
    topic = ev.get("topic")
    values = (ev.get("values") or {}).get(cfg.measure)
    if not topic or not isinstance(values, dict) or "loads" not in values:
        raise PlanError(
            f"rebalance_load needs a skewed_partitions finding with {cfg.measure} loads, "
            f"not {finding.rule} on {finding.subject}"
        )
    if not isinstance(values["loads"], dict) or not isinstance(values.get("ratio", []), list):
        raise PlanError(f"rebalance_load: loads must be an object and ratio a list in {finding.subject}")
    try:
        loads = {_partition_id(p): float(v) for p, v in values["loads"].items()}
        ratios = [float(r) for r in values.get("ratio", [])]
    except (TypeError, ValueError) as e:
        raise PlanError(f"rebalance_load: malformed loads in {finding.subject}: {e}") from e
    return str(topic), loads, ratios


def _partition_id(p: object) -> int:
    if isinstance(p, int) and not isinstance(p, bool):
        return p
    if isinstance(p, str) and p.isascii() and p.isdigit() and len(p) <= 10:
        return int(p)
    raise ValueError(f"partition {str(p)[:20]!r} is not an id")


class RebalanceLoadRemediation(Remediation):
    NAME = "rebalance_load"
    Config = RebalanceLoadConfig
    config: RebalanceLoadConfig

    def check_evidence(self, finding: Finding) -> str | None:
        """The loads and ratios plan reads: finite numbers, partitions as ids, a baseline object."""
        try:
            _, loads, ratios = _evidence(finding, self.config)
        except PlanError as e:
            return str(e)
        if not all(math.isfinite(v) and v >= 0 for v in loads.values()) or not all(
            math.isfinite(r) for r in ratios
        ):
            return "loads and ratios must be finite (loads not negative)"
        baseline = finding.evidence.get("baseline")
        measure = baseline.get(self.config.measure) if isinstance(baseline, dict) else None
        if baseline is not None and not (
            isinstance(baseline, dict) and (measure is None or isinstance(measure, dict))
        ):
            return f"baseline must be an object of objects ({self.config.measure}: max_imbalance)"
        limit = (measure or {}).get("max_imbalance", 0.0)
        if not finite_number(limit):
            return "baseline max_imbalance must be a finite number"
        return None

    def plan(self, finding: Finding, view: ClusterView) -> Plan:
        cfg = self.config
        topic, loads, ratios = _evidence(finding, cfg)
        s = state_of(view, topic, loads)
        f0 = s.factor(cfg.follower_weight)
        base = f"topic {topic}: broker factor I={f0:.2f} (max {cfg.max_factor})"
        threshold = (finding.evidence.get("baseline") or {}).get(cfg.measure, {}).get("max_imbalance", 0.0)
        why_not = (
            "balanced"
            if f0 <= cfg.max_factor
            else "low traffic"
            if sum(s.loads.values()) < cfg.min_total
            else "one noisy window"
            if sum(1 for r in ratios if r > threshold) < cfg.min_windows
            else None
        )
        if why_not is not None:
            return Plan(self.NAME, finding.subject, f"{base}; nothing to do ({why_not})")
        steps = [self._step(topic, m) for m in plan_h1(s, cfg)]
        after = _apply_all(s, steps)
        f1 = after.factor(cfg.follower_weight)
        reason = f"{base}; H1 {len(steps)} steps to I={f1:.2f}"
        hot = too_hot(after, cfg)
        if f1 > cfg.max_factor and hot is not None:
            proposal = plan_h2(topic, after, hot, finding.evidence.get("hot_keys") or [])
            steps.append(Step("propose", f"topic:{topic}", proposal, 1.0))
            reason += f"; H2: partition {hot} alone is too hot, propose {proposal['partitions_proposed']} partitions"
        return Plan(self.NAME, finding.subject, reason, tuple(steps))

    def _step(self, topic: str, m: Move) -> Step:
        params = {
            "topic": topic,
            "partition": m.partition,
            "before": list(m.before),
            "after": list(m.after),
            "bytes": m.bytes,
            "factor_after": round(m.factor_after, 4),
        }
        return Step(m.kind, f"topic-partition:{topic}-{m.partition}", params, self.config.step_deadline_s)

    def execute(self, step: Step, ctx: Context) -> None:
        p = step.params
        if step.kind == "propose":
            ctx.audit.write("proposal", **p)  # H2 is advice only: nothing is changed
            return
        if step.kind not in ("lead", "move"):
            raise ValueError(f"rebalance_load: unknown step kind {step.kind!r}")
        tp = (p["topic"], p["partition"])
        current = ctx.view().partitions.get(tp)
        if step.kind == "move" or current is None or list(current.replicas) != p["after"]:
            submit_reassignments(ctx.admin, {tp: p["after"]})
        if step.kind == "lead":
            elect_preferred(ctx.admin, [tp])

    def await_step(self, step: Step, ctx: Context) -> bool:
        """As the base, but a leadership step whose reorder has landed is elected again on each
        poll (an election sent while the reorder was still in flight is a no-op; it is idempotent)."""
        deadline = ctx.clock() + step.deadline_s
        tp = (step.params.get("topic"), step.params.get("partition"))
        while True:
            view = ctx.view()
            if self.verify(step, view):
                return True
            s = view.partitions.get(tp)
            if step.kind == "lead" and s is not None and list(s.replicas) == step.params["after"]:
                elect_preferred(ctx.admin, [tp])
            if ctx.clock() >= deadline:
                return False
            ctx.sleep(ctx.poll_s)

    def verify(self, step: Step, view: ClusterView) -> bool:
        p = step.params
        if step.kind == "propose":
            return True
        s = view.partitions.get((p["topic"], p["partition"]))
        if s is None:
            return True  # deleted meanwhile: nothing left to move
        if (p["topic"], p["partition"]) in view.reassigning or list(s.replicas) != p["after"]:
            return False
        # A leadership step is done once the election landed too (not only the reorder).
        return step.kind != "lead" or s.leader == p["after"][0]

    def abandon(self, step: Step, ctx: Context) -> None:
        if step.kind == "move":
            submit_reassignments(ctx.admin, {(step.params["topic"], step.params["partition"]): None})

    def revert_due(
        self, action: dict[str, Any], healthy_since: Callable[[str], float | None], now: float
    ) -> bool:
        """H3's trigger: some H1 step of the action was applied and its topic (the action's
        subject) has been free of findings for ``hold_s``."""
        return bool(applied_h1(action)) and revert_due(
            healthy_since(action["subject"]), now, self.config.hold_s
        )

    def undo(self, action: dict[str, Any], view: ClusterView) -> Plan:
        """H3: the H1 steps reversed, newest first, each only while the partition is as we left it."""
        back = []
        for d in reversed(action["plan"]["steps"]):
            p = d["params"]
            s = view.partitions.get((p.get("topic"), p.get("partition")))
            if d["kind"] in ("lead", "move") and s is not None and list(s.replicas) == p["after"]:
                params = {**p, "before": p["after"], "after": p["before"], "factor_after": None}
                back.append(Step(d["kind"], d["subject"], params, self.config.step_deadline_s))
        reason = f"H3: revert {len(back)} H1 steps of action {action['id']} (skew subsided)"
        return Plan(self.NAME, action["subject"], reason, tuple(back))

    def recover(self, action: dict[str, Any], ctx: Context) -> str:
        """Re-run the steps: a reorder, an election and a reassignment to the same list are idempotent."""
        steps = tuple(Step.from_dict(s) for s in action["plan"]["steps"])
        return self.execute_plan(Plan(self.NAME, action["subject"], "recover", steps), ctx)


def _apply_all(s: LoadState, steps: list[Step]) -> LoadState:
    for st in steps:
        p = st.params
        s = _apply(s, Move(st.kind, p["partition"], tuple(p["before"]), tuple(p["after"]), p["bytes"], 0.0))
    return s
