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

Followers (``followers: drop``, off by default): moving leadership does not help producers with
``acks=all`` when the slow broker is a *follower* — every leader of a partition it replicates
waits for it while it stays in the ISR, and a broker that fetches between stalls is never
dropped from it. With ``drop``, the plan also takes the broker out of the replica set of every
partition it follows (after the reorder, that is every partition it replicates) by a
reassignment to the other replicas, as long as at least ``min_replicas_left`` replicas and the
topic's ``min.insync.replicas`` remain, all in sync (a partition that would go below either, is
under-replicated or is being reassigned keeps the broker, and is named in the reason). It trades
durability for latency until the restore, which is why it is a switch: while dropped, a
partition has one replica fewer. The restore reassigns each partition this action shrank back to
its exact original replica list; the broker copies the partition's data again and the step waits
(up to ``rejoin_deadline_s``) until it is back in the ISR before the preferred-leader election.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from linkwatch.records import Finding
from remediation.base import Context, Plan, PlanError, Remediation, RemediationConfig, Step
from remediation.guardrails import broker_of
from remediation.view import ClusterView, elect_preferred, submit_reassignments


class DemoteConfig(RemediationConfig):
    topics: list[str] | None = None  # None: every non-internal topic
    step_deadline_s: float = Field(60.0, gt=0)
    # "drop": also take the broker out of the replica sets it follows (see the module docstring).
    followers: Literal["keep", "drop"] = "keep"
    # A replica set is never shrunk below this, nor below its topic's min.insync.replicas.
    min_replicas_left: int = Field(2, ge=1)
    # The restore of a dropped follower waits this long for it to be back in the ISR.
    rejoin_deadline_s: float = Field(600.0, gt=0)


# Step kinds whose params are {"moves": [{topic, partition, from, to}]}: reassignments.
MOVE_STEPS = ("reorder", "drop")


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
        drop_followers = self.config.followers == "drop"
        reorder: list[dict[str, Any]] = []
        elect: list[list[Any]] = []
        drop: list[dict[str, Any]] = []
        skipped: list[str] = []
        kept: list[str] = []
        for (topic, part), p in sorted(view.partitions.items()):
            if wanted is not None and topic not in wanted:
                continue
            if broker not in p.replicas or len(p.replicas) < 2:
                continue
            leads = p.replicas[0] == broker or p.leader == broker
            if not leads and not drop_followers:
                continue
            if p.under_replicated:
                skipped.append(f"{topic}-{part}")
                continue
            order = list(p.replicas)
            if leads:
                if p.replicas[0] == broker:
                    order = demote_order(p.replicas, broker)
                    reorder.append({"topic": topic, "partition": part, "from": list(p.replicas), "to": order})
                elect.append([topic, part])
            if drop_followers:
                left = [r for r in order if r != broker]
                # Unknown min.insync.replicas: assume the set cannot lose a replica.
                need = max(self.config.min_replicas_left, view.min_insync.get(topic, len(p.replicas)))
                if len(left) < need or (topic, part) in view.reassigning:
                    kept.append(f"{topic}-{part}")
                else:
                    drop.append({"topic": topic, "partition": part, "from": order, "to": left})
        reason = f"broker {broker} ({finding.rule}): move leadership of {len(elect)} partitions off it"
        if drop_followers:
            reason += f", and drop it from {len(drop)} replica sets"
        if skipped:
            reason += f"; skipped under-replicated {', '.join(skipped)}"
        if kept:
            reason += (
                f"; kept as a follower of {', '.join(kept)} (fewer than min_replicas_left or "
                "min.insync.replicas would remain, or a reassignment is in flight)"
            )
        steps = self._steps(finding.subject, broker, reorder, elect, drop)
        return Plan(self.NAME, finding.subject, reason, steps, demotes=(broker,))

    def _steps(
        self,
        subject: str,
        broker: int,
        reorder: list[dict[str, Any]],
        elect: list[list[Any]],
        drop: list[dict[str, Any]],
    ) -> tuple[Step, ...]:
        deadline = self.config.step_deadline_s
        steps = []
        if reorder:
            steps.append(Step("reorder", subject, {"moves": reorder}, deadline))
        if elect:
            steps.append(Step("elect", subject, {"partitions": elect, "away_from": broker}, deadline))
        if drop:
            steps.append(Step("drop", subject, {"moves": list(drop)}, deadline))
        return tuple(steps)

    def execute(self, step: Step, ctx: Context) -> None:
        if step.kind in MOVE_STEPS:
            submit_reassignments(
                ctx.admin, {(m["topic"], m["partition"]): m["to"] for m in step.params["moves"]}
            )
        elif step.kind == "elect":
            elect_preferred(ctx.admin, [(t, p) for t, p in step.params["partitions"]])
        else:
            raise ValueError(f"demote_leadership: unknown step kind {step.kind!r}")

    def verify(self, step: Step, view: ClusterView) -> bool:
        if step.kind in MOVE_STEPS:
            # Done: the new list in place, no reassignment left, and a replica it added (a
            # restore of a dropped follower) caught up into the ISR.
            return all(
                (s := view.partitions.get((m["topic"], m["partition"]))) is not None
                and list(s.replicas) == m["to"]
                and (m["topic"], m["partition"]) not in view.reassigning
                and set(m["to"]) - set(m["from"]) <= set(s.isr)
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
        # Per partition: the list before this action's first move, and every list its moves set;
        # only a partition still at one of those is ours to put back (a later change by anyone is
        # kept). Any of them, not only the last: a plan stopped after its reorder but before its
        # drop took effect still has the reorder to undo.
        first: dict[tuple[str, int], list[int]] = {}
        ours: dict[tuple[str, int], list[list[int]]] = {}
        for step in action["plan"]["steps"]:
            if step["kind"] in MOVE_STEPS:
                for m in step["params"]["moves"]:
                    first.setdefault((m["topic"], m["partition"]), m["from"])
                    ours.setdefault((m["topic"], m["partition"]), []).append(m["to"])
        back = []
        for (topic, part), original in first.items():
            now = view.partitions.get((topic, part))
            if now is not None and list(now.replicas) in ours[(topic, part)]:
                back.append({"topic": topic, "partition": part, "from": list(now.replicas), "to": original})
        elect = [[m["topic"], m["partition"]] for m in back]
        rejoins = sum(1 for m in back if set(m["to"]) - set(m["from"]))
        deadline = self.config.rejoin_deadline_s if rejoins else self.config.step_deadline_s
        steps: list[Step] = []
        if back:
            steps.append(Step("reorder", action["subject"], {"moves": back}, deadline))
            steps.append(
                Step(
                    "elect",
                    action["subject"],
                    {"partitions": elect, "away_from": None},
                    self.config.step_deadline_s,
                )
            )
        reason = f"restore leadership of {len(back)} partitions (action {action['id']})"
        if rejoins:
            reason += f", {rejoins} of them with the broker back in the replica set"
        return Plan(self.NAME, action["subject"], reason, tuple(steps))

    def recover(self, action: dict[str, Any], ctx: Context) -> str:
        """Re-run the steps not verified: a reassignment to a list and an election are idempotent."""
        plan = Plan(
            self.NAME, action["subject"], "recover", tuple(Step.from_dict(s) for s in action["plan"]["steps"])
        )
        return self.execute_plan(plan, ctx)
