"""The lag collector as a demo component (``start(cluster)``, ``lines()``, ``stop()``).

Runs :func:`lag.runner.start_in_thread` against the demo cluster: short window,
page-cache windows from this host's /proc (the demo's brokers share it) with confirmation on
their log dirs, samples and findings published to the cluster, /metrics on a free loopback port.
"""

from __future__ import annotations

from typing import Any

from lag.runner import LagConfig, LagService, format_statuses, start_in_thread
from testbed.cluster import ClusterState
from testbed.load import ensure_own_topics


class LagComponent:
    name = "lag"

    def __init__(self, interval_s: float = 2.0, window_s: float = 20.0, publish: bool = True) -> None:
        self.interval_s = interval_s
        self.window_s = window_s
        self.publish = publish
        self.service: LagService | None = None
        self.metrics_port: int | None = None
        self._thread: Any = None
        self._stop: Any = None
        self._findings: list[str] = []

    def config(self, cluster: ClusterState) -> LagConfig:
        return LagConfig.model_validate(
            {
                "kafka": {"bootstrap_servers": cluster.bootstrap},
                "cluster": "demo",
                "instance": "demo-lag",
                "interval_s": self.interval_s,
                "collector": {"window_s": self.window_s, "min_evaluations": 4},
                "metrics": {"port": 0},
                "publish": {"samples": self.publish, "findings": self.publish},
                "cold_read": {
                    "windows_from": "proc",
                    "confirm": "local",
                    "log_dirs": {n.node_id: n.log_dirs for n in cluster.nodes},
                },
            }
        )

    def start(self, cluster: ClusterState) -> None:
        if self.publish:
            ensure_own_topics(cluster.bootstrap)  # the cluster creates no topic on use
        self._thread, self._stop, self.service = start_in_thread(self.config(cluster), printer=self._keep)
        self.metrics_port = self.service.serve_metrics()

    def _keep(self, text: str) -> None:
        if text.startswith("finding: "):
            self._findings = [*self._findings[-4:], text]

    def lines(self) -> list[str]:
        last = self.service.last if self.service is not None else None
        if last is None:
            return ["lag: waiting for the first pass"]
        return [f"lag (pass {last.duration_s:.2f}s, {last.admin_calls} admin calls)"] + (
            format_statuses(last).splitlines() + self._findings
        )

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._thread.join(timeout=15)
        self._stop = None
