"""Configuration of ``linkwatch probe`` (defaults here are the documented defaults).

Validated at load: an unknown key or a bad value stops start-up with a message naming the key
(:func:`linkwatch.config.load_config`). Environment overrides use the prefix ``LINKWATCH_PROBE_``.
"""

from __future__ import annotations

import socket
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from linkwatch.config import StrictModel, rename_keys
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.metrics_server import MetricsServerConfig, Port
from linkwatch.records import DEFAULT_CLUSTER, SAMPLES_TOPIC


class ProbeMetricsConfig(MetricsServerConfig):
    port: Port = 9311


class ProbeTopicConfig(StrictModel):
    """The probe topic. With ``manage`` the probe creates it and keeps one partition led by
    every live broker (reassignments and preferred-leader elections of this topic only)."""

    name: str = Field("linkwatch.probe", min_length=1, max_length=249, pattern=r"^[A-Za-z0-9._-]+$")
    manage: bool = True
    # 1 measures each leader alone; more also measures replication (a slow follower then shows
    # on its peers' partitions too, and end to end waits for the high watermark).
    replication_factor: int = Field(1, ge=1, le=16)
    check_interval_s: float = Field(30.0, gt=0, le=3600)


class ProbeCommitConfig(StrictModel):
    """Commit latency per group coordinator broker (``probe/commits.py``): one group per
    coordinator broker, named ``<group_prefix>.<instance>.<n>``, commits every ``interval_ms``."""

    enabled: bool = True
    interval_ms: int = Field(1000, ge=10, le=600_000)
    group_prefix: str = Field(
        "linkwatch.probe.commit", min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._-]+$"
    )


class ProbeKafkaConfig(KafkaClientConfig):
    bootstrap_servers: str = Field(min_length=1)  # the cluster probed: required


class ProbeConfig(StrictModel):
    kafka: ProbeKafkaConfig
    cluster: str = DEFAULT_CLUSTER
    instance: str = Field(default_factory=socket.gethostname)
    # The mean gap between two probes of one partition. ``poisson``: gaps drawn from an
    # exponential distribution, so no periodic fault (a pause duty cycle, a timer) can stay in step
    # with the probes; ``fixed``: every partition every interval. 250 ms: about 40 probes per
    # leader per 10 s window, enough for the analyzer to judge each leader every window.
    interval_ms: int = Field(250, ge=10, le=600_000)
    schedule: Literal["poisson", "fixed"] = "poisson"
    deadline_ms: int = Field(5000, ge=1, le=600_000)  # acked and read back within: available
    forget_after_ms: int = Field(60_000, ge=1, le=3_600_000)  # late read-backs still measured until
    window_s: int = Field(10, ge=1, le=3600)
    acks: Literal["leader", "all"] = "leader"
    payload_bytes: int = Field(0, ge=0, le=1_000_000)
    max_pending: int = Field(100_000, ge=1, le=10_000_000)
    topic: ProbeTopicConfig = Field(default_factory=ProbeTopicConfig)
    commit: ProbeCommitConfig = Field(default_factory=ProbeCommitConfig)
    metrics: ProbeMetricsConfig = Field(default_factory=ProbeMetricsConfig)
    publish_samples: bool = True
    samples_topic: str = SAMPLES_TOPIC

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        data = rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"})
        # absent, the section's own error names the key: kafka.bootstrap_servers: required
        return {"kafka": {}, **data} if isinstance(data, dict) else data

    @field_validator("forget_after_ms")
    @classmethod
    def _forget_after_deadline(cls, v: int, info: ValidationInfo) -> int:
        deadline = info.data.get("deadline_ms")
        if deadline is not None and v < deadline:
            raise ValueError(
                f"must be >= deadline_ms ({deadline}): a probe is decided at its deadline "
                "and measured until it is forgotten"
            )
        return v
