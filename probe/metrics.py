"""The probe's Prometheus series (names in ``docs/metrics.md``), by leader broker only.

:class:`ProbeMetrics` is a ``prometheus_client`` collector. Latency quantiles and availability
are those of the *last* window (a broker that led no probed partition in it is not exported);
the ``_total`` counters accumulate over the process's life. Labels: ``cluster``, ``broker``
(and ``quantile`` / ``reason``): never the partition, so the series count stays at a few per
broker.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from probe.commits import CommitWindow
from probe.ledger import BrokerWindow

QUANTILES = (0.5, 0.9, 0.99, 0.999, 1.0)  # 0.9: several probes, not one; 1.0: the largest, never clamped


class ProbeMetrics(Collector):
    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self._last: dict[int, BrokerWindow] = {}
        self._sent: Counter[int] = Counter()
        self._ok: Counter[int] = Counter()
        self._unavailable: Counter[tuple[int, str]] = Counter()
        self.dropped: Mapping[str, int] = {}
        self.topic_actions: Counter[str] = Counter()
        self.pending = 0
        self._last_commits: dict[int, CommitWindow] = {}
        self._commits_ok: Counter[int] = Counter()
        self._commit_errors: Counter[tuple[int, str]] = Counter()
        self._lock = threading.Lock()

    def count_action(self, action: str, n: int = 1) -> None:
        with self._lock:
            self.topic_actions[action] += n

    def update(self, windows: Mapping[int, BrokerWindow], dropped: Mapping[str, int], pending: int) -> None:
        """One closed window per broker (``dropped`` is the running total by reason)."""
        with self._lock:
            self._last = dict(windows)
            for b, w in windows.items():
                self._sent[b] += w.sent
                self._ok[b] += w.ok
                for reason, n in w.unavailable.items():
                    self._unavailable[(b, reason)] += n
            self.dropped = dict(dropped)
            self.pending = pending

    def update_commits(self, windows: Mapping[int, CommitWindow]) -> None:
        """One closed commit window per coordinator broker."""
        with self._lock:
            self._last_commits = dict(windows)
            for b, w in windows.items():
                self._commits_ok[b] += w.ok
                for reason, n in w.errors.items():
                    self._commit_errors[(b, reason)] += n

    def _commit_families(self) -> list[Metric]:
        c = self.cluster
        latency = GaugeMetricFamily(
            "linkwatch_probe_commit_latency_seconds",
            "Offset commit to the probe group a broker coordinates, quantile over the last window (no upper clamp).",
            labels=["cluster", "broker", "quantile"],
        )
        ok = CounterMetricFamily(
            "linkwatch_probe_commits", "Probe offset commits that succeeded, by coordinator broker.",
            labels=["cluster", "broker"],
        )  # fmt: skip
        errors = CounterMetricFamily(
            "linkwatch_probe_commit_errors",
            "Probe offset commits that failed, by coordinator broker and error.",
            labels=["cluster", "broker", "reason"],
        )
        for b, w in sorted(self._last_commits.items()):
            for q in QUANTILES:
                v = w.latency.quantile(q) if w.latency.count else None
                if v is not None:
                    latency.add_metric([c, str(b), str(q)], v / 1000)
        for b, n in sorted(self._commits_ok.items()):
            ok.add_metric([c, str(b)], n)
        for (b, reason), n in sorted(self._commit_errors.items()):
            errors.add_metric([c, str(b), reason], n)
        return [latency, ok, errors]

    def collect(self) -> Iterator[Metric]:
        c = self.cluster
        produce = GaugeMetricFamily(
            "linkwatch_probe_produce_latency_seconds",
            "Probe send to ack, per leader broker, quantile over the last window.",
            labels=["cluster", "broker", "quantile"],
        )
        e2e = GaugeMetricFamily(
            "linkwatch_probe_end_to_end_latency_seconds",
            "Probe send to read back, per leader broker, quantile over the last window (no upper clamp).",
            labels=["cluster", "broker", "quantile"],
        )
        avail = GaugeMetricFamily(
            "linkwatch_probe_availability_ratio",
            "Share of the probes decided in the last window that were acked and read back within the deadline.",
            labels=["cluster", "broker"],
        )
        sent = CounterMetricFamily("linkwatch_probe_sent", "Probes sent.", labels=["cluster", "broker"])
        ok = CounterMetricFamily(
            "linkwatch_probe_available", "Probes acked and read back in time.", labels=["cluster", "broker"]
        )
        bad = CounterMetricFamily(
            "linkwatch_probe_unavailable",
            "Probes not acked and read back in time, by reason.",
            labels=["cluster", "broker", "reason"],
        )
        dropped = CounterMetricFamily(
            "linkwatch_probe_dropped",
            "Probes not sent or read-backs not matched, by reason.",
            labels=["cluster", "reason"],
        )
        actions = CounterMetricFamily(
            "linkwatch_probe_topic_actions",
            "Changes made to the probe topic (create, reassign, elect), and failed checks.",
            labels=["cluster", "action"],
        )
        pending = GaugeMetricFamily(
            "linkwatch_probe_pending", "Probes awaiting read-back.", labels=["cluster"]
        )
        with self._lock:
            for b, w in sorted(self._last.items()):
                for fam, sketch in ((produce, w.produce), (e2e, w.end_to_end)):
                    for q in QUANTILES:
                        v = sketch.quantile(q) if sketch.count else None
                        if v is not None:
                            fam.add_metric([c, str(b), str(q)], v / 1000)
                if w.availability is not None:
                    avail.add_metric([c, str(b)], w.availability)
            for b, n in sorted(self._sent.items()):
                sent.add_metric([c, str(b)], n)
                ok.add_metric([c, str(b)], self._ok[b])
            for (b, reason), n in sorted(self._unavailable.items()):
                bad.add_metric([c, str(b), reason], n)
            for reason, n in sorted(self.dropped.items()):
                dropped.add_metric([c, reason], n)
            for action, n in sorted(self.topic_actions.items()):
                actions.add_metric([c, action], n)
            pending.add_metric([c], self.pending)
            commits = self._commit_families()
        yield from (produce, e2e, avail, sent, ok, bad, dropped, actions, pending, *commits)
