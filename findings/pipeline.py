"""The findings pipeline: track → decide → act, one path for every finding source.

The analyzer, the lag collector and the alerts receiver each hand findings to
:meth:`FindingPipeline.handle` (an event: a finding appearing, repeating, or ``active=False``
when it clears). The pipeline:

1. **tracks** it (:class:`findings.tracker.FindingTracker`): APPEARED / ONGOING / CLEARED per
   (rule, subject);
2. **decides** (:func:`findings.policy.decide`): IGNORE / NOTIFY / REMEDIATE / CHECK_LATER;
   a CHECK_LATER finding is held and decided again by :meth:`FindingPipeline.tick` once its
   delay passed (if it has not cleared meanwhile);
3. **acts** through the :class:`Dispatcher`, the only caller of notifiers and of the
   remediator. Every action (the remediator's answer included) is also sent to the notifiers.

While :attr:`FindingPipeline.paused`, findings are tracked and queued (per finding its first
and its latest event: bounded by the number of distinct subjects) and decided on
:meth:`FindingPipeline.resume` — never dropped.

Notifiers and the remediator are duck-typed so this package imports no subsystem:

* a notifier has ``notify(finding, outcome) -> object`` (``outcome``: a dict with ``change``,
  ``action``, ``reason`` and, after a remediation, ``remediation``); the alerts package adapts
  its hooks (:class:`alerts.hooks.findings.HookNotifier`);
* the remediator has ``handle(finding) -> dict`` (:class:`remediation.remediator.Remediator`).
  :func:`build_pipeline` gets one from the remediator's config file through the entry point
  ``default`` of group :data:`REMEDIATOR_GROUP` (the built-in is
  :func:`remediation.service.from_config_file`), so the acting subsystem is found by name.

A notifier or remediator that raises, or a notifier that answers ``failed``, is logged and
counted in :attr:`Dispatcher.errors`; the others still run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field, model_validator

from findings.policy import Action, FindingPolicyConfig, Verdict, decide
from findings.tracker import Change, FindingTracker
from linkwatch import plugins
from linkwatch.config import StrictModel
from linkwatch.records import Finding

# The notifiers' entry-point group (alerts.hooks.base names it too; findings imports no subsystem).
NOTIFIERS_GROUP = "linkwatch.notifiers"

log = logging.getLogger(__name__)

# Remediator answers worth trying again when the same finding repeats (the guardrail that
# refused, e.g. the circuit breaker or a cap, may have lifted since; a remediator fenced off the
# lease may hold it again). ``dropped`` is final: the finding itself was malformed.
RETRY_EVENTS = frozenset({"refused", "failed", "queued", "fenced"})
# Where the pipeline finds the remediator's builder: ``callable(config_path) -> remediator``,
# which connects and recovers what it left running before it returns.
REMEDIATOR_GROUP = "linkwatch.remediators"
REMEDIATOR = "default"


class FindingNotifier(Protocol):
    name: str

    def notify(self, finding: Finding, outcome: dict[str, Any]) -> object: ...


class FindingRemediator(Protocol):
    """What the dispatcher calls: ``handle`` for every REMEDIATE verdict. A remediator may also
    have ``tick() -> list[dict]`` for its periodic work (restoring a demoted broker after its
    hold time); the pipeline's :meth:`FindingPipeline.tick` calls it and notifies each outcome
    (each with a ``subject``)."""

    def handle(self, finding: Finding) -> dict[str, Any]: ...


class NotifierSpec(StrictModel):
    """A notifier by its entry-point name in ``linkwatch.notifiers`` (log, webhook, exec, memory);
    its options are checked at load against the notifier's own ``Options`` model."""

    type: str
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_options(self) -> NotifierSpec:
        plugins.validate_options(NOTIFIERS_GROUP, self.type, self.options, "notifiers")
        return self


class PipelineConfig(StrictModel):
    """The ``remediation:`` section of a finding source's config (analyzer, lag collector, receiver).

    ``config`` is the remediator's own config file (``config/remediation.sample.yaml``); without
    it nothing can act and every REMEDIATE verdict becomes NOTIFY.
    """

    config: Path | None = None
    policy: FindingPolicyConfig = Field(default_factory=FindingPolicyConfig)
    notifiers: list[NotifierSpec] = Field(default_factory=lambda: [NotifierSpec(type="log")])


class Dispatcher:
    """The only caller of notifiers and of the remediator; isolates each plugin's failures."""

    def __init__(
        self, notifiers: Sequence[FindingNotifier], remediator: FindingRemediator | None = None
    ) -> None:
        self.notifiers = list(notifiers)
        self.remediator = remediator
        self.errors: Counter[str] = Counter()

    def notify(self, finding: Finding, outcome: dict[str, Any]) -> None:
        for n in self.notifiers:
            name = getattr(n, "name", type(n).__name__)
            try:
                result = n.notify(finding, outcome)
            except Exception:
                self.errors[f"notifier:{name}"] += 1
                log.exception(
                    "notifier %s failed on %s %s; the others go on", name, finding.rule, finding.subject
                )
                continue
            if getattr(result, "value", result) == "failed":
                self.errors[f"notifier:{name}"] += 1
                log.warning("notifier %s reported failure on %s %s", name, finding.rule, finding.subject)

    def remediate(self, finding: Finding) -> dict[str, Any]:
        """The remediator's answer (its audit event); a raise is counted and answered ``failed``."""
        if self.remediator is None:
            return {"event": "skipped", "reason": "no remediator"}
        try:
            return dict(self.remediator.handle(finding))
        except Exception as e:
            self.errors["remediator"] += 1
            log.exception("remediator failed on %s %s; findings go on", finding.rule, finding.subject)
            return {"event": "failed", "error": repr(e)}

    def periodic(self) -> list[dict[str, Any]]:
        """The remediator's periodic work (``tick``, when it has one); a raise is counted."""
        tick = getattr(self.remediator, "tick", None)
        if tick is None:
            return []
        try:
            return [dict(o) for o in tick()]
        except Exception:
            self.errors["remediator"] += 1
            log.exception("remediator periodic work failed; findings go on")
            return []


def periodic_finding(outcome: dict[str, Any], cluster: str, now_ms: int) -> Finding:
    """A notification for the remediator's own periodic action (no finding caused it)."""
    event = str(outcome.get("status") or outcome.get("event") or "done")
    return Finding(
        cluster=cluster,
        source="remediator",
        ts_ms=now_ms,
        rule="remediation",
        subject=str(outcome.get("subject") or "cluster"),
        severity="info",
        summary=f"remediator: {event} ({outcome.get('reason', 'periodic work')})",
        evidence={},
        action="none: told for the record",
        active=False,
    )


class FindingPipeline:
    """track → decide → act for one source; thread-safe (sources may call from any thread)."""

    def __init__(
        self,
        policy: FindingPolicyConfig,
        dispatcher: Dispatcher,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.policy = policy
        self.dispatcher = dispatcher
        self.tracker = FindingTracker()
        self.clock = clock
        self.paused = False
        # While paused, per (rule, subject): its first event and its latest (two at most), so a
        # finding that appeared and cleared during the pause is still told, in order.
        self.pending: dict[tuple[str, str], list[Finding]] = {}
        # Per (rule, subject): the last (action, remediator event) sent. A repeat (ongoing) with
        # the same answer is not sent again: notifiers hear changes, not every evaluation.
        self.last: dict[tuple[str, str], tuple[str, str]] = {}
        self.counts: Counter[str] = Counter()
        self._lock = threading.RLock()

    @property
    def errors(self) -> Counter[str]:
        return self.dispatcher.errors

    def handle(self, finding: Finding) -> dict[str, Any] | None:
        """Track one finding event and, unless paused, decide and act. Returns the outcome
        sent to the notifiers (None when nothing was sent)."""
        with self._lock:
            change = self.tracker.observe(finding)
            if change is None:
                self.counts["untracked"] += 1
                return None
            self.counts[change.value] += 1
            if self.paused:
                events = self.pending.setdefault((finding.rule, finding.subject), [])
                events[1:] = [finding]
                return None
            return self._act(finding, change)

    def _act(self, finding: Finding, change: Change) -> dict[str, Any] | None:
        if change is Change.CLEARED:
            verdict = Verdict(Action.NOTIFY, 0.0, "cleared")
        else:
            verdict = decide(
                finding,
                self.policy,
                can_remediate=self.dispatcher.remediator is not None,
                active_rules=self.tracker.active_rules(),
            )
        self.counts[f"action_{verdict.action.value}"] += 1
        outcome: dict[str, Any] = {
            "change": change.value,
            "action": verdict.action.value,
            "reason": verdict.reason,
        }
        ident = (finding.rule, finding.subject)
        prev = self.last.pop(ident, None) if change is Change.CLEARED else self.last.get(ident)
        if verdict.action is Action.IGNORE:
            return None
        if change is Change.CLEARED and prev is None:
            self.counts["clear_not_sent"] += 1  # never sent (ignored, or held and gone): nothing to clear
            return None
        if verdict.action is Action.CHECK_LATER:
            self.tracker.hold(finding, self.clock() + verdict.delay_s)
            return None
        repeat = change is Change.ONGOING and prev is not None and prev[0] == verdict.action.value
        if repeat and not (verdict.action is Action.REMEDIATE and prev[1] in RETRY_EVENTS):
            self.counts["repeat_not_sent"] += 1
            return None
        if verdict.action is Action.REMEDIATE or (change is Change.CLEARED and self.dispatcher.remediator):
            # A clearing goes to the remediator too: it starts the healthy hold before a restore.
            outcome["remediation"] = self.dispatcher.remediate(finding)
        event = str(outcome.get("remediation", {}).get("event", ""))
        if change is not Change.CLEARED:
            self.last[ident] = (verdict.action.value, event)
        if repeat and prev == (verdict.action.value, event):
            self.counts["repeat_not_sent"] += 1  # retried, same answer: not sent again
            return None
        self.dispatcher.notify(finding, outcome)
        return outcome

    def tick(self) -> list[dict[str, Any]]:
        """Decide again every held CHECK_LATER finding whose delay passed and that is still
        active; then the remediator's periodic work (restores after the hold time), each
        outcome told to the notifiers."""
        with self._lock:
            if self.paused:
                return []
            out = []
            for f in self.tracker.due(self.clock()):
                outcome = self._recheck(f)
                if outcome is not None:
                    out.append(outcome)
            for done in self.dispatcher.periodic():
                outcome = {"change": "periodic", "action": Action.REMEDIATE.value, "outcome": done}
                cluster = str(getattr(getattr(self.dispatcher.remediator, "cfg", None), "cluster", ""))
                self.dispatcher.notify(periodic_finding(done, cluster, int(self.clock() * 1000)), outcome)
                self.counts["periodic"] += 1
                out.append(outcome)
            return out

    def _recheck(self, f: Finding) -> dict[str, Any] | None:
        verdict = decide(
            f,
            self.policy,
            can_remediate=self.dispatcher.remediator is not None,
            active_rules=self.tracker.active_rules(),
        )
        if verdict.action is Action.CHECK_LATER:
            # Still only worth a later look after its delay: it has lasted, so notify now.
            verdict = Verdict(Action.NOTIFY, 0.0, f"still active after {verdict.delay_s:g} s")
            self.counts["action_notify"] += 1
            self.last[(f.rule, f.subject)] = (verdict.action.value, "")
            outcome = {
                "change": Change.ONGOING.value,
                "action": verdict.action.value,
                "reason": verdict.reason,
            }
            self.dispatcher.notify(f, outcome)
            return outcome
        return self._act(f, Change.ONGOING)

    def pause(self) -> None:
        with self._lock:
            self.paused = True

    def resume(self) -> list[dict[str, Any]]:
        """Decide every finding that arrived while paused (its first and latest event), in
        arrival order."""
        with self._lock:
            self.paused = False
            queued, self.pending = self.pending, {}
            out = []
            for events in queued.values():
                for i, f in enumerate(events):
                    change = Change.CLEARED if not f.active else Change.ONGOING if i else Change.APPEARED
                    outcome = self._act(f, change)
                    if outcome is not None:
                        out.append(outcome)
            return out


def build_pipeline(
    cfg: PipelineConfig,
    notifiers: Sequence[FindingNotifier],
    remediator: FindingRemediator | None = None,
) -> FindingPipeline:
    """The pipeline for ``cfg``; with ``cfg.config`` and no ``remediator`` given, the remediator
    is built from that file (:func:`load_remediator`: it connects and recovers its own actions)."""
    if remediator is None and cfg.config is not None:
        remediator = load_remediator(cfg.config)
    return FindingPipeline(cfg.policy, Dispatcher(notifiers, remediator))


def load_remediator(config: Path) -> FindingRemediator:
    """The remediator for the config file ``config``, from the entry point :data:`REMEDIATOR`
    of :data:`REMEDIATOR_GROUP`; a missing or broken entry point stops start-up with a
    :class:`~linkwatch.errors.ConfigError` naming the key and the group."""
    factory = plugins.load(REMEDIATOR_GROUP, REMEDIATOR, "remediation.config")
    return factory(config)
