"""Findings and alert events, both ways: the pipeline's notifiers are the alert hooks.

* :class:`HookNotifier` adapts a hook (log, webhook, exec, memory) to the findings pipeline's
  notifier interface (:mod:`findings.pipeline`): each finding, with what the pipeline did
  about it, becomes one :class:`AlertEvent` (labels ``alertname`` = rule, ``subject``,
  ``severity``, ``broker``, ``stage``, ``linkwatch_action``; annotations ``summary``,
  ``action``, ``outcome`` as JSON).
* :func:`finding_from_alert` turns an alert that names a broker (label ``broker``) or a stage
  (label ``stage``) into a finding, so the receiver can send it through the same pipeline; any
  other alert returns None and goes to the hooks as before. A slow client's alert keeps the
  client as its subject (label ``subject``, ``client:<id>``), never its broker's.
* :class:`FiringAlerts`: one finding may be carried by several alerts at once, and it clears
  only when the last of them resolves.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from alerts.hooks import Hook, HookResult, load_hook
from alerts.hooks.base import AlertEvent
from linkwatch.records import Finding

SEVERITIES = {"info", "warning", "critical"}


class HookNotifier:
    """One hook as a findings-pipeline notifier; the hook's own contract still holds."""

    def __init__(self, hook: Hook) -> None:
        self.hook = hook
        self.name = hook.name

    def notify(self, finding: Finding, outcome: dict[str, Any]) -> HookResult:
        return self.hook.handle(event_from_finding(finding, outcome))

    def close(self) -> None:
        self.hook.close()


def load_notifiers(specs: Sequence[Any]) -> list[HookNotifier]:
    """Build every notifier (``type`` / ``options``) before anything runs: a typo fails start-up."""
    return [HookNotifier(load_hook(s.type, s.options)) for s in specs]


def event_from_finding(f: Finding, outcome: dict[str, Any]) -> AlertEvent:
    kind, _, ident = f.subject.partition(":")
    labels = {
        "alertname": f.rule,
        "cluster": f.cluster,
        "subject": f.subject,
        "severity": f.severity,
        "linkwatch_action": str(outcome.get("action", "")),
    }
    if kind == "broker":
        labels["broker"] = ident
    if f.evidence.get("stage"):
        labels["stage"] = str(f.evidence["stage"])
    return AlertEvent(
        status="firing" if f.active else "resolved",
        labels=labels,
        annotations={
            "summary": f.summary,
            "action": f.action,
            "outcome": json.dumps(outcome, default=str, sort_keys=True),
        },
        starts_at="",
        ends_at="",
        fingerprint=f"{f.rule}/{f.subject}",
        received_at=time.time(),
    )


def finding_from_alert(event: AlertEvent, cluster: str = "default") -> Finding | None:
    """The finding an alert carries: ``broker`` label → subject ``broker:<id>``; ``stage`` → evidence.

    A ``subject`` label that names a client (``client:<id>``, LinkwatchSlowClientFinding's) is
    the subject, whatever ``broker`` says: a slow client is the client's finding, as the
    analyzer raised it, and must never reach the policy as a broker's (its ``broker`` label is
    only the broker it was slow on)."""
    broker = event.labels.get("broker", "")
    stage = event.labels.get("stage", "")
    if not broker and not stage:
        return None
    severity = event.labels.get("severity", "warning")
    named = event.labels.get("subject", "")
    if named.startswith("client:"):
        subject = named
    else:
        subject = f"broker:{broker}" if broker else f"alert:{event.fingerprint}"
    return Finding(
        cluster=event.labels.get("cluster", cluster),
        source="alerts-receiver",
        ts_ms=int((event.received_at or time.time()) * 1000),
        rule=event.labels.get("rule") or event.alertname or "alert",
        subject=subject,
        severity=severity if severity in SEVERITIES else "warning",
        summary=event.annotations.get("summary", event.alertname),
        evidence={"stage": stage or None, "alert": event.to_dict()},
        action=event.annotations.get("description", ""),
        active=event.status != "resolved",
    )


class FiringAlerts:
    """Which alerts carry each finding, so that a finding clears only when its last alert does.

    A finding is (cluster, rule, subject); an alert is its label set (its fingerprint). The
    analyzer's slow-broker alert has the finding's stage and follower among its labels, so when
    the stage an ongoing finding names changes, Prometheus resolves the alert of the old label
    set and fires one of the new: two alerts of one finding, both in the next notification, in
    either order. Read one at a time, the resolution would clear the finding while the fault is
    on (a remediation then restores the broker it demoted) and the next firing would raise it
    again. :meth:`admit` passes a firing alert's finding on and holds back the resolution of one
    alert while another alert of the same finding still fires (counted in :attr:`held`).

    Bounded: at most ``max_findings`` findings and ``max_alerts`` alerts per finding are
    remembered, the least recently touched forgotten first; a resolution of a forgotten finding
    passes on (it clears, as it would without this bookkeeping)."""

    def __init__(self, max_findings: int = 10_000, max_alerts: int = 64) -> None:
        self.max_findings = max_findings
        self.max_alerts = max_alerts
        self._firing: OrderedDict[tuple[str, str, str], OrderedDict[str, None]] = OrderedDict()
        self.held = 0

    def admit(self, finding: Finding, fingerprint: str) -> Finding | None:
        """The finding to hand on for this alert event, or None for the resolution of one alert
        while another alert of the same finding still fires."""
        key = (finding.cluster, finding.rule, finding.subject)
        alerts = self._firing.get(key)
        if finding.active:
            if alerts is None:
                alerts = self._firing[key] = OrderedDict()
                while len(self._firing) > self.max_findings:
                    self._firing.popitem(last=False)
            self._firing.move_to_end(key)
            alerts[fingerprint] = None
            alerts.move_to_end(fingerprint)
            while len(alerts) > self.max_alerts:
                alerts.popitem(last=False)
            return finding
        if alerts is None:
            return finding
        alerts.pop(fingerprint, None)
        if alerts:
            self.held += 1
            return None
        del self._firing[key]
        return finding

    def __len__(self) -> int:
        return len(self._firing)
