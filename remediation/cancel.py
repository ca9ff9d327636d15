"""``cancel_long_tail``: cancel a reassignment past its deadline (KIP-455: reassign to null).

Kafka's cancel reverts the partition to its original replicas (the adding replicas are dropped).
The age of a reassignment is not in Kafka's metadata, so it comes from the finding's evidence
(``{"pending_s": {"topic-partition": seconds}}``) or from this remediation's own first-seen
times — the one memory it keeps between plans (so a remediator that just started will not
cancel a move it has not watched for ``deadline_s``). The rebalance executor cancels its own
moves at their deadline the same way (see :mod:`remediation.rebalance`).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from linkwatch.records import Finding
from remediation.base import Context, Plan, Remediation, RemediationConfig, Step
from remediation.intake import finite_number
from remediation.view import ClusterView, submit_reassignments


class CancelConfig(RemediationConfig):
    deadline_s: float = Field(1800.0, ge=0)


def original_replicas(reassignment: dict[str, list[int]]) -> list[int]:
    return [b for b in reassignment["replicas"] if b not in reassignment["adding_replicas"]]


class CancelLongTailRemediation(Remediation):
    NAME = "cancel_long_tail"
    Config = CancelConfig
    config: CancelConfig

    def __init__(self, config: CancelConfig) -> None:
        super().__init__(config)
        self.first_seen: dict[str, float] = {}

    def check_evidence(self, finding: Finding) -> str | None:
        pending = finding.evidence.get("pending_s")
        if pending is None:
            return None
        if not isinstance(pending, dict) or not all(finite_number(v) and v >= 0 for v in pending.values()):
            return "pending_s must map topic-partition names to seconds (finite, not negative)"
        return None

    def plan(self, finding: Finding, view: ClusterView) -> Plan:
        pending = dict(finding.evidence.get("pending_s") or {})
        wanted = (
            finding.subject.removeprefix("topic-partition:")
            if finding.subject.startswith("topic-partition:")
            else None
        )
        now = view.read_at or time.time()
        steps = []
        for (t, p), r in sorted(view.reassigning.items()):
            name = f"{t}-{p}"
            self.first_seen.setdefault(name, now)
            if wanted is not None and name != wanted:
                continue
            age = float(pending.get(name, now - self.first_seen[name]))
            if age >= self.config.deadline_s:
                steps.append(
                    Step(
                        "cancel",
                        f"topic-partition:{name}",
                        {"topic": t, "partition": p, "keep": original_replicas(r), "age_s": round(age, 1)},
                        60.0,
                    )
                )
        self.first_seen = {
            k: v for k, v in self.first_seen.items() if any(f"{t}-{p}" == k for t, p in view.reassigning)
        }
        return Plan(
            self.NAME,
            finding.subject,
            f"{len(steps)} reassignments past {self.config.deadline_s:.0f} s",
            tuple(steps),
        )

    def execute(self, step: Step, ctx: Context) -> None:
        submit_reassignments(ctx.admin, {(step.params["topic"], step.params["partition"]): None})

    def verify(self, step: Step, view: ClusterView) -> bool:
        tp = (step.params["topic"], step.params["partition"])
        s = view.partitions.get(tp)
        return tp not in view.reassigning and (s is None or sorted(s.replicas) == sorted(step.params["keep"]))

    def undo(self, action: dict[str, Any], view: ClusterView) -> Plan:
        return Plan(self.NAME, action["subject"], "a cancelled move is not restarted by undo; plan it again")
