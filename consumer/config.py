"""Configuration of the async-fetch consumer (section ``consumer`` of the config file):
:class:`ConsumerConfig`, read by both of its sides (:mod:`.fetch_loop`, :mod:`.async_fetch`).
Validated at load: a bad key or value stops start-up naming it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from linkwatch.config import StrictModel, rename_keys
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.records import DEFAULT_CLUSTER


class ConsumerKafkaConfig(KafkaClientConfig):
    bootstrap_servers: str = Field("127.0.0.1:9092", min_length=1)


class ConsumerConfig(StrictModel):
    """Configuration of :class:`AsyncFetchConsumer` (section ``consumer`` of the config file)."""

    kafka: ConsumerKafkaConfig = Field(default_factory=lambda: ConsumerKafkaConfig())
    group_id: str | None = None
    client_id: str = "linkwatch-consumer"  # this consumer's whole id (not kafka.client_id_prefix)
    cluster: str = DEFAULT_CLUSTER
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    # The buffer between the fetch pump and the application.
    buffer_max_bytes: int = Field(32 * 1024 * 1024, gt=0)
    buffer_max_records: int = Field(20_000, gt=0)
    max_partitions_in_flight: int = Field(0, ge=0, description="0 = every assigned partition")
    max_uncommitted_per_partition: int = Field(10_000, gt=0)
    # Failures: retried up to max_retries, then dead-lettered or the partition stops.
    max_retries: int = Field(3, ge=0)
    on_exhausted: Literal["dead_letter", "stop_partition"] = "dead_letter"
    dead_letter_topic: str | None = Field(None, description="default: <topic>.dead-letter")
    commit_interval_ms: int = Field(1000, gt=0)
    revoke_wait_ms: int = Field(
        5000, ge=0, description="on a revoke, wait this long for records the application holds to be acked"
    )
    # Passed to kafka-python.
    fetch_max_wait_ms: int = Field(500, ge=0)
    fetch_min_bytes: int = Field(1, ge=1)
    fetch_max_bytes: int = Field(16 * 1024 * 1024, gt=0)
    max_partition_fetch_bytes: int = Field(1024 * 1024, gt=0)
    session_timeout_ms: int = Field(45_000, gt=0)
    heartbeat_interval_ms: int = Field(3_000, gt=0)
    pump_poll_ms: int = Field(20, gt=0)
    topic_gone_s: float = Field(3.0, gt=0, description="a topic missing from metadata this long is deleted")
    coordinator_backoff_max_ms: int = Field(
        1000, gt=0, description="coordinator lookups after it died back off from 100 ms up to this"
    )
    retry_log_interval_s: float = Field(
        10.0, gt=0, description="kafka-python retry warnings: the first, then one summary per interval"
    )
    # Client timings as ClientFetch records on linkwatch.samples.
    metrics_window_s: int = Field(10, gt=0)
    publish_samples: bool = False
    # With a tracer: one CONSUMER span per record (child of the producer's span in its headers)
    # or per batch (the records of one partition handed out by one poll; linked to each).
    trace_spans: Literal["record", "batch"] = "record"

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"})

    @field_validator("kafka", mode="before")
    @classmethod
    def _any_client_section(cls, v: Any) -> Any:
        # another part's section (the probe's) is taken key by key, validated here
        return dict(v) if isinstance(v, KafkaClientConfig) else v
