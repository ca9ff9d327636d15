"""Findings and alert events, both ways (alerts.hooks.findings): an alert naming a broker or a
stage is a finding; a finding told to a hook is an alert event."""

from __future__ import annotations

import pytest

from alerts.hooks.base import AlertEvent
from alerts.hooks.findings import event_from_finding, finding_from_alert
from tests.findings.kit import finding


def alert(labels: dict[str, str], status: str = "firing") -> AlertEvent:
    return AlertEvent(
        status=status,
        labels={"alertname": "LinkwatchSlowBroker", **labels},
        annotations={"summary": "slow"},
        starts_at="",
        ends_at="",
        fingerprint="fp1",
        received_at=5.0,
    )


ALERT_ROWS = [
    ({"broker": "2", "stage": "local", "severity": "critical"}, "broker:2", "critical", "local", True),
    ({"broker": "1"}, "broker:1", "warning", None, True),
    ({"stage": "send", "severity": "bogus"}, "alert:fp1", "warning", "send", True),
    # LinkwatchSlowClientFinding: the client is the subject, not the broker it was slow on
    ({"broker": "1", "subject": "client:etl-7", "stage": "send"}, "client:etl-7", "warning", "send", True),
    ({"broker": "2", "subject": "topic:orders"}, "broker:2", "warning", None, True),
]


@pytest.mark.parametrize("labels,subject,severity,stage,active", ALERT_ROWS)
def test_alert_with_broker_or_stage_is_a_finding(labels, subject, severity, stage, active) -> None:
    f = finding_from_alert(alert(labels))
    assert f is not None
    assert (f.subject, f.severity, f.evidence["stage"], f.active) == (subject, severity, stage, active)
    assert f.rule == "LinkwatchSlowBroker" and f.ts_ms == 5000


def test_alert_without_broker_or_stage_is_not_a_finding() -> None:
    assert finding_from_alert(alert({"topic": "a"})) is None


def test_resolved_alert_clears() -> None:
    f = finding_from_alert(alert({"broker": "2"}, status="resolved"))
    assert f is not None and not f.active


def test_event_from_finding_labels() -> None:
    e = event_from_finding(finding(), {"action": "notify"})
    assert dict(e.labels) == {
        "alertname": "slow_broker",
        "cluster": "c",
        "subject": "broker:2",
        "severity": "warning",
        "linkwatch_action": "notify",
        "broker": "2",
        "stage": "local",
    }
    assert e.status == "firing" and e.fingerprint == "slow_broker/broker:2"
