"""The demo's alerting component on the real alert stack (Prometheus, Alertmanager, the receiver)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from testbed.alert_stack import posted_alert
from testbed.demo.alerting import AlertingDemoComponent

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus-alertmanager") is None or shutil.which("prometheus") is None,
    reason="Debian prometheus / prometheus-alertmanager missing",
)


def test_a_demo_run_shows_none_of_an_earlier_runs_alerts(tmp_path: Path) -> None:
    """The demo keeps its stack directory after a run (dashboards, logs); the next run in the
    same place showed the earlier run's alerts before its own fault had started."""
    workdir = tmp_path / "alerts"
    first = AlertingDemoComponent(workdir, lambda _cluster: [])
    first.start(None)
    try:
        assert first.stack is not None
        first.stack.post_alerts(
            [
                posted_alert(
                    "LinkwatchSlowBrokerFinding",
                    annotations={"stage": "remote"},
                    cluster="demo",
                    broker="2",
                    request="Produce",
                    severity="warning",
                )
            ]
        )
        deadline = time.monotonic() + 60
        while not first.stack.received() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [r["alertname"] for r in first.stack.received()] == ["LinkwatchSlowBrokerFinding"]
    finally:
        first.stop()
    (workdir / "notes.txt").write_text("the operator's own file")

    second = AlertingDemoComponent(workdir, lambda _cluster: [])
    second.start(None)
    try:
        assert second.stack is not None
        assert second.stack.received() == []
        assert second.lines()[1] == "no alert received yet"
    finally:
        second.stop()
    assert (workdir / "notes.txt").read_text() == "the operator's own file"
