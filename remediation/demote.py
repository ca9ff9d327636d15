"""``demote_leadership``: move preferred leadership off a slow broker, and back after it recovers.

Plan (pure): every partition the broker leads or is preferred leader of, with more than one
replica, gets its replica list reordered so the broker is last (a reassignment to the same set
moves no data), then a preferred-leader election. Under-replicated partitions are skipped (the
new first replica might not be in sync; Cruise Control's ``skip_urp_demotion``), and named in
the plan's reason.

Undo (restore): only partitions whose replica order is still the one this action set are put
back, so an operator's or another tool's later change is never reverted. The remediator runs the
restore after the broker has been healthy for ``restore_hold_s``; the per-subject cooldown then
keeps a broker just restored from being demoted again at once (no demote/promote loop).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from linkwatch.records import Finding
from remediation.base import Context, Plan, PlanError, Remediation, RemediationConfig, Step
from remediation.guardrails import broker_of
from remediation.view import ClusterView, elect_preferred, submit_reassignments


class DemoteConfig(RemediationConfig):
    topics: list[str] | None = None  # None: every non-internal topic
    step_deadline_s: float = Field(60.0, gt=0)


def demote_order(replicas: tuple[int, ...], broker: int) -> list[int]:
    """The same replicas with ``broker`` moved last (its relative order otherwise kept)."""
    return [r for r in replicas if r != broker] + [broker]


class DemoteLeadershipRemediation(Remediation):
    NAME = "demote_leadership"
    Config = DemoteConfig
    config: DemoteConfig

    def plan(self, finding: Finding, view: ClusterView) -> Plan:
        broker = broker_of(finding.subject)
        if broker is None:
            raise PlanError(f"demote_leadership acts on broker:<id>, not {finding.subject}")
        wanted = set(self.config.topics) if self.config.topics is not None else None
        reorder: list[dict[str, Any]] = []
        elect: list[list[Any]] = []
        skipped: list[str] = []
        for (topic, part), p in sorted(view.partitions.items()):
            if wanted is not None and topic not in wanted:
                continue
            if broker not in p.replicas or len(p.replicas) < 2:
                continue
            if p.replicas[0] != broker and p.leader != broker:
                continue
            if p.under_replicated:
                skipped.append(f"{topic}-{part}")
                continue
            if p.replicas[0] == broker:
                reorder.append(
                    {
                        "topic": topic,
                        "partition": part,
                        "from": list(p.replicas),
                        "to": demote_order(p.replicas, broker),
                    }
                )
            elect.append([topic, part])
        reason = f"broker {broker} ({finding.rule}): move leadership of {len(elect)} partitions off it"
        if skipped:
            reason += f"; skipped under-replicated {', '.join(skipped)}"
        steps = self._steps(finding.subject, broker, reorder, elect)
        return Plan(self.NAME, finding.subject, reason, steps, demotes=(broker,))

    def _steps(
        self, subject: str, broker: int, reorder: list[dict[str, Any]], elect: list[list[Any]]
    ) -> tuple[Step, ...]:
        deadline = self.config.step_deadline_s
        steps = []
        if reorder:
            steps.append(Step("reorder", subject, {"moves": reorder}, deadline))
        if elect:
            steps.append(Step("elect", subject, {"partitions": elect, "away_from": broker}, deadline))
        return tuple(steps)

    def execute(self, step: Step, ctx: Context) -> None:
        if step.kind == "reorder":
            submit_reassignments(
                ctx.admin, {(m["topic"], m["partition"]): m["to"] for m in step.params["moves"]}
            )
        elif step.kind == "elect":
            elect_preferred(ctx.admin, [(t, p) for t, p in step.params["partitions"]])
        else:
            raise ValueError(f"demote_leadership: unknown step kind {step.kind!r}")

    def verify(self, step: Step, view: ClusterView) -> bool:
        if step.kind == "reorder":
            return all(
                (s := view.partitions.get((m["topic"], m["partition"]))) is not None
                and list(s.replicas) == m["to"]
                for m in step.params["moves"]
            )
        away = step.params.get("away_from")
        for t, p in step.params["partitions"]:
            s = view.partitions.get((t, p))
            if s is None:
                continue  # deleted meanwhile: nothing left to move
            if away is not None and s.leader == away:
                return False
            if away is None and s.leader != s.replicas[0]:
                return False
        return True

    def undo(self, action: dict[str, Any], view: ClusterView) -> Plan:
        moves = [m for s in action["plan"]["steps"] if s["kind"] == "reorder" for m in s["params"]["moves"]]
        back = []
        for m in moves:
            s = view.partitions.get((m["topic"], m["partition"]))
            if s is not None and list(s.replicas) == m["to"]:  # still our order: ours to put back
                back.append(
                    {"topic": m["topic"], "partition": m["partition"], "from": m["to"], "to": m["from"]}
                )
        elect = [[m["topic"], m["partition"]] for m in back]
        steps: list[Step] = []
        if back:
            steps.append(Step("reorder", action["subject"], {"moves": back}, self.config.step_deadline_s))
            steps.append(
                Step(
                    "elect",
                    action["subject"],
                    {"partitions": elect, "away_from": None},
                    self.config.step_deadline_s,
                )
            )
        reason = f"restore leadership of {len(back)} partitions (action {action['id']})"
        return Plan(self.NAME, action["subject"], reason, tuple(steps))

    def recover(self, action: dict[str, Any], ctx: Context) -> str:
        """Re-run the steps not verified: a reorder and an election are idempotent."""
        plan = Plan(
            self.NAME, action["subject"], "recover", tuple(Step.from_dict(s) for s in action["plan"]["steps"])
        )
        return self.execute_plan(plan, ctx)
