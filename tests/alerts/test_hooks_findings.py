"""Findings and alert events, both ways (alerts.hooks.findings): an alert naming a broker or a
stage is a finding; a finding told to a hook is an alert event."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from alerts.hooks.base import AlertEvent
from alerts.hooks.findings import FiringAlerts, event_from_finding, finding_from_alert
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


# --- FiringAlerts: a finding clears with its last alert ----------------------------------------


def _slow(status: str, fingerprint: str, stage: str) -> tuple[AlertEvent, str]:
    labels = {"alertname": "LinkwatchSlowBrokerFinding", "rule": "slow_broker", "broker": "3", "stage": stage}
    return alert(labels, status), fingerprint


# The analyzer's finding on broker 3 named requestQueue, then responseQueue, then requestQueue
# again, then remote: each change resolves the alert of the old stage and fires the new one.
# What a notification holds is handed on in its order (the receiver puts firing first).
STAGE_CHANGES = [
    ([_slow("firing", "fpA", "requestQueue")], [True]),
    ([_slow("firing", "fpB", "responseQueue"), _slow("resolved", "fpA", "requestQueue")], [True, None]),
    ([_slow("firing", "fpA", "requestQueue"), _slow("resolved", "fpB", "responseQueue")], [True, None]),
    ([_slow("firing", "fpC", "remote"), _slow("resolved", "fpA", "requestQueue")], [True, None]),
    ([_slow("resolved", "fpC", "remote")], [False]),  # the last one: the finding clears
    ([_slow("resolved", "fpC", "remote")], [False]),  # a repeat of it still clears (nothing held)
]


def test_a_finding_whose_alert_changes_stage_stays_active_until_its_last_alert_resolves() -> None:
    firing = FiringAlerts()
    for notification, expected in STAGE_CHANGES:
        got = []
        for event, fingerprint in notification:
            out = firing.admit(finding_from_alert(event), fingerprint)
            got.append(None if out is None else out.active)
        assert got == expected, notification
    assert firing.held == 3 and len(firing) == 0


def test_alerts_of_other_findings_do_not_hold_a_clearing() -> None:
    firing = FiringAlerts()
    b2 = alert({"rule": "slow_broker", "broker": "2", "stage": "local"})
    b3 = alert({"rule": "slow_broker", "broker": "3", "stage": "local"})
    degraded3 = alert({"rule": "degraded_broker", "broker": "3", "stage": "local"})
    for event, fp in ((b2, "fp2"), (b3, "fp3"), (degraded3, "fpd3")):
        assert firing.admit(finding_from_alert(event), fp) is not None
    resolved = firing.admit(
        finding_from_alert(alert({"rule": "slow_broker", "broker": "3"}, "resolved")), "fp3"
    )
    assert resolved is not None and not resolved.active and resolved.subject == "broker:3"


def test_the_memory_is_bounded_and_a_forgotten_finding_clears() -> None:
    firing = FiringAlerts(max_findings=2, max_alerts=2)
    for b in ("1", "2", "3"):  # broker 1's finding is the least recently touched: forgotten
        firing.admit(finding_from_alert(alert({"rule": "slow_broker", "broker": b})), f"fp{b}")
    assert len(firing) == 2
    for fp in ("a", "b", "c"):  # broker 3's: fp3 and "a" forgotten, "b" and "c" kept
        firing.admit(finding_from_alert(alert({"rule": "slow_broker", "broker": "3"})), fp)
    gone = firing.admit(finding_from_alert(alert({"rule": "slow_broker", "broker": "1"}, "resolved")), "x")
    assert gone is not None and not gone.active
    resolve3 = finding_from_alert(alert({"rule": "slow_broker", "broker": "3"}, "resolved"))
    assert firing.admit(resolve3, "b") is None  # "c" still fires
    assert firing.admit(resolve3, "c") is not None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["fp1", "fp2", "fp3"])), max_size=40))
def test_a_finding_is_active_exactly_while_one_of_its_alerts_fires(events: list[tuple[bool, str]]) -> None:
    """Any interleaving of firings and resolutions of one finding's alerts: a resolution is
    handed on (a clearing) exactly when no other of its alerts fires; a firing always is."""
    firing = FiringAlerts()
    model: set[str] = set()
    for fires, fp in events:
        status = "firing" if fires else "resolved"
        out = firing.admit(finding_from_alert(alert({"rule": "slow_broker", "broker": "3"}, status)), fp)
        if fires:
            model.add(fp)
            assert out is not None and out.active
        else:
            model.discard(fp)
            assert (out is None) == bool(model)
