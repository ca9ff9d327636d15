"""The analyzer in ``linkwatch demo``: its settings for the demo's agents, and the component.

:class:`AnalyzerComponent` follows :class:`linkwatch.testbed.demo.DemoComponent` and runs
:class:`analyzer.service.AnalysisService` in a background thread on the demo cluster.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path

from analyzer.service import AnalysisService, AnalyzerConfig, PrometheusConfig
from analyzer.sinks import TerminalSink


def demo_config(window_s: int = 5) -> AnalyzerConfig:
    """The analyzer's settings in the demo: the demo's agents (cluster ``demo``, ``window_s``
    windows), a lookback wide enough that the stream's latency plus one evaluation on a busy
    machine still leaves the detectors their history, no extra listening port."""
    return AnalyzerConfig(
        cluster="demo",
        window_s=window_s,
        lookback_windows=max(12, 180 // window_s),
        interval_s=2.0,
        trigger_s=4.0,
        watermark="60 seconds",
        publish_findings=True,
        detectors={
            "slow_broker": {"min_requests": 10, "history_windows": 8},
            "skewed_partitions": None,
            "disk_imbalance": None,
        },
        prometheus=PrometheusConfig(enabled=False),
    )


class AnalyzerComponent:
    """The analyzer as a demo component (start / lines / stop), ticking in a background thread."""

    name = "analyzer"

    def __init__(self, cfg: AnalyzerConfig | None = None, max_lines: int = 8) -> None:
        self.cfg = cfg
        self.events: deque[str] = deque(maxlen=max_lines)  # bounded: the latest appear/clear lines
        self.service: AnalysisService | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, cluster) -> None:
        cfg = self.cfg or demo_config()
        cfg = cfg.model_copy(
            update={"bootstrap": cluster.bootstrap, "state_dir": Path(cluster.root) / "analyzer"}
        )
        self.service = AnalysisService(cfg, sinks=[TerminalSink(self._event)]).start()
        self._thread = threading.Thread(
            target=self.service.run, args=(self._stop,), name="analyzer", daemon=True
        )
        self._thread.start()

    def _event(self, line: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {line.splitlines()[0]}")

    def lines(self) -> list[str]:
        active = [] if self.service is None else list(self.service.engine.tracker.active.values())
        head = [f"active findings: {len(active)}"] + [
            f"  {f.rule} {f.subject} [{f.severity}]" for f in active[:5]
        ]
        return head + list(self.events)

    def summary(self) -> list[str]:
        """Every appear/clear event of the run (printed by the demo at the end)."""
        if self.service is None:
            return ["analyzer: not started"]
        return [f"analyzer: {line}" for line in self.events] or ["analyzer: no finding appeared or cleared"]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.service is not None:
            self.service.stop()
