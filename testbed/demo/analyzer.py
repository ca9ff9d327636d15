"""The analyzer in ``linkwatch demo``: its settings for the demo's agents, and the component.

:class:`AnalyzerComponent` follows :class:`testbed.demo.DemoComponent` and runs
:class:`analyzer.service.AnalysisService` in a background thread on the demo cluster. With
``remediate_topics`` it also acts on its findings through the findings pipeline: a remediator
config written for the demo's own cluster (``execute: true`` — the demo created this cluster
and removes it at the end; nowhere else is anything executed without the operator's config)
demotes the slow broker's leadership of those topics and restores it after the fault, every
step audited under the demo directory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import yaml

from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from analyzer.sinks import TerminalSink
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.records import Finding
from testbed.load import ensure_own_topics

RESTORE_HOLD_S = 20.0  # the demo's hold before leadership returns (production default: 300 s)


def demo_remediation(
    root: Path,
    bootstrap: str,
    topics: list[str],
    cooldown_s: float = 60.0,
    restore_hold_s: float = RESTORE_HOLD_S,
    followers: str = "keep",
    settle_s: float | None = None,
) -> Path:
    """Write the demo's remediator config (demote on slow_broker, executed, tight caps) and
    return its path. ``followers``: ``demote_leadership``'s setting (``drop`` also takes the
    slow broker out of the replica sets it follows). ``settle_s``: how long the impact guard
    watches a finished action (a demoted broker is restored only after it; the product's
    default when None)."""
    cfg: dict[str, Any] = {
        "cluster": "demo",
        "kafka": {"bootstrap_servers": bootstrap},
        "execute": True,
        "state_dir": str(root / "remediation"),
        "rules": {"slow_broker": "demote_leadership"},
        "remediations": {
            "demote_leadership": {"topics": topics, "step_deadline_s": 30, "followers": followers}
        },
        "cooldown_s": cooldown_s,
        "restore_hold_s": restore_hold_s,
        "caps": {"max_concurrent_actions": 1, "max_demoted_brokers": 1},
        "lease": {"enabled": False},  # one remediator in the demo
    }
    if settle_s is not None:
        cfg["impact"] = {"settle_s": settle_s}
    path = root / "remediation.yaml"
    root.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


class _EventNotifier:
    """The pipeline's notifier in the demo: one display line per decision."""

    name = "demo"

    def __init__(self, emit) -> None:
        self.emit = emit

    def notify(self, finding: Finding, outcome: dict[str, Any]) -> None:
        # The remediator's answer: "remediation" for a finding, "outcome" for its periodic work.
        done = outcome.get("remediation") or outcome.get("outcome") or {}
        event = done.get("status") or done.get("event") or outcome.get("reason", "")
        self.emit(f"remediation: {outcome.get('action')} {finding.rule} {finding.subject}: {event}")


def demo_config(window_s: int = 5, spark_log: Path | None = None) -> AnalyzerConfig:
    """The analyzer's settings in the demo: the demo's agents (cluster ``demo``, ``window_s``
    windows), a lookback wide enough that the stream's latency plus one evaluation on a busy
    machine still leaves the detectors their history, its findings on /metrics at a free
    loopback port (the demo's Prometheus alerts on them: one story on both paths). The screen is
    the demo's: no Spark progress bars, and Spark's log goes to ``spark_log`` (named on screen)."""
    return AnalyzerConfig(
        spark_conf={"spark.ui.showConsoleProgress": "false"},
        spark_log=spark_log,
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
        metrics=AnalyzerMetricsConfig(enabled=True, port=0),
    )


class AnalyzerComponent:
    """The analyzer as a demo component (start / lines / stop), ticking in a background thread."""

    name = "analyzer"

    def __init__(
        self,
        cfg: AnalyzerConfig | None = None,
        max_lines: int = 8,
        remediate_topics: list[str] | None = None,
        cooldown_s: float = 60.0,
        followers: str = "keep",
        restore_hold_s: float = RESTORE_HOLD_S,
        settle_s: float | None = None,
    ) -> None:
        self.cfg = cfg
        self.settle_s = settle_s
        self.remediate_topics = remediate_topics
        self.cooldown_s = cooldown_s
        self.followers = followers
        self.restore_hold_s = restore_hold_s
        self.events: deque[str] = deque(maxlen=max_lines)  # bounded: the latest appear/clear lines
        self.service: AnalysisService | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, cluster) -> None:
        cfg = self.cfg or demo_config()
        cfg = cfg.model_copy(
            update={
                "kafka": KafkaClientConfig(bootstrap_servers=cluster.bootstrap),
                "state_dir": Path(cluster.root) / "analyzer",
            }
        )
        if cfg.spark_log is not None:
            cfg.spark_log.unlink(missing_ok=True)  # this run's log only
        # It reads the samples topic and may publish findings; the cluster creates no topic on use.
        ensure_own_topics(cluster.bootstrap, cfg.samples_topic, cfg.findings_topic)
        pipeline = None
        if self.remediate_topics:
            from findings.pipeline import PipelineConfig, build_pipeline

            path = demo_remediation(
                Path(cluster.root) / "acting",
                cluster.bootstrap,
                self.remediate_topics,
                self.cooldown_s,
                restore_hold_s=self.restore_hold_s,
                followers=self.followers,
                settle_s=self.settle_s,
            )
            pipeline = build_pipeline(PipelineConfig(config=path), [_EventNotifier(self._event)])
        self.service = AnalysisService(cfg, sinks=[TerminalSink(self._event)], pipeline=pipeline).start()
        self._thread = threading.Thread(
            target=self.service.run, args=(self._stop,), name="analyzer", daemon=True
        )
        self._thread.start()

    @property
    def metrics_port(self) -> int | None:
        """Where the analyzer serves its findings' gauges (None: not started or not serving)."""
        return None if self.service is None else self.service.metrics_port

    def _event(self, line: str) -> None:
        self.events.append(f"{time.strftime('%H:%M:%S')} {line.splitlines()[0]}")

    def lines(self) -> list[str]:
        active = [] if self.service is None else list(self.service.engine.tracker.active.values())
        log = self.service.cfg.spark_log if self.service is not None else None
        head = [f"active findings: {len(active)}" + (f"  (Spark's log: {log})" if log else "")] + [
            f"  {f.rule} {f.subject} [{f.severity}]" for f in active[:5]
        ]
        return head + list(self.events)

    def summary(self) -> list[str]:
        """Every appear/clear event of the run (printed by the demo at the end)."""
        if self.service is None:
            return ["analyzer: not started"]
        events = [f"analyzer: {line}" for line in self.events] or ["analyzer: no finding appeared or cleared"]
        log = self.service.cfg.spark_log
        return events + ([f"analyzer: Spark's log is in {log}"] if log else [])

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.service is not None:
            self.service.stop()
