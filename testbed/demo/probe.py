"""The probe as a demo component (``start(cluster)``, ``lines()``, ``stop()``).

Runs :class:`probe.service.ProbeService` in a thread of this process against the demo cluster:
one partition of ``linkwatch.probe`` led by every broker, probes on the Poisson schedule, its
windows published to the samples topic (the analyzer reads them as the clients' view of each
leader) and its gauges on /metrics at a free loopback port (the shipped probe alerts read them).

Why the demo runs it: a broker's own request timings start when the broker reads a request, so
a leader paused between reads looks fast to itself while its clients wait. The probe is the
evidence that sees it, beside the agents'.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from probe.config import ProbeConfig
from probe.ledger import BrokerWindow
from probe.service import ProbeService, format_window
from testbed.cluster import ClusterState
from testbed.load import ensure_own_topics


class ProbeComponent:
    name = "probe"

    def __init__(
        self,
        window_s: int = 5,
        cluster: str = "demo",
        instance: str = "demo-probe",
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self.window_s = window_s
        self.cluster = cluster
        self.instance = instance
        self.settings = dict(settings or {})  # more probe settings (``ProbeConfig`` keys)
        self.service: ProbeService | None = None
        self.metrics_port: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last = ""

    def config(self, cluster: ClusterState) -> ProbeConfig:
        return ProbeConfig.model_validate(
            {
                "kafka": {"bootstrap_servers": cluster.bootstrap},
                "cluster": self.cluster,
                "instance": self.instance,
                "window_s": self.window_s,
                "metrics": {"port": 0},
                **self.settings,
            }
        )

    def start(self, cluster: ClusterState) -> None:
        cfg = self.config(cluster)
        # The probe creates and keeps its own topic (topic.manage, its default); the samples topic
        # it publishes to is linkwatch's, created as an operator creates it.
        if cfg.publish_samples:
            ensure_own_topics(cluster.bootstrap, cfg.samples_topic)
        self.service = ProbeService(cfg)
        self.metrics_port = self.service.serve_metrics()
        self._thread = threading.Thread(
            target=self.service.run, args=(self._stop, self._on_window), name="probe", daemon=True
        )
        self._thread.start()

    def _on_window(self, window_start_ms: int, windows: Mapping[int, BrokerWindow]) -> None:
        self._last = format_window(window_start_ms, windows)

    def lines(self) -> list[str]:
        if not self._last:
            return [f"probe: waiting for the first {self.window_s}s window to close"]
        return ["probe (clients' view of each leader)", *self._last.splitlines()[1:]]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        self._thread = None
        if self.service is not None:
            self.service.close()
        self.service = None
