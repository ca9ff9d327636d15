"""Where findings go: topic ``linkwatch.findings``, Prometheus gauges, the terminal.

Each sink follows :class:`analyzer.base.FindingSink`. Metric names are the ones in
``docs/metrics.md`` (Analyzer section).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge

from analyzer.base import DetectorGauge, FindingSink, GaugeValues
from linkwatch.aggregates import Aggregates
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from linkwatch.records import FINDINGS_TOPIC, Finding

log = logging.getLogger(__name__)

FINDING_LABELS = ("cluster", "rule", "subject", "severity", "broker", "stage", "follower", "topic", "group")
MAX_SERIES = 5000  # bound on label sets per gauge; beyond it series are dropped and counted


class KafkaFindingSink(FindingSink):
    """Publishes every finding (and its clearing) as a record keyed by rule/subject."""

    def __init__(
        self, kafka: KafkaClientConfig | str, topic: str = FINDINGS_TOPIC, timeout_s: float = 5.0
    ) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self.timeout_s = timeout_s
        self._producer = KafkaProducer(
            **kafka_python_kwargs(kafka, "analyzer"),
            acks="all",
            max_block_ms=int(timeout_s * 1000),
            linger_ms=50,
        )

    def emit(self, finding: Finding) -> None:
        self._producer.send(
            self.topic, key=f"{finding.rule}/{finding.subject}".encode(), value=finding.to_json()
        )

    def close(self) -> None:
        self._producer.flush(self.timeout_s)
        self._producer.close(self.timeout_s)


def finding_labels(f: Finding) -> dict[str, str]:
    ev = f.evidence
    kind, _, ident = f.subject.partition(":")
    # Broker 0 is a broker: only a missing (None) broker is no label.
    broker = ident if kind == "broker" else "" if ev.get("broker") is None else str(ev["broker"])
    topic = ident if kind == "topic" else str(ev.get("topic", "") or "")
    return {
        "cluster": f.cluster,
        "rule": f.rule,
        "subject": f.subject,
        "severity": f.severity,
        "broker": broker,
        "stage": str(ev.get("stage") or ""),
        # The follower a leader's replication waits on (stage remote), or the stalled follower.
        "follower": "" if ev.get("slow_follower") is None else str(ev["slow_follower"]),
        "topic": topic,
        "group": ident if kind == "group" else "",
    }


class PrometheusSink(FindingSink):
    """``linkwatch_finding_active`` per finding, plus the imbalance and hot-key gauges and the
    detectors' own gauges (``gauges``, see :attr:`analyzer.base.Detector.gauges`) that
    :meth:`observe` refreshes from every evaluation."""

    def __init__(
        self, registry: CollectorRegistry | None = None, gauges: Sequence[DetectorGauge] = ()
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.active = Gauge(
            "linkwatch_finding_active", "1 while a finding is active", FINDING_LABELS, registry=self.registry
        )
        self.detector_gauges = {
            g.name: Gauge(g.name, g.documentation, g.labels, registry=self.registry) for g in gauges
        }
        self.imbalance = Gauge(
            "linkwatch_imbalance_ratio",
            "max/avg - 1",
            ("cluster", "scope", "measure", "topic"),
            registry=self.registry,
        )
        self.hot_key_share = Gauge(
            "linkwatch_hot_key_share_ratio",
            "share of sampled records",
            ("cluster", "topic", "key"),
            registry=self.registry,
        )
        self.key_sampler_skipped = Counter(
            "linkwatch_key_sampler_skipped_records",
            "records the key sampler skipped ahead while behind (it reads the same share of every partition)",
            ("cluster",),
            registry=self.registry,
        )
        self.dropped = 0
        # The label values each active finding (rule, subject) set, so a change of labels while
        # it is active (its severity rising to critical, its stage or follower named anew) and
        # its clearing remove the series it set, not only the clearing's own: else a finding raised
        # as warning and cleared after it became critical stays at 1, its alert firing for good.
        # One entry per active finding.
        self._series: dict[tuple[str, str], tuple[str, ...]] = {}

    def emit(self, finding: Finding) -> None:
        values = tuple(finding_labels(finding).values())
        key = (finding.rule, finding.subject)
        before = self._series.pop(key, None)
        if finding.active:
            if before is not None and before != values:
                self._remove(before)
            self.active.labels(*values).set(1)
            self._series[key] = values
        else:  # the series it set (its clearing's own labels if it was never seen active)
            self._remove(before or values)

    def _remove(self, values: tuple[str, ...]) -> None:
        with contextlib.suppress(KeyError):  # never set, or removed already
            self.active.remove(*values)

    def observe(self, data: Aggregates, measured: GaugeValues, max_hot_keys: int = 20) -> None:
        """Refresh the gauges from one evaluation: ``data`` and the detectors' gauge values."""
        for name, gauge in self.detector_gauges.items():
            gauge.clear()
            for labels, value in measured.get(name, {}).items():
                gauge.labels(*labels).set(value)
        self.imbalance.clear()
        latest: dict[tuple[str, str, str], tuple[int, float]] = {}
        for r in data.imbalances:
            k = (r.scope, r.measure, r.group)
            if k not in latest or r.window_start_ms > latest[k][0]:
                latest[k] = (r.window_start_ms, r.ratio)
        for n, ((scope, measure, topic), (_, ratio)) in enumerate(sorted(latest.items())):
            if n >= MAX_SERIES:
                self.dropped += 1
                continue
            self.imbalance.labels(data.cluster, scope, measure, topic).set(ratio)
        self.hot_key_share.clear()
        for k in sorted(data.hot_keys, key=lambda k: -k.count)[:max_hot_keys]:
            self.hot_key_share.labels(data.cluster, k.topic, k.key).set(k.share)


class TerminalSink(FindingSink):
    """One line per appearance and clearing (ongoing findings are not repeated)."""

    def __init__(self, write: Callable[[str], None] = print) -> None:
        self.write = write
        self._shown: set[tuple[str, str]] = set()

    def emit(self, finding: Finding) -> None:
        ident = (finding.rule, finding.subject)
        if finding.active and ident not in self._shown:
            self._shown.add(ident)
            self.write(
                f"FIRING  [{finding.severity}] {finding.rule} {finding.subject}: {finding.summary}\n"
                f"        action: {finding.action}"
            )
        elif not finding.active:
            self._shown.discard(ident)
            self.write(f"CLEARED {finding.rule} {finding.subject}")
