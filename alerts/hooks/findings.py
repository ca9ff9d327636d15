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
"""

from __future__ import annotations

import json
import time
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
