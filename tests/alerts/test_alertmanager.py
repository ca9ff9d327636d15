"""The shipped Alertmanager example config on a real Alertmanager, delivering to a real
``linkwatch alerts serve`` process: grouping, inhibition, resolved notifications, token auth."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from alerts.rules_check import ALERTMANAGER_EXAMPLE
from testbed.alert_stack import AlertStack, posted_alert

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus-alertmanager") is None or shutil.which("prometheus") is None,
    reason="Debian prometheus / prometheus-alertmanager missing",
)


def am_alert(name: str, ends_in_s: float = 3600, **labels: str) -> dict:
    stage = {"stage": "local"} if name == "LinkwatchSlowBrokerFinding" else {}
    return posted_alert(name, ends_in_s, stage, **labels)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AlertStack]:
    with AlertStack(tmp_path_factory.mktemp("am"), targets=[], fast=True) as s:
        yield s


def test_example_config_passes_amtool() -> None:
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.skip("amtool missing")
    done = subprocess.run([amtool, "check-config", str(ALERTMANAGER_EXAMPLE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_inhibition_and_routing_through_real_alertmanager(stack: AlertStack) -> None:
    # The inhibiting alerts go first and are seen delivered before their targets arrive:
    # Alertmanager's inhibitor learns of new alerts through an asynchronous subscription, so
    # sources and targets posted in one batch race on a loaded machine (a full test run saw
    # the c1 SlowBroker delivered beside its ClusterSlowdown). What is tested here is the
    # shipped inhibit_rules, not that race.
    stack.post_alerts(
        [
            am_alert("LinkwatchClusterSlowdown", cluster="c1", severity="critical"),
            am_alert("LinkwatchBrokerUnreachable", cluster="c2", broker="2", severity="critical"),
            am_alert("LinkwatchClusterLatencyHigh", cluster="c3", request="Produce", severity="critical"),
        ]
    )
    stack.wait_received(lambda r: len(r) >= 3, timeout_s=90)
    stack.post_alerts(
        [
            am_alert(
                "LinkwatchSlowBrokerFinding", cluster="c1", broker="1", request="Produce", severity="warning"
            ),
            am_alert(
                "LinkwatchSlowBrokerFinding", cluster="c2", broker="2", request="Produce", severity="warning"
            ),
            am_alert(
                "LinkwatchSlowBrokerFinding", cluster="c2", broker="3", request="Produce", severity="warning"
            ),
            # the degraded broker is inhibited like the slow one; a slow client is not
            # (its excess is in its own stage, which a cluster-wide slowdown does not explain)
            am_alert(
                "LinkwatchDegradedBrokerFinding",
                cluster="c1",
                broker="2",
                rule="degraded_broker",
                severity="info",
            ),
            am_alert(
                "LinkwatchSlowClientFinding",
                cluster="c1",
                broker="1",
                rule="slow_client",
                subject="client:etl-7",
                severity="warning",
            ),
            # the cluster-wide safety net mutes the per-broker safety net only, never the
            # analyzer's finding (it lags minutes behind a cluster-wide phase's end)
            am_alert(
                "LinkwatchBrokerLatencyHigh", cluster="c3", broker="1", request="Produce", severity="warning"
            ),
            am_alert(
                "LinkwatchSlowBrokerFinding", cluster="c3", broker="2", request="Produce", severity="warning"
            ),
        ]
    )
    got = stack.wait_received(lambda r: len(r) >= 6, timeout_s=90)
    time.sleep(5)  # two more group intervals: an inhibited alert would have arrived by now
    got = stack.received()
    seen = sorted((r["alertname"], r["labels"]["cluster"], r["labels"].get("broker", "")) for r in got)
    assert seen == [
        ("LinkwatchBrokerUnreachable", "c2", "2"),
        ("LinkwatchClusterLatencyHigh", "c3", ""),
        ("LinkwatchClusterSlowdown", "c1", ""),
        ("LinkwatchSlowBrokerFinding", "c2", "3"),
        ("LinkwatchSlowBrokerFinding", "c3", "2"),
        ("LinkwatchSlowClientFinding", "c1", "1"),
    ]
    slow = next(
        r for r in got if r["alertname"] == "LinkwatchSlowBrokerFinding" and r["labels"]["cluster"] == "c2"
    )
    assert (slow["status"], slow["annotations"]["stage"], slow["receiver"]) == (
        "firing",
        "local",
        "linkwatch",
    )

    # the fault goes away: Alertmanager sends the resolved notification
    stack.post_alerts(
        [
            am_alert(
                "LinkwatchSlowBrokerFinding",
                ends_in_s=-1,
                cluster="c2",
                broker="3",
                request="Produce",
                severity="warning",
            )
        ]
    )

    def c2(got: list[dict]) -> list[dict]:
        return [r for r in got if r["labels"]["cluster"] == "c2"]

    resolved = c2(
        stack.wait_received(lambda r: len(c2(r)) >= 2, timeout_s=90, alertname="LinkwatchSlowBrokerFinding")
    )
    assert [(r["status"], r["labels"]["broker"]) for r in resolved] == [("firing", "3"), ("resolved", "3")]


def test_alertmanager_authenticates_with_the_token(stack: AlertStack) -> None:
    """Every delivery came with the token: the receiver rejected nothing as unauthorized."""
    log = (Path(stack.workdir) / "receiver" / "receiver.log").read_text()
    assert "rejected" not in log
    assert stack.received()  # and something did arrive
