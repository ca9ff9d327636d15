"""The agent's configuration (one YAML file, validated at load; defaults live here).

Load with :func:`load_agent_config`; environment overrides use the prefix ``LINKWATCH_AGENT_``
(e.g. ``LINKWATCH_AGENT_METRICS__PORT=9200``). ``config/agent.sample.yaml`` documents every key.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator

from linkwatch.config import DirLocation, FileLocation, StrictModel, load_config, rename_keys
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.metrics_server import MetricsServerConfig, Port
from linkwatch.records import DEFAULT_CLUSTER, FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, SAMPLES_TOPIC


class RequestLogConfig(StrictModel):
    enabled: bool = True
    path: FileLocation = Path("/var/log/kafka/kafka-request.log")
    position_file: FileLocation | None = None  # resume here after a restart; None: start_at decides
    start_at: Literal["end", "beginning"] = "end"
    window_s: int = Field(10, ge=1, le=300)
    # A window closes this long after its end, and the analyzer evaluates it once every broker's
    # records are in: the grace is part of every window's time to its evaluation. (With the
    # analyzer's window_feed: spark, whose query triggers on multiples of trigger_s (2 s): closed
    # 1 s + a poll after its end, a window makes the trigger at end + 2 s; at 2 s, end + 4 s.)
    # Request-log lines are written as their requests complete, so 1 s holds the poll
    # (poll_interval_s 0.5 s) and a short stall; a line later than that is dropped as late.
    grace_s: float = Field(1.0, ge=0, le=60)
    slow_threshold_ms: float = Field(300.0, ge=0)
    max_exemplars_per_window: int = Field(20, ge=0, le=10_000)
    max_line_bytes: int = Field(1 << 20, ge=1024, le=64 << 20)
    # Zone of timestamps written without an offset (log4j2's plain "[%d]"): an IANA name such
    # as "Europe/Berlin" or "UTC"; None: this host's zone. Stamps with an offset need none.
    timezone: str | None = None
    # A line stamped further ahead of the wall clock is dropped as future_timestamp.
    max_ahead_s: float = Field(60.0, ge=0, le=86_400)
    # Request types exported as Prometheus histograms (sketches go to Kafka for every type).
    histogram_requests: list[str] = Field(default_factory=lambda: [PRODUCE, FETCH_CONSUMER, FETCH_FOLLOWER])

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ZoneInfo(v)
            except (ZoneInfoNotFoundError, ValueError, OSError):
                raise ValueError(f"{v[:80]!r} is not a known time zone (an IANA name, e.g. 'UTC')") from None
        return v

    def zone(self) -> ZoneInfo | None:
        return ZoneInfo(self.timezone) if self.timezone is not None else None


class CaptureConfig(StrictModel):
    """Who decides what the broker logs (docs/agent.md "Capture policy").

    ``broker``: the broker's own logging config; the agent reads what is there and changes
    nothing. ``sampled``: the agent keeps its broker's ``kafka.request.logger`` at
    ``idle_level`` and switches it to DEBUG for 1/stride of every window (agent.capture) —
    a change on the cluster, so it is never the default; config/agent.sample.yaml turns it on.
    """

    policy: Literal["broker", "sampled"] = "broker"
    # This broker's own listener, for the BROKER_LOGGER switch (only this broker is switched):
    # the monitored cluster, usually not the one records go to (the agent's kafka section).
    kafka: KafkaClientConfig = KafkaClientConfig()
    idle_level: Literal["WARN", "ERROR", "OFF"] = "WARN"
    # The broker's extra CPU per request allowed for the request log, and what logging every
    # request costs it: measured +15 % and +21.5 % (medians of two runs, rounds from +8 % to
    # +85 %, bench/results/agent.md); 30 leaves room for the switching and the noise.
    cpu_budget_pct: float = Field(5.0, gt=0, le=100)
    full_capture_cost_pct: float = Field(30.0, gt=0, le=1000)
    # Busy brokers: capture less, so the agent reads at most this many lines/s on average (0: no cap).
    max_lines_per_s: float = Field(5000.0, ge=0)
    # DEBUG time of a window split into this many slices, one in each equal part of the window
    # (tails come in bursts: short spread slices sample them evenly), none shorter than min_slice_s.
    slices_per_window: int = Field(4, ge=1, le=100)
    min_slice_s: float = Field(0.5, gt=0)
    dry_run: bool = False  # log the switches instead of making them (the broker logs as configured)

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"}, "capture")

    @model_validator(mode="after")
    def _needs_servers(self) -> CaptureConfig:
        if self.policy == "sampled" and not self.kafka.bootstrap_servers:
            raise ValueError(
                "capture.kafka.bootstrap_servers (this broker's listener) is required when capture.policy is sampled"
            )
        return self


class AgentMetricsConfig(MetricsServerConfig):
    port: Port = 9308  # 0: any free port (tests)


PrometheusConfig = AgentMetricsConfig  # its name before the section was called metrics


class KafkaOutputConfig(KafkaClientConfig):
    """The ``kafka`` section: the shared client keys (where records go: usually a separate
    monitoring cluster) and the sink's own."""

    enabled: bool = False
    topic: str = SAMPLES_TOPIC
    client_id: str | None = None  # the producer's whole client id; None: <client_id_prefix>-agent
    spool_dir: DirLocation = Path("/var/lib/linkwatch/spool")
    spool_max_bytes: int = Field(256 << 20, ge=64 << 10)
    segment_bytes: int = Field(4 << 20, ge=4 << 10)
    send_timeout_s: float = Field(10.0, gt=0)
    # How long the (idempotent) producer keeps retrying a record before the sink takes it back
    # and sends it again — the one case that can duplicate a record. Longer than the outages
    # you expect; Kafka's own default.
    delivery_timeout_s: float = Field(120.0, gt=0)
    retry_backoff_s: float = Field(2.0, gt=0)

    @model_validator(mode="after")
    def _needs_servers(self) -> KafkaOutputConfig:
        if self.enabled and not self.bootstrap_servers:
            raise ValueError("kafka.bootstrap_servers is required when kafka.enabled is true")
        if self.delivery_timeout_s < self.send_timeout_s:
            raise ValueError("kafka.delivery_timeout_s must be at least kafka.send_timeout_s")
        if self.segment_bytes > self.spool_max_bytes:
            raise ValueError("kafka.segment_bytes must not exceed kafka.spool_max_bytes")
        return self


class JmxConfig(StrictModel):
    jolokia_url: str | None = None  # e.g. http://127.0.0.1:8778/jolokia
    exporter_url: str | None = None  # e.g. http://127.0.0.1:9404/metrics (Prometheus JMX exporter)
    interval_s: float = Field(10.0, gt=0)
    timeout_s: float = Field(5.0, gt=0)
    # Handler pools marking RequestHandlerAvgIdlePercent: 2 on a combined broker+controller node.
    request_handler_pools: int = Field(1, ge=1, le=2)


class LogDirsConfig(StrictModel):
    paths: list[DirLocation] = Field(default_factory=list)  # the broker's log.dirs
    interval_s: float = Field(60.0, gt=0)
    partition_records: bool = True  # one PartitionSize record per partition per round
    top_partitions: int = Field(50, ge=0, le=10_000)  # largest partitions exported to Prometheus


class HostConfig(StrictModel):
    enabled: bool = True
    interval_s: float = Field(10.0, gt=0)


class PageCacheEndpointConfig(StrictModel):
    """``GET /page-cache`` on the metrics server: cold-read confirmation for the lag collector."""

    enabled: bool = True  # served with /metrics (prometheus.enabled); needs log_dirs.paths
    span_bytes: int = Field(1024 * 1024, ge=4096)  # default bytes checked after the offset ...
    skip_bytes: int = Field(256 * 1024, ge=0)  # ... after skipping these
    resident_ratio_below: float = Field(0.5, gt=0, le=1)  # confirmed cold below this fraction
    max_span_bytes: int = Field(16 * 1024 * 1024, ge=4096, le=256 * 1024 * 1024)  # per request
    max_concurrent: int = Field(4, ge=1, le=64)  # more at once: 503

    @model_validator(mode="after")
    def _span_within_max(self) -> PageCacheEndpointConfig:
        if self.span_bytes > self.max_span_bytes:
            raise ValueError("page_cache.span_bytes must not exceed page_cache.max_span_bytes")
        return self


class OtlpConfig(StrictModel):
    endpoint: str | None = None  # e.g. http://127.0.0.1:4318/v1/traces; None: no spans
    timeout_s: float = Field(10.0, gt=0)


class AgentConfig(StrictModel):
    cluster: str = DEFAULT_CLUSTER
    broker_id: int = Field(ge=0)
    poll_interval_s: float = Field(0.5, gt=0, le=10)
    request_log: RequestLogConfig = RequestLogConfig()
    capture: CaptureConfig = CaptureConfig()
    metrics: AgentMetricsConfig = AgentMetricsConfig()
    kafka: KafkaOutputConfig = KafkaOutputConfig()
    jmx: JmxConfig = JmxConfig()
    log_dirs: LogDirsConfig = LogDirsConfig()
    host: HostConfig = HostConfig()
    otlp: OtlpConfig = OtlpConfig()
    page_cache: PageCacheEndpointConfig = PageCacheEndpointConfig()
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"prometheus": "metrics"})

    @field_validator("cluster")
    @classmethod
    def _cluster_name(cls, v: str) -> str:
        if not v or "/" in v:
            raise ValueError("must be a non-empty name without '/'")
        return v

    @model_validator(mode="after")
    def _capture_fits_the_window(self) -> AgentConfig:
        cap, window_s = self.capture, self.request_log.window_s
        if cap.policy != "sampled":
            return self
        if cap.min_slice_s > window_s:
            raise ValueError(
                f"capture.min_slice_s ({cap.min_slice_s:g}) must not exceed request_log.window_s ({window_s})"
            )
        needed = math.ceil(cap.full_capture_cost_pct / cap.cpu_budget_pct - 1e-9)
        if needed > window_s / cap.min_slice_s:
            raise ValueError(
                f"capture.cpu_budget_pct {cap.cpu_budget_pct:g} needs slices of {window_s / needed:.2f} s, "
                f"shorter than capture.min_slice_s {cap.min_slice_s:g}: raise the budget, lower min_slice_s "
                "or lengthen request_log.window_s"
            )
        return self


def load_agent_config(path: Path | str | None) -> AgentConfig:
    return load_config(path, AgentConfig, env_prefix="LINKWATCH_AGENT_")
