"""The alerting part of ``linkwatch demo``: the alert stack scraping the demo's exporters.

Follows :class:`testbed.demo.DemoComponent` (``start(cluster)``, ``lines()``, ``stop()``);
``summary()`` is what the demo prints at the end.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.alert_stack import AlertStack, ScrapeTarget, format_alert

# What AlertStack and summary() write under the component's workdir.
STACK_DIRS = (*AlertStack.COMPONENTS, "dashboards")


class AlertingDemoComponent:
    """The alerting part of ``linkwatch demo`` (see ``testbed.demo.DemoComponent``).

    ``targets`` is called at start with the cluster and returns the /metrics endpoints to
    scrape (the agents', the lag collector's, the analyzer's). Start it after the agents::

        agents = AgentsComponent()
        alerting = AlertingDemoComponent(root / "alerts", lambda c: agent_targets(agents.metrics_ports(), "demo"))
        DemoOptions(components=[lambda: agents, lambda: alerting])
        ...
        for line in alerting.summary(): print(line)   # alerts received, dashboards, push command
    """

    name = "alerts"

    def __init__(
        self, workdir: Path, targets: Callable[[Any], list[ScrapeTarget]], fast: bool = True
    ) -> None:
        self.workdir = workdir
        self.targets = targets
        self.fast = fast
        self.stack: AlertStack | None = None

    def start(self, cluster: Any) -> None:
        # A demo starts from nothing of an earlier one in the same place (the directory is kept
        # after a run for its dashboards and logs): its receiver's audit log would show that
        # run's alerts as this one's, and its Prometheus data hold that run's series. Only the
        # stack's own subdirectories are removed.
        for name in STACK_DIRS:
            shutil.rmtree(self.workdir / name, ignore_errors=True)
        self.stack = AlertStack(
            self.workdir, self.targets(cluster), fast=self.fast, scrape_s=2, eval_s=2
        ).start()

    def lines(self) -> list[str]:
        if self.stack is None:
            return ["alerts: not started"]
        with contextlib.suppress(Exception):
            got = self.stack.received()
            head = (
                f"alerts: Prometheus {self.stack.prometheus_url}  Alertmanager {self.stack.alertmanager_url}"
            )
            return [head, *(format_alert(r) for r in got[-8:])] if got else [head, "no alert received yet"]
        return ["alerts: (audit log unreadable)"]

    def summary(self) -> list[str]:
        """What to print at the end: every alert received, the dashboards and how to push them."""
        from dashboards.build import write_all

        lines = ["alerts received by linkwatch alerts serve:"]
        got = self.stack.received() if self.stack is not None else []
        lines += [f"  {format_alert(r)}" for r in got] or ["  (none)"]
        out = self.workdir / "dashboards"
        lines.append("dashboards:")
        lines += [f"  {p}" for p in write_all(out)]
        lines.append(
            f"push them: linkwatch dashboards push --dir {out} --url http://<grafana>:3000 --token $GRAFANA_TOKEN"
        )
        return lines

    def stop(self) -> None:
        if self.stack is not None:
            self.stack.stop()
