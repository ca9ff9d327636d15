"""``linkwatch alerts serve`` with a ``remediation:`` section, over real HTTP on loopback: an
alert that names a broker goes through the findings pipeline (its dispatcher calls the hooks,
with what was decided); any other alert goes to the hooks directly, as without the section."""

from __future__ import annotations

import json
import time
from pathlib import Path

from alerts.config import ReceiverConfig
from alerts.hooks.memory import MemoryNotifier
from alerts.receiver import AlertReceiver
from tests.alerts.test_receiver import TOKEN, Exploding, alert, message, post


def test_broker_alert_goes_through_the_pipeline(tmp_path: Path) -> None:
    memory = MemoryNotifier({"max_events": 100})
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "audit.jsonl", remediation={"policy": {}})
    with AlertReceiver(cfg, hooks=[Exploding(), memory]) as r:
        other = alert(broker="3")
        other["labels"] = {"alertname": "LinkwatchLagStalled", "group": "g1"}
        other["fingerprint"] = "fpg"
        assert post(r.url, message(alert(broker="2"), other))[0] == 200
        events = memory.wait_for(2, 5.0)
        assert r.pipeline is not None
        assert r.pipeline.errors == {"notifier:exploding": 1}  # counted; memory still ran
    by_name = {e.labels["alertname"]: e for e in events}
    slow = by_name["LinkwatchSlowBroker"]
    # No remediator configured: the default REMEDIATE row for slow_broker is not this rule, so the
    # alert is notified, labelled with the pipeline's decision.
    assert slow.labels["subject"] == "broker:2" and slow.labels["linkwatch_action"] == "notify"
    assert json.loads(slow.annotations["outcome"])["change"] == "appeared"
    assert "linkwatch_action" not in by_name["LinkwatchLagStalled"].labels  # straight to the hooks
    audited = [e for e in r.audit.read() if e.get("event") == "pipeline"]
    assert [a["subject"] for a in audited] == ["broker:2"]


def test_without_the_section_every_alert_goes_to_the_hooks(tmp_path: Path) -> None:
    memory = MemoryNotifier({"max_events": 100})
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "audit.jsonl")
    with AlertReceiver(cfg, hooks=[memory]) as r:
        assert r.pipeline is None
        assert post(r.url, message(alert(broker="2")))[0] == 200
        (event,) = memory.wait_for(1, 5.0)
    assert event.labels["alertname"] == "LinkwatchSlowBroker" and "linkwatch_action" not in event.labels


def test_slow_client_alert_is_the_clients_finding(tmp_path: Path) -> None:
    """LinkwatchSlowClientFinding carries the broker the client was slow on and the client as
    ``subject``: the pipeline gets the client's finding, never a broker's. The policy here drops
    every broker's finding; the slow client still reaches the hooks, as ``client:etl-7``."""
    memory = MemoryNotifier({"max_events": 100})
    policy = {"rules": [{"subject": "broker:*", "action": "ignore"}]}
    cfg = ReceiverConfig(
        port=0, token=TOKEN, audit_log=tmp_path / "audit.jsonl", remediation={"policy": policy}
    )
    client = alert(broker="1")
    client["labels"] = {
        "alertname": "LinkwatchSlowClientFinding",
        "cluster": "c1",
        "rule": "slow_client",
        "subject": "client:etl-7",
        "severity": "warning",
        "source": "analyzer",
        "broker": "1",
        "stage": "send",
    }
    client["fingerprint"] = "fpc"
    with AlertReceiver(cfg, hooks=[memory]) as r:
        assert post(r.url, message(alert(broker="2"), client))[0] == 200
        (event,) = memory.wait_for(1, 5.0)
    audited = [e for e in r.audit.read() if e.get("event") == "pipeline"]
    # an ignored finding has no outcome: the pipeline sends nothing for it
    assert sorted((a["rule"], a["subject"], (a["outcome"] or {}).get("action")) for a in audited) == [
        ("LinkwatchSlowBroker", "broker:2", None),
        ("slow_client", "client:etl-7", "notify"),
    ]
    assert (event.labels["alertname"], event.labels["subject"], event.labels["stage"]) == (
        "slow_client",
        "client:etl-7",
        "send",
    )
    assert "broker" not in event.labels  # nothing downstream reads it as a broker's finding


def _stage_alert(status: str, stage: str, fingerprint: str) -> dict:
    a = alert(broker="3", status=status)
    a["labels"] = {
        "alertname": "LinkwatchSlowBrokerFinding",
        "cluster": "c1",
        "rule": "slow_broker",
        "broker": "3",
        "stage": stage,
        "severity": "warning",
    }
    a["fingerprint"] = fingerprint
    return a


def test_a_finding_whose_stage_changes_is_not_cleared_until_its_last_alert_resolves(tmp_path: Path) -> None:
    """The analyzer's finding on broker 3 changes stage twice while its fault is on: Prometheus
    resolves the old stage's alert and fires the new one, both in the next notification, the
    resolution first (as Alertmanager sent them in a fault-matrix run). The pipeline hears the
    finding appear once and clear once, when the last alert resolves: never cleared mid-fault
    (a remediation would restore the broker it demoted)."""
    memory = MemoryNotifier({"max_events": 100})
    cfg = ReceiverConfig(port=0, token=TOKEN, audit_log=tmp_path / "audit.jsonl", remediation={"policy": {}})
    notifications = [
        [_stage_alert("firing", "requestQueue", "fpA")],
        [_stage_alert("resolved", "requestQueue", "fpA"), _stage_alert("firing", "responseQueue", "fpB")],
        [_stage_alert("resolved", "responseQueue", "fpB"), _stage_alert("firing", "remote", "fpC")],
        [_stage_alert("resolved", "remote", "fpC")],
    ]
    with AlertReceiver(cfg, hooks=[memory]) as r:
        for n in notifications:
            assert post(r.url, message(*n))[0] == 200
        # every one of the six alert events judged (a pipeline line each) before reading
        deadline = time.monotonic() + 10.0
        while sum(e.get("event") == "pipeline" for e in r.audit.read()) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        events = memory.wait_for(2, 5.0)
        assert r.stats["resolved_while_another_fires"] == 2
    changes = [json.loads(e.annotations["outcome"])["change"] for e in events]
    assert changes == ["appeared", "cleared"], changes
    assert events[1].status == "resolved" and events[1].labels["subject"] == "broker:3"
    kept = [e for e in r.audit.read() if str(e.get("outcome", "")).startswith("kept active")]
    assert [e["fingerprint"] for e in kept] == ["fpA", "fpB"]
