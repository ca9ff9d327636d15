"""Broker JMX readings, from Jolokia or from a Prometheus JMX-exporter endpoint.

A :class:`JmxReader` returns one snapshot: ``{(mbean, attribute): number}`` for the mbeans of
:func:`wanted_mbeans` (missing ones are simply absent). :class:`JmxCollector` turns two
consecutive snapshots into window values:

* per request type and stage, the exact window mean ``Δ(Count·Mean) / ΔCount`` of Kafka's
  RequestMetrics histograms (their percentiles are a recency-biased reservoir and are not used);
  Kafka feeds them stage times rounded to whole milliseconds, so they agree with the request
  log's mean to within 0.5 ms;
* the gauges of ``docs/metrics.md`` (handler/network idle, queue sizes, log flush window mean,
  under-replicated / under-min-ISR / offline partitions, leader and partition counts);
* ``jvm_start_time_ms``: the broker JVM's start (``java.lang:type=Runtime`` ``StartTime``, ms
  since the epoch). A new value means the broker restarted; the slow-broker model reads it to
  tell a restart (planned, nothing to remediate) from a stall, even when the broker was down
  for less than a window (:mod:`analyzer.slow_broker`).

A failed read (source down, timeout, bad payload) is counted (``jmx_read_failed``), marks the
source down, and the next good read starts a fresh window; the agent keeps going.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Protocol

from agent.exporters.prometheus import AgentMetrics
from agent.health import Health
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, BrokerGauges, Record

# JMX histogram name -> stage name of linkwatch.records.STAGES
JMX_STAGES = {
    "RequestQueueTimeMs": "requestQueue",
    "LocalTimeMs": "local",
    "RemoteTimeMs": "remote",
    "ThrottleTimeMs": "throttle",
    "ResponseQueueTimeMs": "responseQueue",
    "ResponseSendTimeMs": "send",
    "TotalTimeMs": "total",
}
JMX_REQUESTS = (PRODUCE, FETCH_CONSUMER, FETCH_FOLLOWER)

HANDLER_IDLE = "kafka.server:type=KafkaRequestHandlerPool,name=RequestHandlerAvgIdlePercent"
# (mbean, attribute, gauge metric)
GAUGE_MBEANS = (
    (HANDLER_IDLE, "OneMinuteRate", "linkwatch_broker_request_handler_idle_ratio"),
    (
        "kafka.network:type=SocketServer,name=NetworkProcessorAvgIdlePercent",
        "Value",
        "linkwatch_broker_network_processor_idle_ratio",
    ),
    (
        "kafka.network:type=RequestChannel,name=RequestQueueSize",
        "Value",
        "linkwatch_broker_request_queue_size",
    ),
    (
        "kafka.network:type=RequestChannel,name=ResponseQueueSize",
        "Value",
        "linkwatch_broker_response_queue_size",
    ),
    (
        "kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions",
        "Value",
        "linkwatch_broker_under_replicated_partitions",
    ),
    (
        "kafka.server:type=ReplicaManager,name=UnderMinIsrPartitionCount",
        "Value",
        "linkwatch_broker_under_min_isr_partitions",
    ),
    (
        "kafka.controller:type=KafkaController,name=OfflinePartitionsCount",
        "Value",
        "linkwatch_broker_offline_partitions",
    ),
    ("kafka.server:type=ReplicaManager,name=LeaderCount", "Value", "linkwatch_broker_leader_count"),
    ("kafka.server:type=ReplicaManager,name=PartitionCount", "Value", "linkwatch_broker_partition_count"),
)
LOG_FLUSH = "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs"
RUNTIME = "java.lang:type=Runtime"
START_TIME = BrokerGauges.JVM_START_TIME  # RUNTIME's StartTime

Snapshot = dict[tuple[str, str], float]


def stage_mbean(name: str, request: str) -> str:
    return f"kafka.network:type=RequestMetrics,name={name},request={request}"


def wanted_mbeans() -> list[tuple[str, tuple[str, ...]]]:
    """(mbean, attributes) the collector needs, in one list (one bulk request)."""
    out: list[tuple[str, tuple[str, ...]]] = [
        (stage_mbean(name, request), ("Count", "Mean")) for request in JMX_REQUESTS for name in JMX_STAGES
    ]
    out += [(mbean, (attr,)) for mbean, attr, _ in GAUGE_MBEANS]
    out.append((LOG_FLUSH, ("Count", "Mean")))
    out.append((RUNTIME, ("StartTime",)))
    return out


class JmxReader(Protocol):
    name: str

    def read(self) -> Snapshot:
        """One snapshot; raise OSError/ValueError if the source cannot be read at all."""
        ...


class JolokiaReader:
    """All mbeans in one bulk ``POST /jolokia`` (a JSON list of read requests)."""

    name = "jolokia"

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url.rstrip("/") + "/"
        self.timeout_s = timeout_s
        self._body = json.dumps(
            [{"type": "read", "mbean": m, "attribute": list(attrs)} for m, attrs in wanted_mbeans()]
        ).encode()

    def read(self) -> Snapshot:
        req = urllib.request.Request(self.url, data=self._body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
            replies = json.loads(resp.read())
        if not isinstance(replies, list):
            raise ValueError(f"Jolokia answered {type(replies).__name__}, not a list")
        out: Snapshot = {}
        for reply in replies:
            if not isinstance(reply, dict) or reply.get("status") != 200:
                continue  # e.g. 404 for an mbean this broker does not register
            mbean = reply.get("request", {}).get("mbean")
            value = reply.get("value")
            if isinstance(value, dict):
                for attr, v in value.items():
                    if isinstance(v, int | float) and not isinstance(v, bool):
                        out[(mbean, attr)] = float(v)
        return out


class JmxCollector:
    """Periodic collector (``due``/``collect``) emitting :class:`BrokerGauges` and Prometheus gauges."""

    def __init__(
        self,
        reader: JmxReader,
        *,
        cluster: str,
        broker: int,
        health: Health,
        metrics: AgentMetrics | None = None,
        interval_s: float = 10.0,
        request_handler_pools: int = 1,
    ) -> None:
        self.reader = reader
        self.cluster = cluster
        self.broker = broker
        self.health = health
        self.metrics = metrics
        self.interval_ms = int(interval_s * 1000)
        self.request_handler_pools = max(1, request_handler_pools)
        self._last: Snapshot | None = None
        self._last_ms = 0
        self._next_ms = 0

    def due(self, now_ms: int) -> bool:
        return now_ms >= self._next_ms

    def collect(self, now_ms: int | None = None) -> list[Record]:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        self._next_ms = now_ms + self.interval_ms
        try:
            snap = self.reader.read()
        except (OSError, ValueError, urllib.error.URLError) as e:
            self.health.set_up(self.reader.name, False, f"{type(e).__name__}: {e}")
            self.health.drop("jmx_read_failed", f"{type(e).__name__}: {e}", context=self.reader.name)
            self._last = None
            return []
        self.health.set_up(self.reader.name, True)
        prev, prev_ms = self._last, self._last_ms
        self._last, self._last_ms = snap, now_ms
        values = self.gauges(snap)
        if prev is not None:
            values.update(self.window_means(prev, snap))
        self._publish(values)
        window_s = max(1, round((now_ms - prev_ms) / 1000)) if prev is not None else 0
        return [
            BrokerGauges(
                cluster=self.cluster,
                source=f"broker-{self.broker}",
                ts_ms=now_ms,
                broker=self.broker,
                window_s=window_s,
                values=values,
            )
        ]

    def gauges(self, snap: Snapshot) -> dict[str, float]:
        out: dict[str, float] = {}
        for mbean, attr, _metric in GAUGE_MBEANS:
            v = snap.get((mbean, attr))
            if v is not None:
                name = mbean.split("name=")[1].split(",")[0]
                if mbean == HANDLER_IDLE:
                    v = min(1.0, v / self.request_handler_pools)
                out[name] = v
        started = snap.get((RUNTIME, "StartTime"))
        if started is not None and started > 0:
            out[START_TIME] = started
        return out

    @staticmethod
    def window_means(prev: Snapshot, snap: Snapshot) -> dict[str, float]:
        """``<Stage>Ms.<Request>.mean`` (ms) for every histogram that saw requests in between."""
        out: dict[str, float] = {}
        pairs = [(stage_mbean(n, r), f"{n}.{r}") for r in JMX_REQUESTS for n in JMX_STAGES]
        pairs.append((LOG_FLUSH, "LogFlushRateAndTimeMs"))
        for mbean, key in pairs:
            mean = exact_window_mean(prev, snap, mbean)
            if mean is not None:
                out[f"{key}.mean"] = mean
                out[f"{key}.count"] = snap[(mbean, "Count")] - prev[(mbean, "Count")]
        return out

    def _publish(self, values: dict[str, float]) -> None:
        if self.metrics is None:
            return
        for mbean, _attr, metric in GAUGE_MBEANS:
            name = mbean.split("name=")[1].split(",")[0]
            if name in values:
                self.metrics.set_gauges(metric, {(): values[name]})
        stage_means = {
            (request, JMX_STAGES[name]): values[f"{name}.{request}.mean"] / 1000
            for request in JMX_REQUESTS
            for name in JMX_STAGES
            if f"{name}.{request}.mean" in values
        }
        self.metrics.set_gauges("linkwatch_broker_jmx_stage_mean_seconds", stage_means)
        if START_TIME in values:
            self.metrics.set_gauges(
                "linkwatch_broker_jvm_start_time_seconds", {(): values[START_TIME] / 1000}
            )
        if "LogFlushRateAndTimeMs.mean" in values:
            self.metrics.set_gauges(
                "linkwatch_broker_log_flush_seconds", {(): values["LogFlushRateAndTimeMs.mean"] / 1000}
            )


def exact_window_mean(prev: Snapshot, snap: Snapshot, mbean: str) -> float | None:
    """``Δ(Count·Mean)/ΔCount`` between two readings, or None (no requests, counter reset)."""
    try:
        c0, m0 = prev[(mbean, "Count")], prev[(mbean, "Mean")]
        c1, m1 = snap[(mbean, "Count")], snap[(mbean, "Mean")]
    except KeyError:
        return None
    dc = c1 - c0
    if dc <= 0:
        return None
    return (c1 * m1 - c0 * m0) / dc


class ExporterReader:
    """A Prometheus JMX-exporter ``/metrics`` endpoint with the exporter's default naming
    (no rules, or rules that keep it): mbean ``d.o.m:type=T,k=v`` attribute ``A`` is sample
    ``d_o_m_T_A{k="v"}`` (compared case-insensitively, so ``lowercaseOutputName`` works too)."""

    name = "jmx_exporter"

    def __init__(self, url: str, timeout_s: float = 5.0) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._wanted = [(m, a, *exporter_sample(m, a)) for m, attrs in wanted_mbeans() for a in attrs]

    def read(self) -> Snapshot:
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.url, timeout=self.timeout_s) as resp:
            text = resp.read().decode("utf-8", "replace")
        index: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                index[(s.name.lower(), frozenset(s.labels.items()))] = float(s.value)
        out: Snapshot = {}
        for mbean, attr, name, labels in self._wanted:
            v = index.get((name, labels))
            if v is not None:
                out[(mbean, attr)] = v
        return out


def exporter_sample(mbean: str, attr: str) -> tuple[str, frozenset[tuple[str, str]]]:
    """(lower-cased sample name, labels) the JMX exporter's default naming gives an attribute."""
    domain, _, props = mbean.partition(":")
    pairs = dict(p.split("=", 1) for p in props.split(","))
    mtype = pairs.pop("type", "")
    name = "_".join(x for x in (domain.replace(".", "_"), mtype, attr) if x)
    return name.lower(), frozenset(pairs.items())
