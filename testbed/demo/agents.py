"""What the demo runs beside the cluster: one agent per broker, and the scrape targets.

The lag collector's component is ``testbed.demo.lag.LagComponent``; the alerting stack's is
``testbed.demo.alerting.AlertingDemoComponent``.

Each class follows :class:`testbed.demo.DemoComponent`: ``start(cluster)``, ``lines()`` (cheap,
never raises), ``stop()`` (safe after a failed start).
"""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

from linkwatch.records import FETCH_CONSUMER, PRODUCE
from linkwatch.sketch import LatencySketch
from testbed.cluster import ClusterState

# Stages shown, in the order a request passes them.
_STAGES = ("requestQueue", "local", "remote", "responseQueue", "send", "total")
_SHORT = {"requestQueue": "queue", "responseQueue": "respQ"}


class AgentsComponent:
    """One in-process agent per broker, shipping samples to ``linkwatch.samples`` on the cluster.

    Shows, per broker, the p99 of every stage of Produce and consumer Fetch from the agent's
    latest closed window (sketch quantiles, not client-side timings).
    """

    name = "agents"

    def __init__(self, window_s: int = 5, ship_samples: bool = True) -> None:
        self.window_s = window_s
        self.ship_samples = ship_samples
        self.agents: list = []
        self._latest: dict[tuple[int, str, str], tuple[float, int]] = {}  # (broker, req, stage) -> (p99, n)
        self._lock = threading.Lock()
        self._spool = tempfile.TemporaryDirectory(prefix="linkwatch-demo-spool-")

    def start(self, cluster: ClusterState) -> None:
        from testbed.agents import config_for_node, start_agents_in_process

        configs = []
        for node in cluster.nodes:
            overrides: dict = {"request_log": {"path": str(node.request_log), "window_s": self.window_s}}
            if self.ship_samples:
                overrides["kafka"] = {
                    "enabled": True,
                    "bootstrap_servers": cluster.bootstrap,
                    "spool_dir": str(Path(self._spool.name) / f"broker-{node.node_id}"),
                }
            configs.append(config_for_node(node, cluster="demo", **overrides))
        self.agents = start_agents_in_process(configs)
        for agent, _thread in self.agents:
            agent.listeners.append(self._on_window)

    def _on_window(self, win) -> None:
        with self._lock:
            for s in win.sketches:
                if s.request in (PRODUCE, FETCH_CONSUMER) and s.stage in _STAGES:
                    sk = LatencySketch.from_dict(s.sketch)
                    self._latest[(s.broker, s.request, s.stage)] = (sk.quantile(0.99) or 0.0, sk.count)

    def metrics_ports(self) -> dict[int, int]:
        return {agent.config.broker_id: agent.metrics_port for agent, _ in self.agents if agent.metrics_port}

    def lines(self) -> list[str]:
        with self._lock:
            latest = dict(self._latest)
        if not latest:
            return [f"agents: waiting for the first {self.window_s}s window to close"]
        header = f"{'agent p99 ms, last window':<25}" + "".join(f"{_SHORT.get(s, s):>8}" for s in _STAGES)
        out = [header]
        for broker in sorted({k[0] for k in latest}):
            for request in (PRODUCE, FETCH_CONSUMER):
                cells = [latest.get((broker, request, stage)) for stage in _STAGES]
                if not any(cells):
                    continue
                n = max(c[1] for c in cells if c)
                label = f"b{broker} {request} n={n}"
                out.append(f"{label:<25}" + "".join(f"{c[0]:>8.1f}" if c else f"{'-':>8}" for c in cells))
        return out

    def stop(self) -> None:
        for agent, thread in self.agents:
            agent.stop()
            thread.join(timeout=10)
        self.agents = []
        self._spool.cleanup()


def scrape_targets(agents: AgentsComponent, lag, cluster: str = "demo", analyzer=None, probe=None) -> list:
    """The /metrics endpoints the demo's Prometheus scrapes: every agent, the lag collector and,
    when they run, the analyzer (whose findings the slow-node alerts read) and the probe."""
    from testbed.alert_stack import ScrapeTarget, agent_targets

    targets = agent_targets(agents.metrics_ports(), cluster)
    if lag.metrics_port:
        targets.append(ScrapeTarget("linkwatch-lag", f"127.0.0.1:{lag.metrics_port}", {"cluster": cluster}))
    if probe is not None and probe.metrics_port:
        targets.append(
            ScrapeTarget("linkwatch-probe", f"127.0.0.1:{probe.metrics_port}", {"cluster": cluster})
        )
    if analyzer is not None and analyzer.metrics_port:
        targets.append(
            ScrapeTarget("linkwatch-analyzer", f"127.0.0.1:{analyzer.metrics_port}", {"cluster": cluster})
        )
    return targets
