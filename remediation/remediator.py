"""The remediator: takes findings, applies the guardrails, plans, and acts only when allowed.

:meth:`Remediator.handle` is the one entry point for every finding source (analyzer, lag
collector, alerts receiver): give it a :class:`~linkwatch.records.Finding`. For each finding:

1. the tracker notes it (active / cleared); a cleared subject with a demotion is restored after
   ``restore_hold_s``, and an action whose remediation says it is due (``revert_due``, e.g.
   ``rebalance_load``'s H3) is undone (:meth:`tick`);
2. while paused, the finding is kept (persisted) and handled on :meth:`resume`;
3. a rule with no remediation configured is audited ``ignored``;
4. guardrails, in order: duplicate, circuit breaker, cooldown, caps, lease — a refusal is
   audited with its reason;
5. the remediation plans from a fresh view; the plan and the state before are audited;
6. dry run (the default): audited ``dry_run``, nothing changes. With ``execute: true`` the
   action is persisted, its steps run (each persisted before it is sent), and the result and
   the state after are audited.

A remediation that raises is logged, audited ``failed`` and counted; other findings go on.
At start, :meth:`recover` finishes or cancels the actions this remediator left running.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from linkwatch.records import Finding, from_dict
from remediation import guardrails
from remediation.audit import AuditLog
from remediation.base import Context, Plan, PlanError, Remediation, Step
from remediation.config import RemediatorConfig
from remediation.guardrails import FindingTracker
from remediation.registry import load_remediations
from remediation.state import StateStore
from remediation.view import ClusterView, read_view

log = logging.getLogger(__name__)

RESTORE_RETRY_S = 60.0


class Remediator:
    def __init__(
        self,
        cfg: RemediatorConfig,
        admin: Any,
        *,
        lease: Any = None,
        latency_ms: Callable[[], float | None] | None = None,
        member: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from remediation.lease import LocalLease

        self.cfg = cfg
        self.admin = admin
        self.member = member or f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"
        self.remediations: dict[str, Remediation] = load_remediations(cfg.remediations)
        self.state = StateStore(cfg.state_dir / "state.json")
        self.audit = AuditLog(cfg.audit_path, self.member)
        self.lease = lease or LocalLease()
        self.latency_ms = latency_ms or (lambda: None)
        self.clock = clock
        self.errors_total = 0
        self._restore_tried: dict[str, float] = {}
        t = self.state.data["tracker"]
        self.tracker = FindingTracker(active=t["active"], cleared=t["cleared"])

    # -- reading the cluster ----------------------------------------------------------------------

    def view(self) -> ClusterView:
        cap = None
        rb = self.cfg.remediations.get("rebalance_disks") or {}
        if isinstance(rb, dict):
            cap = rb.get("capacity_bytes")
        return read_view(self.admin, capacity_bytes=cap)

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, finding: Finding | dict[str, Any]) -> dict[str, Any]:
        """Handle one finding; returns the audit event that says what happened to it."""
        if isinstance(finding, dict):
            finding = from_dict(finding)  # type: ignore[assignment]
        assert isinstance(finding, Finding)
        now = self.clock()
        self.tracker.observe(finding.rule, finding.subject, finding.active, now)
        self._save_tracker()
        if not finding.active:
            return self.audit.write("cleared", rule=finding.rule, subject=finding.subject)
        if self.state.data["paused"]:
            self.state.data["pending"].append(finding.to_dict())
            self.state.save()
            return self.audit.write(
                "queued", key=finding.dedup_key(), subject=finding.subject, reason="paused"
            )
        return self._decide(finding, now)

    def _decide(self, finding: Finding, now: float) -> dict[str, Any]:
        key = finding.dedup_key()
        name = self.cfg.rules.get(finding.rule)
        if name is None:
            return self.audit.write(
                "ignored", key=key, rule=finding.rule, reason="no remediation for this rule"
            )
        reason = self._refusal(finding, key, now)
        if reason is not None:
            return self.audit.write("refused", key=key, subject=finding.subject, reason=reason)
        rem = self.remediations[name]
        try:
            view = self.view()
            plan = rem.plan(finding, view)
        except PlanError as e:
            return self.audit.write("refused", key=key, subject=finding.subject, reason=str(e))
        except Exception as e:
            self.errors_total += 1
            log.exception("remediation %s failed to plan for %s", name, key)
            return self.audit.write("failed", key=key, remediation=name, phase="plan", error=repr(e))
        cap_reason = self._caps(plan)
        if cap_reason is not None:
            return self.audit.write(
                "refused", key=key, subject=finding.subject, reason=cap_reason, plan=plan.to_dict()
            )
        self.audit.write("plan", key=key, plan=plan.to_dict(), text=plan.describe(), before=view.summary())
        self._remember(key)
        if not self.cfg.execute:
            return self.audit.write(
                "dry_run", key=key, plan=plan.id, reason="execute is false: nothing changed"
            )
        if not plan.steps:
            return self.audit.write("result", key=key, plan=plan.id, status="done", note="empty plan")
        return self.run_plan(rem, plan, key)

    def preview(self, finding: Finding) -> tuple[Plan | None, str | None]:
        """What :meth:`handle` would plan for ``finding`` now, and the guardrail that would refuse
        it (None: it would go ahead). Changes nothing; the plan is audited as ``preview``."""
        name = self.cfg.rules.get(finding.rule)
        if name is None:
            return None, f"no remediation for rule {finding.rule!r}"
        view = self.view()
        try:
            plan = self.remediations[name].plan(finding, view)
        except PlanError as e:
            return None, str(e)
        reason = self._refusal(finding, finding.dedup_key(), self.clock()) or self._caps(plan)
        self.audit.write(
            "preview", plan=plan.to_dict(), text=plan.describe(), refused=reason, before=view.summary()
        )
        return plan, reason

    def _refusal(self, finding: Finding, key: str, now: float) -> str | None:
        brokers = len(self.admin.describe_cluster()["brokers"])
        active = self.tracker.current(now, self.cfg.circuit_breaker.finding_ttl_s)
        return (
            guardrails.duplicate(key, self.state.data["acted"])
            or guardrails.circuit_open(active, brokers, self.cfg.circuit_breaker)
            or guardrails.cooling_down(
                finding.subject, self.state.data["last_action"], self.cfg.cooldown_s, now
            )
            or (None if self.lease.held() else "standby: another remediator holds the lease")
        )

    def _caps(self, plan: Plan) -> str | None:
        demoted = [int(b) for b in self.state.data["demoted"]]
        brokers = len(self.admin.describe_cluster()["brokers"])
        running = len(self.state.running())
        return guardrails.over_caps(running, demoted, plan.demotes, brokers, self.cfg.caps)

    def _remember(self, key: str) -> None:
        self.state.data["acted"].append(key)
        self.state.save()

    def _save_tracker(self) -> None:
        self.state.data["tracker"] = {"active": self.tracker.active, "cleared": self.tracker.cleared}
        self.state.save()

    # -- acting -----------------------------------------------------------------------------------

    def run_plan(self, rem: Remediation, plan: Plan, key: str, undo_of: str | None = None) -> dict[str, Any]:
        action = {
            "id": plan.id,
            "remediation": rem.NAME,
            "subject": plan.subject,
            "key": key,
            "status": "running",
            "undo_of": undo_of,
            "started": self.clock(),
            "plan": plan.to_dict(),
            "steps": [{"status": "planned"} for _ in plan.steps],
            "throttles": {},
        }
        self.state.put_action(action)
        for b in plan.demotes:
            self.state.data["demoted"][str(b)] = plan.id
        self.state.data["last_action"][plan.subject] = self.clock()
        self.state.save()
        ctx = self.context(action)
        try:
            status = rem.execute_plan(plan, ctx)
            rem.finish(action, ctx)
        except Exception as e:
            self.errors_total += 1
            log.exception("remediation %s failed on %s", rem.NAME, plan.subject)
            self._finish_failed(rem, action, ctx)
            self.state.update(plan.id, status="failed", error=repr(e))
            return self.audit.write(
                "result", key=key, plan=plan.id, status="failed", error=repr(e), after=self._summary()
            )
        self.state.update(plan.id, status=status, finished=self.clock())
        return self.audit.write("result", key=key, plan=plan.id, status=status, after=self._summary())

    def _finish_failed(self, rem: Remediation, action: dict[str, Any], ctx: Context) -> None:
        try:
            rem.finish(action, ctx)
        except Exception:
            log.exception("cleanup after a failed action %s also failed", action["id"])

    def _summary(self) -> dict[str, Any]:
        try:
            return self.view().summary()
        except Exception as e:  # the audit must not fail because the cluster is unreachable
            return {"error": repr(e)}

    def context(self, action: dict[str, Any]) -> Context:
        aid = action["id"]

        def step_status(i: int, status: str, **extra: Any) -> None:
            self.state.step_status(aid, i, status, **extra)
            self.audit.write("step", action=aid, step=i, status=status, detail=action["plan"]["steps"][i])

        def record(resource: str, originals: dict[str, Any]) -> None:
            self.state.data["actions"][aid]["throttles"][resource] = originals
            self.state.save()
            self.audit.write("throttle_owned", action=aid, resource=resource, replaced=originals)

        return Context(
            admin=self.admin,
            audit=self.audit,
            view=self.view,
            held=self.lease.held,
            step_status=step_status,
            record=record,
            owned=lambda: dict(self.state.data["actions"][aid]["throttles"]),
            latency_ms=self.latency_ms,
            on_restart=self.cfg.on_restart,
        )

    # -- restart, restore, pause, undo, cancel ----------------------------------------------------

    def recover(self) -> list[dict[str, Any]]:
        """Finish or cancel the actions this remediator left running (its own only)."""
        out = []
        for action in self.state.running():
            rem = self.remediations.get(action["remediation"])
            if rem is None:
                out.append(
                    self.audit.write(
                        "recover",
                        action=action["id"],
                        status="skipped",
                        reason="remediation no longer configured",
                    )
                )
                continue
            ctx = self.context(action)
            try:
                note = rem.recover(action, ctx)
                status = "recovered"
            except Exception as e:
                self.errors_total += 1
                log.exception("recovering %s failed", action["id"])
                note, status = repr(e), "failed"
            self.state.update(action["id"], status=status, finished=self.clock(), recovery=note)
            out.append(
                self.audit.write(
                    "recover", action=action["id"], status=status, note=note, after=self._summary()
                )
            )
        return out

    def tick(self) -> list[dict[str, Any]]:
        """Periodic work: restore demoted brokers healthy for ``restore_hold_s``; undo the finished
        actions their remediation finds due (:meth:`Remediation.revert_due`)."""
        now = self.clock()
        out = self._reverts_due(now)
        for broker, aid in list(self.state.data["demoted"].items()):
            subject = f"broker:{broker}"
            since = self.tracker.healthy_since(subject, now, self.cfg.circuit_breaker.finding_ttl_s)
            if since is None or now - since < self.cfg.restore_hold_s or not self.lease.held():
                continue
            if now - self._restore_tried.get(broker, float("-inf")) < RESTORE_RETRY_S:
                continue  # a restore that failed (or is dry run) is retried, not hammered
            self._restore_tried[broker] = now
            out.append(
                {**self.undo(aid, reason=f"{subject} healthy for {now - since:.0f} s"), "subject": subject}
            )
        return out

    def _reverts_due(self, now: float) -> list[dict[str, Any]]:
        ttl = self.cfg.circuit_breaker.finding_ttl_s
        out = []
        for aid, action in list(self.state.data["actions"].items()):
            rem = self.remediations.get(action["remediation"])
            if rem is None or action["status"] not in ("done", "abandoned") or action.get("undo_of"):
                continue
            if not rem.revert_due(action, lambda s: self.tracker.healthy_since(s, now, ttl), now):
                continue
            if not self.lease.held() or now - self._restore_tried.get(aid, float("-inf")) < RESTORE_RETRY_S:
                continue  # as restores: a failed (or dry-run) revert is retried, not hammered
            self._restore_tried[aid] = now
            out.append(
                {
                    **self.undo(aid, reason=f"{rem.NAME}: {action['subject']} due for revert"),
                    "subject": action["subject"],
                }
            )
        return out

    def undo(self, action_id: str, reason: str = "operator") -> dict[str, Any]:
        action = self.state.action(action_id)
        rem = self.remediations[action["remediation"]]
        plan = rem.undo(action, self.view())
        self.audit.write(
            "plan", key=f"undo:{action_id}", plan=plan.to_dict(), text=plan.describe(), reason=reason
        )
        if not self.cfg.execute:
            return self.audit.write(
                "dry_run", key=f"undo:{action_id}", plan=plan.id, reason="execute is false"
            )
        result = self.run_plan(rem, plan, f"undo:{action_id}", undo_of=action_id)
        if result["status"] == "done":
            self.state.update(action_id, status="undone")
            for b, aid in list(self.state.data["demoted"].items()):
                if aid == action_id:
                    del self.state.data["demoted"][b]
            self.state.save()
        return result

    def pause(self) -> None:
        self.state.data["paused"] = True
        self.state.save()
        self.audit.write("paused")

    def resume(self) -> list[dict[str, Any]]:
        """Un-pause and evaluate every finding kept meanwhile, oldest first."""
        self.state.data["paused"] = False
        pending, self.state.data["pending"] = self.state.data["pending"], []
        self.state.save()
        self.audit.write("resumed", pending=len(pending))
        return [self._decide(from_dict(f), self.clock()) for f in pending]  # type: ignore[arg-type]

    def cancel_running(self) -> list[dict[str, Any]]:
        """Operator stop: cancel this remediator's in-flight moves, clear its throttles."""
        out = []
        for action in self.state.running():
            rem = self.remediations.get(action["remediation"])
            if rem is None:
                continue
            ctx = self.context(action)
            for i, s in enumerate(action["steps"]):
                if s["status"] in ("intent", "sent"):
                    rem.abandon(Step.from_dict(action["plan"]["steps"][i]), ctx)
                    ctx.step_status(i, "cancelled")
            rem.finish(action, ctx)
            self.state.update(action["id"], status="cancelled", finished=self.clock())
            out.append(self.audit.write("cancelled", action=action["id"]))
        return out

    def demoted(self) -> dict[int, str]:
        return {int(b): a for b, a in self.state.data["demoted"].items()}

    def close(self) -> None:
        self.lease.close()
