"""Run the lag collector: config, the loop, publishing, and a thread for demos.

:class:`LagService` owns the Kafka clients and calls, once per ``interval_s``:
collector pass → metrics → ``ConsumerLag`` samples → (lease holder only) findings for lag
status, cold-read risk and rack spread. A failing output is logged and counted; the loop goes
on. :func:`start_in_thread` runs it in a daemon thread and prints group statuses (the demo).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaProducer
from prometheus_client import CollectorRegistry
from pydantic import Field, model_validator

from findings.pipeline import FindingPipeline, PipelineConfig
from lag.coldread import ColdReadConfig, ColdReadWatch, HostStatsFeed
from lag.collector import CollectorConfig, LagCollector, PassResult
from lag.lease import AlwaysHeld, GroupLease, Lease, ensure_lease_topic
from lag.outputs import LagFindings, LagMetrics, lag_records
from lag.rack import RackConfig, RackWatch
from lag.timestamps import TimestampReader
from linkwatch.config import StrictModel, rename_keys
from linkwatch.errors import UnreachableError
from linkwatch.kafka_client import (
    BOOTSTRAP_TIMEOUT_MS,
    KafkaClientConfig,
    admin_client,
    explained_connect_errors,
    kafka_python_kwargs,
)
from linkwatch.metrics_server import MetricsServer, MetricsServerConfig, Port
from linkwatch.reach import KafkaReach, is_unreachable, unreachable
from linkwatch.records import DEFAULT_CLUSTER, FINDINGS_TOPIC, SAMPLES_TOPIC, Finding

log = logging.getLogger(__name__)


class MetricsConfig(MetricsServerConfig):
    port: Port = 9309


class PublishConfig(StrictModel):
    samples: bool = True
    findings: bool = True
    samples_topic: str = SAMPLES_TOPIC
    findings_topic: str = FINDINGS_TOPIC
    finding_refresh_s: float = Field(300.0, gt=0)


class HaConfig(StrictModel):
    """Two instances: only the lease holder publishes findings (see ``lag.lease``)."""

    enabled: bool = False
    lease_topic: str = "linkwatch.lag.lease"
    lease_group: str = "linkwatch-lag-lease"
    session_timeout_ms: int = Field(10_000, ge=6_000, le=300_000)
    create_topic: bool = False
    replication_factor: int = Field(3, ge=1)
    dry_run: bool = True


class LagKafkaConfig(KafkaClientConfig):
    bootstrap_servers: str = Field(min_length=1)  # the cluster watched: required


class LagConfig(StrictModel):
    kafka: LagKafkaConfig
    cluster: str = DEFAULT_CLUSTER
    instance: str = Field(default_factory=socket.gethostname)
    interval_s: float = Field(10.0, gt=0)
    collector: CollectorConfig = Field(default_factory=CollectorConfig)
    metrics: MetricsConfig = Field(default_factory=MetricsConfig)
    publish: PublishConfig = Field(default_factory=PublishConfig)
    ha: HaConfig = Field(default_factory=HaConfig)
    cold_read: ColdReadConfig = Field(default_factory=ColdReadConfig)
    rack: RackConfig = Field(default_factory=RackConfig)
    # The findings pipeline (policy, notifiers, remediator). Absent: findings are only published.
    remediation: PipelineConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        data = rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"})
        # absent, the section's own error names the key: kafka.bootstrap_servers: required
        return {"kafka": {}, **data} if isinstance(data, dict) else data


class LagService:
    def __init__(
        self,
        config: LagConfig,
        registry: CollectorRegistry | None = None,
        pipeline: FindingPipeline | None = None,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        if pipeline is None and config.remediation is not None:
            from alerts.hooks.findings import load_notifiers
            from findings.pipeline import build_pipeline

            self.pipeline = build_pipeline(config.remediation, load_notifiers(config.remediation.notifiers))
        with explained_connect_errors(config.kafka):  # the first connection: a wrong password shows here
            self.admin = admin_client(
                **kafka_python_kwargs(config.kafka, "lag"), bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS
            )
        c = config.collector
        reader = TimestampReader(
            config.kafka, timeout_s=c.timestamp_timeout_s, cache_size=c.timestamp_cache_size
        )
        self.collector = LagCollector(self.admin, reader, c)
        self.reader = reader
        self.metrics = LagMetrics(config.cluster)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(self.metrics)
        self.lag_findings = LagFindings(config.cluster, config.instance, config.publish.finding_refresh_s)
        cr = config.cold_read
        self.feed: HostStatsFeed | None = None
        if cr.enabled and cr.windows_from == "samples":
            self.feed = HostStatsFeed(cr.kafka or config.kafka, cr.samples_topic)
        self.cold = ColdReadWatch(cr, config.cluster, config.instance, self.feed)
        self.rack = RackWatch(config.rack, config.cluster, config.instance)
        self.producer: KafkaProducer | None = None
        if config.publish.samples or config.publish.findings:
            self.producer = KafkaProducer(
                **kafka_python_kwargs(config.kafka, f"lag-{config.instance}"),
                linger_ms=50,
                # Bounded: each pass flushes (with a timeout) before the next, and a send that
                # cannot get metadata gives up after max_block_ms (counted in publish_errors).
                max_block_ms=1000,
            )
        self.lease: Lease = AlwaysHeld()
        if config.ha.enabled:
            ha = config.ha
            if ha.create_topic:
                log.info(ensure_lease_topic(self.admin, ha.lease_topic, ha.replication_factor, ha.dry_run))
            self.lease = GroupLease(
                config.kafka,
                ha.lease_topic,
                ha.lease_group,
                config.instance,
                ha.session_timeout_ms,
            )
        self._http: MetricsServer | None = None
        self.publish_errors = 0
        self.findings_sent = 0
        self.last: PassResult | None = None

    def step(self) -> tuple[PassResult, list[Finding]]:
        """One pass and its outputs. Returns the pass and the findings this instance published."""
        result = self.collector.run_pass()
        self.last = result
        cold = self.cold.update(result)
        self.metrics.cold_read = self.cold.at_risk
        self.metrics.update(result, self.collector.clamped_total)
        findings = [*self.lag_findings.update(result), *cold, *self.rack.update(result)]
        pub = self.config.publish
        if pub.samples:
            for rec in lag_records(result, self.config.cluster, self.config.instance):
                self._send(pub.samples_topic, rec.dedup_key(), rec.to_json())
        sent: list[Finding] = []
        if pub.findings and findings and self.lease.held():
            for f in findings:
                self._send(pub.findings_topic, f.dedup_key(), f.to_json())
            sent = findings
            self.findings_sent += len(findings)
        if self.producer is not None:
            self.producer.flush(timeout=5)
        self._decide(findings)
        return result, sent

    def _decide(self, findings: list[Finding]) -> None:
        """Through the findings pipeline, on the lease holder only (one instance acts)."""
        if self.pipeline is None or not self.lease.held():
            return
        for f in findings:
            try:
                self.pipeline.handle(f)
            except Exception:
                log.exception("findings pipeline failed on %s %s; the others go on", f.rule, f.subject)
        self.pipeline.tick()

    def _send(self, topic: str, key: str, value: bytes) -> None:
        assert self.producer is not None
        try:
            self.producer.send(topic, key=key.encode(), value=value)
        except Exception as e:
            self.publish_errors += 1
            log.warning("publish to %s failed: %s", topic, e)

    def serve_metrics(self) -> int:
        """Start the /metrics endpoint (loopback by default); returns the bound port."""
        self._http = MetricsServer(self.registry, self.config.metrics.host, self.config.metrics.port).start()
        return self._http.server_port

    def run(
        self,
        stop: threading.Event,
        on_pass: Callable[[PassResult, list[Finding]], Any] | None = None,
        reach: KafkaReach | None = None,
    ) -> None:
        """Pass after pass until ``stop``. A pass that cannot reach the cluster (it lists no
        group, or the client says so) goes to ``reach``: said once, counted, retried at the next
        pass; any other failure is logged with its traceback and the loop goes on."""
        reach = reach or KafkaReach("lag", registry=None, logger=log)
        while not stop.is_set():
            started = time.monotonic()
            try:
                result, sent = self.step()
                lost = next((e for e in result.errors if e.startswith("cannot list groups")), None)
                if lost is None:
                    reach.reached()
                else:
                    reach.failed(
                        UnreachableError("kafka.bootstrap_servers", self.config.kafka.bootstrap_servers, lost)
                    )
                if on_pass is not None:
                    on_pass(result, sent)
            except Exception as e:
                if not is_unreachable(e):
                    log.exception("lag pass failed; next pass in %.0fs", self.config.interval_s)
                else:
                    reach.failed(
                        unreachable(self.config.kafka.bootstrap_servers, "kafka.bootstrap_servers", e)
                    )
            stop.wait(max(0.0, self.config.interval_s - (time.monotonic() - started)))

    def close(self) -> None:
        closers = [self.lease.close, self.reader.close, self.admin.close]
        if self.feed is not None:
            closers.append(self.feed.close)
        for closer in closers:
            try:
                closer()
            except Exception as e:
                log.debug("close: %s", e)
        if self.producer is not None:
            self.producer.close(timeout=5)
        if self._http is not None:
            self._http.close()


def format_statuses(result: PassResult) -> str:
    """One line per group: status, lag (max/sum), lag seconds (max) and the reason."""
    lines = []
    for g in sorted(result.groups.values(), key=lambda g: g.group):
        secs = f"{g.lag_seconds_max:.1f}s" if g.lag_seconds_max is not None else "?"
        lines.append(
            f"{g.group:<32} {g.verdict.status.value:<6} lag max {g.lag_max} sum {g.lag_sum} "
            f"({secs})  {g.verdict.reason}"
        )
    for e in result.errors:
        lines.append(f"pass error: {e}")
    return "\n".join(lines)


def start_in_thread(
    config: LagConfig, printer: Callable[[str], Any] | None = print
) -> tuple[threading.Thread, threading.Event, LagService]:
    """Run the collector in a daemon thread, printing statuses after every pass (for the demo).

    Stop it with ``stop.set(); thread.join()``; the service's clients are closed on exit.
    """
    service = LagService(config)
    stop = threading.Event()

    def on_pass(result: PassResult, sent: list[Finding]) -> None:
        if printer is not None:
            printer(format_statuses(result))
            for f in sent:
                printer(f"finding: {f.summary}")

    def body() -> None:
        try:
            service.run(stop, on_pass)
        finally:
            service.close()

    thread = threading.Thread(target=body, name="linkwatch-lag", daemon=True)
    thread.start()
    return thread, stop, service
