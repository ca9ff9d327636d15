"""The remediator: takes findings, applies the guardrails, plans, and acts only when allowed.

:meth:`Remediator.handle` is the one entry point for every finding source (analyzer, lag
collector, alerts receiver, the findings topic): give it a :class:`~linkwatch.records.Finding`
or its dict. For each finding:

1. a standby (the lease is another remediator's) refuses it and touches nothing;
2. **the boundary** (:mod:`remediation.intake`): every field a guardrail or a plan reads is
   checked once against the cluster as it is; a finding that fails is dropped, counted by
   reason and audited — it never reaches the memory of seen findings, a breaker or the state;
3. its memory of seen findings notes it (active / cleared); a cleared subject with a demotion
   is restored after ``restore_hold_s``, and an action whose remediation says it is due
   (``revert_due``) is undone (:meth:`tick`);
4. while paused, the finding is kept (persisted) and handled on :meth:`resume`;
5. a rule with no remediation configured is audited ``ignored``;
6. guardrails, in order: breaker open (failures or harm; a person resets it), duplicate,
   circuit breaker, cooldown, caps — a refusal is audited with its reason;
7. the remediation plans from a fresh view; the plan and the state before are audited;
8. dry run (the default): audited ``dry_run``, nothing changes. With ``execute: true`` the
   action is persisted, the health signals read (:mod:`remediation.impact`), its steps run
   (each persisted before it is sent, each call to the cluster fenced:
   :mod:`remediation.fencing`), then watched for ``impact.settle_s``; the result, the state
   after and the evidence bundle are audited.

A remediation that raises is logged, audited ``failed`` and counted; the steps it had applied
are undone and what it held (a demotion's cap, its throttles) freed; ``failures.max_failures``
failures within ``failures.window_s`` open the breaker. A step refused by the fence
(:class:`~remediation.state.Fenced`: this remediator no longer holds the lease) stops
everything: the remediator stands down, leaving the action to the new holder.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from linkwatch.records import Finding, from_dict
from remediation import guardrails, intake
from remediation.audit import AuditLog
from remediation.base import Context, Interrupted, Plan, PlanError, Remediation, Step
from remediation.config import RemediatorConfig
from remediation.failpoints import failpoint
from remediation.fencing import FencedAdmin
from remediation.guardrails import SeenFindings
from remediation.impact import HealthSignals, ImpactBreach, Watch
from remediation.registry import load_remediations
from remediation.state import Fenced, FileStateStore, StateStore, TopicStateStore
from remediation.view import ClusterView, read_view

log = logging.getLogger(__name__)

RESTORE_RETRY_S = 60.0
COMMAND_TTL_S = 120.0  # a command older than this when the holder reads it is answered "expired"
COMMANDS = ("pause", "resume", "reset", "cancel", "undo")
STANDBY = "standby: another remediator holds the lease"  # the reason :meth:`Remediator.handle` refuses with


class ClusterReader:
    """The reads the remediator makes (a fresh view, the broker set, under-replicated count)."""

    def __init__(self, admin: Any, capacity_bytes: int | None = None) -> None:
        self.admin = admin
        self.capacity_bytes = capacity_bytes

    def brokers(self) -> set[int]:
        return {b["broker_id"] for b in self.admin.describe_cluster()["brokers"]}

    def view(self) -> ClusterView:
        return read_view(self.admin, capacity_bytes=self.capacity_bytes)

    def under_replicated(self) -> int:
        from remediation.impact import under_replicated

        v = read_view(self.admin, with_log_dirs=False)
        return under_replicated(v.partitions.values(), v.reassigning)


class Remediator:
    def __init__(
        self,
        cfg: RemediatorConfig,
        admin: Any,
        *,
        lease: Any = None,
        state: StateStore | None = None,
        latency_ms: Callable[[], float | None] | None = None,
        member: str | None = None,
        clock: Callable[[], float] = time.time,
        reader: Any = None,
        signals: Any = None,
    ) -> None:
        from remediation.lease import LocalLease

        self.cfg = cfg
        self.raw_admin = admin
        self.admin = FencedAdmin(admin, self.fence)
        self.member = member or default_member()
        self.remediations: dict[str, Remediation] = load_remediations(cfg.remediations)
        self.state: StateStore = state or FileStateStore(cfg.state_dir / "state.json")
        self.audit = AuditLog(cfg.audit_path, self.member)
        self.lease = lease or LocalLease()
        self.latency_ms = latency_ms or (lambda: None)
        self.clock = clock
        rb = cfg.remediations.get("rebalance_disks") or {}
        self.reader = reader or ClusterReader(
            admin, rb.get("capacity_bytes") if isinstance(rb, dict) else None
        )
        if signals is None and cfg.impact.enabled:
            signals = HealthSignals(cfg.impact, cfg.kafka, self.reader.under_replicated, clock)
        self.signals = signals
        self.errors_total = 0
        self.dropped: Counter[str] = Counter()
        self._restore_tried: dict[str, float] = {}
        self._stood_down = False
        self.seen = SeenFindings()
        self._load_seen()

    # -- reading the cluster, holding the lease ---------------------------------------------------

    def view(self) -> ClusterView:
        return self.reader.view()

    @property
    def shared(self) -> bool:
        return isinstance(self.state, TopicStateStore)

    def fence(self) -> None:
        """Raise :class:`Fenced` unless this remediator provably holds the lease right now."""
        if not self.lease.held() and not self.lease.wait_held():
            raise Fenced("the lease is not held")
        self.state.fence()

    def activate(self) -> None:
        """This remediator just acquired the lease: load the state the last holder left (the
        shared state, or the file), then finish or cancel the actions left running."""
        if isinstance(self.state, TopicStateStore):
            self.state.activate()
        elif isinstance(self.state, FileStateStore):
            self.state.reload()
        self._load_seen()
        self._stood_down = False
        self.audit.write("lease_acquired", member=self.member, state=self.state_summary())
        self.recover()

    def _ensure_active(self) -> bool:
        """For callers without a serve loop (a findings pipeline): activate on first holding."""
        if not self.lease.held():
            return False
        if isinstance(self.state, TopicStateStore) and not self.state.active:
            self.activate()
        return True

    def stand_down(self, reason: str) -> dict[str, Any]:
        """Fenced or the lease lost: forget the shared state (the next holder owns it)."""
        if isinstance(self.state, TopicStateStore):
            self.state.deactivate()
        self.seen = SeenFindings()
        if self._stood_down:
            return {"event": "fenced", "reason": reason}
        self._stood_down = True
        return self.audit.write("fenced", reason=reason, member=self.member)

    def _load_seen(self) -> None:
        t = self.state.data["tracker"]
        self.seen = SeenFindings.restored(t.get("active") or {}, t.get("cleared") or {})

    def state_summary(self) -> dict[str, Any]:
        d = self.state.data
        return {
            "running": [a["id"] for a in self.state.running()],
            "settling": [a["id"] for a in self.state.settling()],
            "demoted": dict(d["demoted"]),
            "paused": d["paused"],
            "breaker": d["breaker"],
            "offsets": dict(d["offsets"]),
        }

    # -- the entry point --------------------------------------------------------------------------

    def handle(self, finding: Finding | dict[str, Any] | Any) -> dict[str, Any]:
        """Handle one finding; returns the audit event that says what happened to it."""
        try:
            if not self._ensure_active():
                return self.audit.write("refused", subject=_subject(finding), reason=STANDBY)
            return self._handle(finding)
        except Fenced as e:
            return self.stand_down(str(e))

    def _handle(self, raw: Any) -> dict[str, Any]:
        now = self.clock()
        admitted = self.admit(raw, now)
        if isinstance(admitted, intake.Dropped):
            return self.drop(admitted)
        finding = admitted
        self.seen.observe(finding.rule, finding.subject, finding.active, now)
        self._save_seen()
        if not finding.active:
            return self.audit.write("cleared", rule=finding.rule, subject=finding.subject)
        if self.state.data["paused"]:
            self.state.data["pending"].append(finding.to_dict())
            self.state.save()
            return self.audit.write(
                "queued", key=finding.dedup_key(), subject=finding.subject, reason="paused"
            )
        return self._decide(finding, now)

    def admit(self, raw: Any, now: float) -> Finding | intake.Dropped:
        """The boundary (:func:`remediation.intake.admit`) with this cluster's brokers and the
        evidence check of the remediation the finding's rule maps to."""

        def check(f: Finding) -> str | None:
            rem = self.remediations.get(self.cfg.rules.get(f.rule, ""))
            return rem.check_evidence(f) if rem is not None else None

        return intake.admit(
            raw,
            cluster=self.cfg.cluster,
            brokers=self.reader.brokers(),
            now_s=now,
            cfg=self.cfg.intake,
            check_evidence=check,
        )

    def drop(self, dropped: intake.Dropped) -> dict[str, Any]:
        """Count and audit a finding refused at the boundary (the state is saved with the next write)."""
        self.dropped[dropped.reason] += 1
        counts = self.state.data["dropped"]
        counts[dropped.reason] = counts.get(dropped.reason, 0) + 1
        log.warning("dropped a finding (%s): %s %s", dropped.reason, dropped.detail, dropped.preview)
        return self.audit.write(
            "dropped", reason=dropped.reason, detail=dropped.detail, finding=dropped.preview
        )

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
        cap_reason = self._caps(plan, view)
        if cap_reason is not None:
            return self.audit.write(
                "refused", key=key, subject=finding.subject, reason=cap_reason, plan=plan.to_dict()
            )
        self.audit.write("plan", key=key, plan=plan.to_dict(), text=plan.describe(), before=view.summary())
        failpoint("after_plan")
        self._remember(key, now)
        if not self.cfg.execute:
            return self.audit.write(
                "dry_run", key=key, plan=plan.id, reason="execute is false: nothing changed"
            )
        if not plan.steps:
            return self.audit.write("result", key=key, plan=plan.id, status="done", note="empty plan")
        return self.run_plan(rem, plan, key, finding=finding)

    def preview(self, finding: Finding) -> tuple[Plan | None, str | None]:
        """What :meth:`handle` would plan for ``finding`` now, and the guardrail that would refuse
        it (None: it would go ahead). Changes nothing; the plan is audited as ``preview``."""
        admitted = self.admit(finding, self.clock())
        if isinstance(admitted, intake.Dropped):
            return None, f"dropped at the boundary ({admitted.reason}): {admitted.detail}"
        name = self.cfg.rules.get(finding.rule)
        if name is None:
            return None, f"no remediation for rule {finding.rule!r}"
        view = self.view()
        try:
            plan = self.remediations[name].plan(admitted, view)
        except PlanError as e:
            return None, str(e)
        reason = self._refusal(admitted, admitted.dedup_key(), self.clock()) or self._caps(plan, view)
        self.audit.write(
            "preview", plan=plan.to_dict(), text=plan.describe(), refused=reason, before=view.summary()
        )
        return plan, reason

    def _refusal(self, finding: Finding, key: str, now: float) -> str | None:
        brokers = len(self.reader.brokers())
        cb = self.cfg.circuit_breaker
        active = self.seen.current(now, cb.finding_ttl_s)
        back = guardrails.returning_brokers(self.state.data["actions"], cb.returning_grace_s, now)
        return (
            guardrails.breaker_open(self.state.data["breaker"])
            or guardrails.duplicate(key, self.state.data["acted"])
            or guardrails.circuit_open(active, brokers, cb, returning=back)
            or guardrails.cooling_down(
                finding.subject, self.state.data["last_action"], self.cfg.cooldown_s, now
            )
        )

    def _caps(self, plan: Plan, view: ClusterView) -> str | None:
        demoted = [int(b) for b in self.state.data["demoted"]]
        running = len(self.state.running()) + len(self.state.settling())
        return guardrails.over_caps(running, demoted, plan.demotes, len(view.brokers), self.cfg.caps)

    def _remember(self, key: str, now: float) -> None:
        self.state.data["acted"][key] = now
        self.state.save()

    def _save_seen(self) -> None:
        self.state.data["tracker"] = {"active": self.seen.active, "cleared": self.seen.cleared}
        self.state.save()

    # -- acting -----------------------------------------------------------------------------------

    def run_plan(
        self,
        rem: Remediation,
        plan: Plan,
        key: str,
        undo_of: str | None = None,
        finding: Finding | None = None,
    ) -> dict[str, Any]:
        now = self.clock()
        action: dict[str, Any] = {
            "id": plan.id,
            "remediation": rem.NAME,
            "subject": plan.subject,
            "key": key,
            "status": "running",
            "undo_of": undo_of,
            "started": now,
            "plan": plan.to_dict(),
            "steps": [{"status": "planned"} for _ in plan.steps],
            "throttles": {},
            "finding": _finding_summary(finding),
            "member": self.member,
        }
        watched = self.signals is not None and undo_of is None
        if watched:
            action["watch"] = Watch(before=self.signals.read().to_dict()).to_dict()
        self.state.data["actions"][plan.id] = action
        for b in plan.demotes:
            self.state.data["demoted"][str(b)] = plan.id
        self.state.data["last_action"][plan.subject] = now
        self.state.save()  # written before acting (fenced: a stale holder stops here)
        ctx = self.context(action)
        try:
            status = rem.execute_plan(plan, ctx)
            if status == "lease_lost":
                raise Fenced("the lease was lost during the action")
            rem.finish(action, ctx)
        except Fenced:
            raise  # leave the action as it is: the new holder recovers it
        except ImpactBreach as e:
            return self._stop_for_impact(rem, action, ctx, str(e))
        except Interrupted as e:
            return self._cancel_action(rem, action, ctx, str(e), key)
        except Exception as e:
            return self._failed(rem, action, ctx, e, key)
        settle = self.cfg.impact.settle_s
        if watched and status == "done" and settle > 0:
            w = Watch.from_dict(action["watch"])
            w.settle_until = self.clock() + settle
            self.state.update(plan.id, status="settling", watch=w.to_dict(), executed=self.clock())
        else:
            self.state.update(plan.id, status=status, finished=self.clock())
            if watched:
                self._evidence(action, "no settle period")
        return self.audit.write("result", key=key, plan=plan.id, status=status, after=self._summary())

    def _failed(
        self, rem: Remediation, action: dict[str, Any], ctx: Context, e: Exception, key: str
    ) -> dict[str, Any]:
        """The contract: a failed step undoes the steps already applied, and frees what it held."""
        self.errors_total += 1
        log.exception("remediation %s failed on %s", rem.NAME, action["subject"])
        undone = self._unwind(rem, action, ctx, f"action {action['id']} failed", "failed")
        self.state.data["actions"][action["id"]].update(status="failed", error=repr(e), finished=self.clock())
        opened = self._count_failure(f"{rem.NAME} on {action['subject']} failed: {e!r}")
        self.state.save()
        return self.audit.write(
            "result",
            key=key,
            plan=action["id"],
            status="failed",
            error=repr(e),
            undo=undone,
            breaker=opened,
            after=self._summary(),
        )

    def _stop_for_impact(
        self, rem: Remediation, action: dict[str, Any], ctx: Context, harm: str
    ) -> dict[str, Any]:
        """The action hurt: cancel what is in flight, clear its throttles, undo what it applied,
        pause, and open the breaker until a person resets it."""
        undone = self._unwind(rem, action, ctx, f"impact: {harm}", "cancelled")
        self.state.data["actions"][action["id"]].update(status="stopped", harm=harm, finished=self.clock())
        self.state.data["paused"] = True
        self._open_breaker(f"impact of action {action['id']}: {harm}", "impact")
        self.state.save()
        self._evidence(self.state.action(action["id"]), f"harm: {harm}")
        return self.audit.write(
            "result", plan=action["id"], status="stopped", harm=harm, undo=undone, after=self._summary()
        )

    def _unwind(
        self, rem: Remediation, action: dict[str, Any], ctx: Context, why: str, mark: str
    ) -> dict[str, Any] | None:
        """Stop ``action``: abandon its steps in flight (``intent`` may have been sent), clear its
        throttles, undo every step it touched (an undo of an undo is not attempted), free its
        demotions. Returns what the undo did."""
        touched = [i for i, st in enumerate(action["steps"]) if st["status"] in ("intent", "sent", "done")]
        for i in touched:
            if action["steps"][i]["status"] == "done":
                continue
            try:
                rem.abandon(Step.from_dict(action["plan"]["steps"][i]), ctx)
            except Fenced:
                raise
            except Exception:
                log.exception("abandoning step %d of %s failed", i, action["id"])
            self.state.step_status(action["id"], i, mark)
        self._finish_quietly(rem, action, ctx)
        undone = None
        if not action.get("undo_of"):
            undone = self._undo_steps(rem, action, [action["plan"]["steps"][i] for i in touched], why)
        self._free(action["id"])
        return undone

    def _cancel_action(
        self, rem: Remediation, action: dict[str, Any], ctx: Context, why: str, key: str
    ) -> dict[str, Any]:
        for i, s in enumerate(action["steps"]):
            if s["status"] in ("intent", "sent"):
                rem.abandon(Step.from_dict(action["plan"]["steps"][i]), ctx)
                self.state.step_status(action["id"], i, "cancelled")
        self._finish_quietly(rem, action, ctx)
        self.state.update(action["id"], status="cancelled", finished=self.clock(), reason=why)
        return self.audit.write("result", key=key, plan=action["id"], status="cancelled", reason=why)

    def _finish_quietly(self, rem: Remediation, action: dict[str, Any], ctx: Context) -> None:
        try:
            rem.finish(action, ctx)
        except Fenced:
            raise
        except Exception:
            log.exception("cleanup of action %s failed", action["id"])

    def _undo_steps(
        self, rem: Remediation, action: dict[str, Any], steps: list[dict[str, Any]], why: str
    ) -> dict[str, Any] | None:
        """Run the remediation's undo of ``steps`` of ``action`` as an audited undo action."""
        if not steps:
            return None
        partial = {**action, "plan": {**action["plan"], "steps": steps}}
        try:
            plan = rem.undo(partial, self.view())
        except Exception as e:
            log.exception("planning the undo of %s failed", action["id"])
            return self.audit.write("undo_failed", action=action["id"], error=repr(e))
        self.audit.write(
            "plan", key=f"undo:{action['id']}", plan=plan.to_dict(), text=plan.describe(), reason=why
        )
        if not plan.steps:
            return {"status": "done", "note": "nothing to undo"}
        result = self.run_plan(rem, plan, f"undo:{action['id']}", undo_of=action["id"])
        return {"plan": plan.id, "status": result.get("status")}

    def _free(self, action_id: str) -> None:
        for b, aid in list(self.state.data["demoted"].items()):
            if aid == action_id:
                del self.state.data["demoted"][b]

    def _count_failure(self, what: str) -> str | None:
        now = self.clock()
        window = self.cfg.failures.window_s
        failures = [t for t in self.state.data["failures"] if now - t < window] + [now]
        self.state.data["failures"] = failures
        if len(failures) >= self.cfg.failures.max_failures and self.state.data["breaker"] is None:
            return self._open_breaker(
                f"{len(failures)} failed actions within {window:.0f} s (last: {what})", "failures"
            )
        return None

    def _open_breaker(self, reason: str, by: str) -> str:
        self.state.data["breaker"] = {"reason": reason, "since": self.clock(), "by": by}
        self.audit.write("breaker_open", reason=reason, by=by)
        return reason

    def _evidence(self, action: dict[str, Any], verdict: str) -> None:
        """The evidence bundle of one action: what it answered, what it changed, what it did to
        the health signals (before, during, after) and the verdict; audited and kept with it."""
        w = Watch.from_dict(action["watch"]) if action.get("watch") else None
        readings = w.readings if w else []
        bundle = {
            "action": action["id"],
            "remediation": action["remediation"],
            "subject": action["subject"],
            "finding": action.get("finding"),
            "plan": {"reason": action["plan"]["reason"], "steps": len(action["plan"]["steps"])},
            "before": w.before if w else None,
            "during": [r for r in readings if r.get("phase") == "during"],
            "after": [r for r in readings if r.get("phase") == "after"],
            "verdict": verdict,
        }
        self.state.update(action["id"], evidence=bundle)
        self.audit.write("evidence", **bundle)

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
            if status == "intent":
                failpoint("after_intent")

        def record(resource: str, originals: dict[str, Any]) -> None:
            self.state.data["actions"][aid]["throttles"][resource] = originals
            self.state.save()
            self.audit.write("throttle_owned", action=aid, resource=resource, replaced=originals)

        def checkpoint() -> None:
            if any(c and c.get("command") == "cancel" for _, c in self.lease.commands()):
                raise Interrupted("an operator's cancel")
            self._check_watch(aid, "during")

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
            checkpoint=checkpoint,
        )

    def _check_watch(self, aid: str, phase: str) -> None:
        """Raise :class:`ImpactBreach` when the action's watch found harm (persists its readings)."""
        action = self.state.data["actions"].get(aid)
        if self.signals is None or action is None or not action.get("watch"):
            return
        w = Watch.from_dict(action["watch"])
        before = w.last_check
        harm = w.check(self.signals, self.cfg.impact, phase, self.clock())
        if w.last_check != before:
            self.state.update(aid, watch=w.to_dict())
        if harm is not None:
            raise ImpactBreach(harm)

    # -- restart, settle, restore, pause, undo, cancel --------------------------------------------

    def recover(self) -> list[dict[str, Any]]:
        """Finish or cancel the actions left running (by this remediator or a holder before it)."""
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
            except Fenced:
                raise
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
        """Periodic work: operator commands, the impact watch of settling actions, restoring
        demoted brokers healthy for ``restore_hold_s``, and undoing the finished actions their
        remediation finds due (:meth:`Remediation.revert_due`)."""
        try:
            if not self._ensure_active():
                return []
            now = self.clock()
            out = self.run_commands()
            out += self._settle(now)
            out += self._reverts_due(now)
            out += self._restores_due(now)
            return out
        except Fenced as e:
            return [self.stand_down(str(e))]

    def _settle(self, now: float) -> list[dict[str, Any]]:
        out = []
        for action in self.state.settling():
            rem = self.remediations.get(action["remediation"])
            failpoint("in_settle")
            try:
                self._check_watch(action["id"], "after")
            except ImpactBreach as e:
                if rem is None:
                    continue
                out.append(
                    {
                        **self._stop_for_impact(rem, action, self.context(action), str(e)),
                        "subject": action["subject"],
                    }
                )
                continue
            w = Watch.from_dict(self.state.action(action["id"])["watch"])
            if w.settle_until is not None and now >= w.settle_until:
                self.state.update(action["id"], status="done", finished=now)
                self._evidence(
                    self.state.action(action["id"]), f"no harm within {self.cfg.impact.settle_s:.0f} s"
                )
        return out

    def _restores_due(self, now: float) -> list[dict[str, Any]]:
        out = []
        for broker, aid in list(self.state.data["demoted"].items()):
            subject = f"broker:{broker}"
            since = self.seen.healthy_since(subject, now, self.cfg.circuit_breaker.finding_ttl_s)
            if since is None or now - since < self.cfg.restore_hold_s:
                continue
            if self.state.data["actions"].get(aid, {}).get("status") == "settling":
                continue  # its watch first
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
            if not rem.revert_due(action, lambda s: self.seen.healthy_since(s, now, ttl), now):
                continue
            if now - self._restore_tried.get(aid, float("-inf")) < RESTORE_RETRY_S:
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
        if action["status"] == "undone":
            return self.audit.write(
                "refused", key=f"undo:{action_id}", reason=f"action {action_id} is already undone"
            )
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
            self.state.data["actions"][action_id].update(status="undone")
            self._free(action_id)
            self.state.save()
        return result

    def pause(self) -> dict[str, Any]:
        self.state.data["paused"] = True
        self.state.save()
        return self.audit.write("paused")

    def resume(self) -> list[dict[str, Any]]:
        """Un-pause and evaluate every finding kept meanwhile, oldest first."""
        self.state.data["paused"] = False
        pending, self.state.data["pending"] = self.state.data["pending"], []
        self.state.save()
        self.audit.write("resumed", pending=len(pending))
        return [self._decide(from_dict(f), self.clock()) for f in pending]  # type: ignore[arg-type]

    def reset(self) -> dict[str, Any]:
        """A person closes the breaker (after reading why it opened); failures are forgotten."""
        was = self.state.data["breaker"]
        self.state.data["breaker"] = None
        self.state.data["failures"] = []
        self.state.save()
        return self.audit.write("breaker_reset", was=was)

    def cancel_running(self) -> list[dict[str, Any]]:
        """Operator stop: cancel the in-flight moves, clear the throttles of running actions."""
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

    def command(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """One operator command (``pause``, ``resume``, ``reset``, ``cancel``, ``undo``); returns
        its reply. Called by the holder only (through its inbox, or the CLI holding the lease)."""
        name = cmd.get("command")
        if name == "pause":
            return {"ok": True, "result": self.pause()["event"]}
        if name == "resume":
            return {"ok": True, "result": [e["event"] for e in self.resume()]}
        if name == "reset":
            return {"ok": True, "result": self.reset()["event"]}
        if name == "cancel":
            return {"ok": True, "result": [e["action"] for e in self.cancel_running()]}
        if name == "undo":
            aid = cmd.get("action")
            if not isinstance(aid, str) or aid not in self.state.data["actions"]:
                return {"ok": False, "result": f"no action {intake.preview(aid)}"}
            event = self.undo(aid, reason=f"operator ({cmd.get('by', '?')})")
            return {"ok": event.get("status") == "done" or event["event"] == "dry_run", "result": event}
        return {
            "ok": False,
            "result": f"unknown command {intake.preview(name)} (known: {', '.join(COMMANDS)})",
        }

    def run_commands(self) -> list[dict[str, Any]]:
        """Answer the commands in the lease inbox, oldest first; each reply is saved (with the
        inbox position) in the same state write."""
        out = []
        for offset, cmd in self.lease.commands():
            cid = cmd.get("id") if isinstance(cmd, dict) else None
            if not isinstance(cid, str) or cid in self.state.data["replies"]:
                self.lease.processed(offset)
                continue
            # A command's ts is the sender's wall clock, so its age is too (not the injected clock).
            age = time.time() - float(cmd["ts"]) if _number(cmd.get("ts")) else float("inf")
            if age > COMMAND_TTL_S:
                reply = {"ok": False, "result": f"expired: sent {age:.0f} s ago (max {COMMAND_TTL_S:.0f} s)"}
            else:
                reply = self.command(cmd)
            self.state.data["replies"][cid] = {"at": self.clock(), "command": cmd.get("command"), **reply}
            self.lease.processed(offset)
            self.state.save()
            out.append(
                self.audit.write("command", id=cid, command=cmd.get("command"), by=cmd.get("by"), reply=reply)
            )
        return out

    def demoted(self) -> dict[int, str]:
        return {int(b): a for b, a in self.state.data["demoted"].items()}

    def close(self) -> None:
        if self.signals is not None and hasattr(self.signals, "close"):
            self.signals.close()
        self.lease.close()
        if isinstance(self.state, TopicStateStore):
            self.state.deactivate()


def default_member() -> str:
    return f"{socket.gethostname()}-{uuid.uuid4().hex[:6]}"


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _subject(raw: Any) -> str:
    s = getattr(raw, "subject", None) if not isinstance(raw, dict) else raw.get("subject")
    return intake.preview(s) if not isinstance(s, str) or len(s) > 200 else s


def _finding_summary(f: Finding | None) -> dict[str, Any] | None:
    if f is None:
        return None
    return {
        "rule": f.rule,
        "subject": f.subject,
        "severity": f.severity,
        "ts_ms": f.ts_ms,
        "summary": f.summary[:500],
        "evidence": f.evidence,
    }
