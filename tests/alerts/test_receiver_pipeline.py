"""``linkwatch alerts serve`` with a ``remediation:`` section, over real HTTP on loopback: an
alert that names a broker goes through the findings pipeline (its dispatcher calls the hooks,
with what was decided); any other alert goes to the hooks directly, as without the section."""

from __future__ import annotations

import json
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
