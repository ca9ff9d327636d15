"""Prometheus ``/metrics`` of one agent, with the names of ``docs/metrics.md``.

:class:`AgentMetrics` is a custom collector over state the agent updates once per closed window
(histograms) or per collection round (gauges), so scraping never touches the hot path. Stage
histograms use the fixed log-spaced bounds of
:data:`agent.requestlog.window.HISTOGRAM_BOUNDS_MS` (in seconds here): identical on every broker,
so ``sum by (le) (rate(..._bucket[5m]))`` aggregates across brokers, which JMX percentiles cannot.
The process collector adds the agent's own RSS and CPU (``process_resident_memory_bytes``,
``process_cpu_seconds_total``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from agent.health import Health
from agent.requestlog.window import HISTOGRAM_BOUNDS_MS, ClosedWindow

STAGE_HISTOGRAM = "linkwatch_broker_request_stage_seconds"
SERVED = "linkwatch_broker_connections_served"
SATURATED = "linkwatch_broker_connections_saturated"
BUCKET_LABELS = [*(_b / 1000 for _b in HISTOGRAM_BOUNDS_MS)]

# Gauge name -> (help, extra label names). Sources set values with AgentMetrics.set_gauges.
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "linkwatch_broker_jmx_stage_mean_seconds": (
        "Exact window mean from JMX Δ(Count·Mean)/ΔCount",
        ("request", "stage"),
    ),
    "linkwatch_broker_request_handler_idle_ratio": ("RequestHandlerAvgIdlePercent (0..1)", ()),
    "linkwatch_broker_network_processor_idle_ratio": ("NetworkProcessorAvgIdlePercent (0..1)", ()),
    "linkwatch_broker_request_queue_size": ("RequestChannel request queue size", ()),
    "linkwatch_broker_response_queue_size": ("RequestChannel response queue size", ()),
    "linkwatch_broker_log_flush_seconds": ("Window mean of LogFlushRateAndTimeMs", ()),
    "linkwatch_broker_under_replicated_partitions": ("UnderReplicatedPartitions", ()),
    "linkwatch_broker_under_min_isr_partitions": ("UnderMinIsrPartitionCount", ()),
    "linkwatch_broker_offline_partitions": ("OfflinePartitionsCount (active controller only)", ()),
    "linkwatch_broker_leader_count": ("LeaderCount", ()),
    "linkwatch_broker_partition_count": ("PartitionCount", ()),
    "linkwatch_broker_jvm_start_time_seconds": ("Start of the broker's JVM (Runtime StartTime)", ()),
    "linkwatch_logdir_capacity_bytes": ("Capacity of the log dir's file system", ("log_dir",)),
    "linkwatch_logdir_used_bytes": ("Used bytes of the log dir's file system", ("log_dir",)),
    "linkwatch_logdir_partition_bytes": ("Sum of partition sizes in the log dir", ("log_dir",)),
    "linkwatch_logdir_io_util_ratio": ("Device busy time fraction over the window", ("log_dir", "device")),
    "linkwatch_partition_size_bytes": (
        "Partition size (largest partitions only)",
        ("log_dir", "topic", "partition"),
    ),
    "linkwatch_host_cpu_ratio": ("Host CPU busy fraction", ()),
    "linkwatch_host_page_cache_bytes": ("Page cache (Cached in /proc/meminfo)", ()),
    "linkwatch_host_disk_write_bytes_per_second": ("Host disk write rate", ()),
    "linkwatch_host_page_cache_window_seconds": ("Page cache bytes / disk write rate", ()),
    SERVED: ("Client connections served requests of the type in the last closed window", ("request",)),
    SATURATED: (
        "Connections served back to back (>= 0.9 of the last closed window): their clients wait unseen",
        ("request",),
    ),
}


class AgentMetrics(Collector):
    def __init__(self, cluster: str, broker: int, health: Health) -> None:
        self.cluster = cluster
        self.broker = str(broker)
        self.health = health
        self._lock = threading.Lock()
        # (request, stage) -> cumulative per-bucket counts (non-cumulative storage) and sum (ms)
        self._hist: dict[tuple[str, str], tuple[list[int], float]] = {}
        self._gauges: dict[str, dict[tuple[str, ...], float]] = {}

    # -- updates (agent thread) ------------------------------------------------------------
    def add_window(self, window: ClosedWindow, requests: frozenset[str] | None = None) -> None:
        """Add a closed window's histogram counts, and set its connection gauges (only
        ``requests`` types, if given)."""
        totals = [
            s for s in window.sketches if s.stage == "total" and (requests is None or s.request in requests)
        ]
        with self._lock:
            self._gauges[SERVED] = {(s.request,): float(s.connections) for s in totals}
            self._gauges[SATURATED] = {(s.request,): float(s.saturated_connections) for s in totals}
            for key, (counts, total_ms) in window.histograms.items():
                if requests is not None and key[0] not in requests:
                    continue
                have = self._hist.get(key)
                if have is None:
                    self._hist[key] = (list(counts), total_ms)
                else:
                    merged = [a + b for a, b in zip(have[0], counts, strict=True)]
                    self._hist[key] = (merged, have[1] + total_ms)

    def set_gauges(self, name: str, values: Mapping[tuple[str, ...], float]) -> None:
        """Replace every series of gauge ``name`` (labels in the order of :data:`GAUGES`)."""
        if name not in GAUGES:
            raise KeyError(f"{name} is not in the metric contract (docs/metrics.md)")
        with self._lock:
            self._gauges[name] = dict(values)

    # -- collection (HTTP thread) ------------------------------------------------------------
    def collect(self) -> Iterator[object]:
        base = [self.cluster, self.broker]
        with self._lock:
            hist = {k: (list(v[0]), v[1]) for k, v in self._hist.items()}
            gauges = {k: dict(v) for k, v in self._gauges.items()}
        h = HistogramMetricFamily(
            STAGE_HISTOGRAM,
            "Per-request stage time from the request log",
            labels=["cluster", "broker", "request", "stage"],
        )
        for (request, stage), (counts, total_ms) in sorted(hist.items()):
            cumulative, running = [], 0
            for bound, c in zip([*BUCKET_LABELS, float("inf")], counts, strict=True):
                running += c
                cumulative.append((_le(bound), running))
            h.add_metric([*base, request, stage], cumulative, total_ms / 1000)
        yield h
        for name, (doc, labels) in GAUGES.items():
            if name in gauges:
                g = GaugeMetricFamily(name, doc, labels=["cluster", "broker", *labels])
                for label_values, value in sorted(gauges[name].items()):
                    g.add_metric([*base, *label_values], value)
                yield g
        yield from self._health(base)

    def _health(self, base: list[str]) -> Iterator[object]:
        health = self.health
        slow = CounterMetricFamily(
            "linkwatch_broker_slow_requests",
            "Requests above the exemplar threshold",
            labels=["cluster", "broker", "request"],
        )
        for request, n in sorted(health.slow_requests.items()):
            slow.add_metric([*base, request], n)
        yield slow
        # One series per broker: (family, name, help, value).
        for family, name, doc, value in (
            (CounterMetricFamily, "linkwatch_agent_lines_read", "Request-log lines read", health.lines_read),
            (
                GaugeMetricFamily,
                "linkwatch_agent_log_behind_bytes",
                "Bytes of request log not yet read",
                health.log_behind_bytes,
            ),
            (
                GaugeMetricFamily,
                "linkwatch_agent_spool_records",
                "Records waiting in the on-disk spool",
                health.spool_records,
            ),
            (
                CounterMetricFamily,
                "linkwatch_agent_spool_resent",
                "Records sent again after the producer gave up on them (each may be a duplicate)",
                health.spool_resent,
            ),
            (
                CounterMetricFamily,
                "linkwatch_agent_position_save_failures",
                "Saves of the request log's position that failed (full or read-only disk); "
                "windows still published",
                health.position_save_failures,
            ),
            (
                CounterMetricFamily,
                "linkwatch_agent_untimed_connection_seconds",
                "Service time of connections beyond the per-window bound of timed connections",
                health.untimed_connection_us / 1e6,
            ),
        ):
            one = family(name, doc, labels=["cluster", "broker"])
            one.add_metric(base, value)
            yield one
        dropped = CounterMetricFamily(
            "linkwatch_agent_dropped",
            "Lines/records dropped, by reason",
            labels=["cluster", "broker", "reason"],
        )
        for reason, n in sorted(health.dropped.items()):
            dropped.add_metric([*base, reason], n)
        yield dropped
        if health.request_log_scanner:
            compiled = GaugeMetricFamily(
                "linkwatch_agent_compiled_scanner",
                "1 if the request log is read by the compiled block scanner, 0 if by the pure-Python path",
                labels=["cluster", "broker"],
            )
            compiled.add_metric(base, 1.0 if health.request_log_scanner == "compiled" else 0.0)
            yield compiled
        if health.capture_ratio is not None:
            ratio = GaugeMetricFamily(
                "linkwatch_agent_capture_ratio",
                "Share of requests the broker logged in the last window (sampled capture; counts are estimates below 1)",
                labels=["cluster", "broker"],
            )
            ratio.add_metric(base, health.capture_ratio)
            yield ratio
            inexact = CounterMetricFamily(
                "linkwatch_agent_capture_inexact_lines",
                "Request lines of sampled windows whose capture slice did not go as planned (the logger "
                "switch through the broker's own admin API failed or was late): kept, counts estimated",
                labels=["cluster", "broker"],
            )
            inexact.add_metric(base, health.capture_inexact)
            yield inexact
        up = GaugeMetricFamily(
            "linkwatch_agent_source_up",
            "1 if the last read of the source worked",
            labels=["cluster", "broker", "source"],
        )
        for source, ok in sorted(health.source_up.items()):
            up.add_metric([*base, source], 1.0 if ok else 0.0)
        yield up


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def make_registry(metrics: AgentMetrics) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(metrics)
    ProcessCollector(registry=registry)
    return registry
