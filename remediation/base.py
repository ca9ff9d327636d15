"""The remediation contract; these docstrings are it.

A :class:`Remediation` turns one finding into changes to the cluster, in four separate calls:

* :meth:`Remediation.plan` — from the finding and a **fresh** :class:`~remediation.view.ClusterView`
  (read just before), return a :class:`Plan`: the exact changes, as JSON-serialisable
  :class:`Step` records, and why. It must not change the cluster, must not sleep, and must not
  read anything but its arguments (so a dry run is exactly the plan). An empty plan means
  "nothing to do" and is a valid answer (a balanced cluster, a broker that leads nothing).
  It may raise :class:`PlanError` when the finding cannot be acted on (wrong subject); any
  other exception is a bug: the remediator logs it, audits it and goes on with other findings.
* :meth:`Remediation.check_evidence` — pure: is the finding's evidence what :meth:`plan` reads?
  Called at the boundary (:mod:`remediation.intake`) for the remediation the finding's rule maps
  to; a message refuses the finding (dropped as ``bad_evidence``), so ``plan`` never sees it.
* :meth:`Remediation.execute` — apply **one** step and return without waiting for the cluster
  to converge. Called only when config says ``execute: true``, only while this process holds
  the lease, and only after the step was written to the persisted state (so a SIGKILL right
  after is recovered). Change the cluster only through ``ctx.admin``: every change it makes is
  fenced (:mod:`remediation.fencing`; a stale lease holder's call raises
  :class:`~remediation.state.Fenced`, which must not be caught). It may raise: the step is then
  audited as failed, the rest of the plan is not run, :meth:`undo` of the steps already applied
  (``sent`` or ``done``) is run, and what the action held (a demotion's cap, its throttles) is
  freed.
* :meth:`Remediation.verify` — has the step taken effect in this fresh view? Pure, like plan.
  The remediator polls it until true or the step's deadline; a step past its deadline is
  handed to :meth:`abandon` (e.g. cancel a reassignment, KIP-455). While waiting, call
  ``ctx.checkpoint()`` between polls: it raises when the action hurts the cluster's health
  signals (:class:`~remediation.impact.ImpactBreach`) or an operator cancelled it
  (:class:`Interrupted`); let both propagate. :meth:`execute_plan` and :meth:`await_step` do.
* :meth:`Remediation.undo` — a plan that puts back what the action's steps changed, built from
  the action's persisted record (not from memory), so it also works after a restart.
* :meth:`Remediation.revert_due` — whether one of its finished actions should now be undone by
  itself (e.g. once what it answered has been gone for a hold time); pure, asked on every tick.

:meth:`Remediation.recover` is called at start-up for every action this remediator left
``running`` (killed mid-way): it finishes or abandons the remediation's own steps only.

Remediations are plugins in the entry-point group :data:`REMEDIATION_GROUP`, chosen by name in
config; the built-ins are registered the same way. :class:`NoopRemediation` (the default)
plans a single step that only logs what it would do.
"""

from __future__ import annotations

import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from linkwatch.config import StrictModel
from linkwatch.records import Finding
from remediation.failpoints import failpoint
from remediation.view import ClusterView

REMEDIATION_GROUP = "linkwatch.remediations"

log = logging.getLogger(__name__)


class PlanError(ValueError):
    """The finding cannot be acted on by this remediation (the message says why)."""


class Interrupted(Exception):
    """An operator cancelled the running action (``linkwatch remediate cancel``)."""


@dataclass(frozen=True)
class Step:
    """One change. ``kind`` is the remediation's own verb; ``params`` are JSON values only.

    ``subject`` is what the step touches (``broker:2``, ``topic-partition:orders-3``), used by
    caps and by the audit log; ``deadline_s`` bounds how long verify may take.
    """

    kind: str
    subject: str
    params: dict[str, Any]
    deadline_s: float = 120.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Step:
        return cls(kind=d["kind"], subject=d["subject"], params=dict(d["params"]), deadline_s=d["deadline_s"])


@dataclass(frozen=True)
class Plan:
    remediation: str
    subject: str
    reason: str
    steps: tuple[Step, ...] = ()
    # Brokers whose leadership this plan takes away (the demotion cap counts them).
    demotes: tuple[int, ...] = ()
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "remediation": self.remediation,
            "subject": self.subject,
            "reason": self.reason,
            "demotes": list(self.demotes),
            "steps": [s.to_dict() for s in self.steps],
        }

    def describe(self) -> str:
        """Human-readable: exactly what would change, one line per step."""
        head = f"plan {self.id}: {self.remediation} on {self.subject} — {self.reason}"
        if not self.steps:
            return head + "\n  (nothing to change)"
        return "\n".join(
            [head, *(f"  {i + 1}. {s.kind} {s.subject} {s.params}" for i, s in enumerate(self.steps))]
        )


class RemediationConfig(StrictModel):
    """Base of every remediation's settings; defaults live in the subclass."""


@dataclass
class Context:
    """What execute/undo/recover may use, bound to one running action by the remediator.

    * ``view()`` reads a fresh :class:`ClusterView`; ``held()`` — the lease is still ours
      (checked before every step); ``step_status(i, status, **extra)`` persists a step's status;
    * ``record(resource, originals)`` persists throttles this action now owns, ``owned()``
      returns them (so undo/recover restore exactly those);
    * ``latency_ms()`` reads the brokers' Produce p99 (None when unknown); ``audit`` writes events;
    * ``checkpoint()`` raises when the action must stop (harm, an operator's cancel); call it
      while waiting.
    """

    admin: Any
    audit: Any
    view: Callable[[], ClusterView]
    held: Callable[[], bool] = lambda: True
    step_status: Callable[..., None] = lambda *a, **k: None
    record: Callable[[str, dict[str, Any]], None] = lambda *a: None
    owned: Callable[[], dict[str, dict[str, Any]]] = dict
    latency_ms: Callable[[], float | None] = lambda: None
    checkpoint: Callable[[], None] = lambda: None
    on_restart: str = "finish"
    poll_s: float = 0.5
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


class Remediation(ABC):
    NAME: ClassVar[str] = ""
    Config: ClassVar[type[RemediationConfig]] = RemediationConfig

    def __init__(self, config: RemediationConfig) -> None:
        """Store validated settings only; never connect here."""
        self.config = config

    @abstractmethod
    def plan(self, finding: Finding, view: ClusterView) -> Plan: ...

    def check_evidence(self, finding: Finding) -> str | None:
        """Why the evidence :meth:`plan` reads is unusable (None: usable). Default: plan reads none."""
        return None

    @abstractmethod
    def execute(self, step: Step, ctx: Context) -> None: ...

    def verify(self, step: Step, view: ClusterView) -> bool:
        return True

    def execute_plan(self, plan: Plan, ctx: Context) -> str:
        """Run the steps in order; returns ``done``, ``abandoned`` or ``lease_lost``.

        Each step: ``ctx.checkpoint()``, status ``intent`` persisted (a fenced write: a stale
        holder stops here), :meth:`execute`, ``sent``, then :meth:`verify` polled until true
        (``done``) or the step's deadline (:meth:`abandon`, and the rest of the plan is not run).
        Exceptions propagate to the remediator (``failed``, harm, cancelled, fenced).
        A remediation that runs steps concurrently (the rebalance pipeline) overrides this.
        """
        for i, step in enumerate(plan.steps):
            ctx.checkpoint()
            ctx.step_status(i, "intent")
            self.execute(step, ctx)
            ctx.step_status(i, "sent")
            if not self.await_step(step, ctx):
                self.abandon(step, ctx)
                ctx.step_status(i, "abandoned")
                return "abandoned"
            ctx.step_status(i, "done")
        return "done"

    def await_step(self, step: Step, ctx: Context) -> bool:
        failpoint("in_verify")
        deadline = ctx.clock() + step.deadline_s
        while True:
            if self.verify(step, ctx.view()):
                return True
            if ctx.clock() >= deadline:
                return False
            ctx.checkpoint()
            ctx.sleep(ctx.poll_s)

    def abandon(self, step: Step, ctx: Context) -> None:
        """A step did not take effect before its deadline; default: leave it (audited)."""
        return None

    def undo(self, action: dict[str, Any], view: ClusterView) -> Plan:
        return Plan(self.NAME, action.get("subject", ""), "nothing to undo")

    def revert_due(
        self, action: dict[str, Any], healthy_since: Callable[[str], float | None], now: float
    ) -> bool:
        """Should this finished action (its persisted record, status ``done`` or ``abandoned``, not
        an undo itself and not undone yet) be undone now, without an operator asking?

        ``healthy_since(subject)`` is when ``subject`` stopped having any active finding (None
        while it still has one). Pure like :meth:`plan`: no cluster reads, no sleeping. When it
        says yes, the remediator (:meth:`~remediation.remediator.Remediator.tick`) plans
        :meth:`undo` and, dry run or not, treats it like an operator's undo. Default: never."""
        return False

    def recover(self, action: dict[str, Any], ctx: Context) -> str:
        """Finish or abandon this remediation's own steps of a killed run; return what was done."""
        return "nothing to recover"

    def finish(self, action: dict[str, Any], ctx: Context) -> None:
        """Called once after every step of a plan was verified (or abandoned): clean up (throttles)."""
        return None


class NoopConfig(RemediationConfig):
    pass


class NoopRemediation(Remediation):
    """The default: plans one step that only logs what a remediation would do about the finding."""

    NAME = "noop"
    Config = NoopConfig

    def plan(self, finding: Finding, view: ClusterView) -> Plan:
        step = Step("log", finding.subject, {"rule": finding.rule, "summary": finding.summary}, 1.0)
        return Plan(self.NAME, finding.subject, f"would act on {finding.rule}", (step,))

    def execute(self, step: Step, ctx: Context) -> None:
        log.info("noop remediation: would act on %s (%s)", step.subject, step.params.get("summary"))
