"""The remediator's configuration (one YAML file, validated at load; defaults live here).

Load with :func:`load_remediation_config`; environment overrides use the prefix
``LINKWATCH_REMEDIATION_`` (e.g. ``LINKWATCH_REMEDIATION_EXECUTE=true``).
``config/remediation.sample.yaml`` documents every key. Safe defaults: dry run, one action at a
time, one demoted broker, a 10-minute cooldown per subject, the lease on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from linkwatch.config import StrictModel, load_config
from linkwatch.errors import ConfigError
from remediation.base import REMEDIATION_GROUP
from remediation.registry import available, load_remediations


class CapsConfig(StrictModel):
    """``None`` removes a cap; ``execute: true`` needs at least one."""

    max_concurrent_actions: int | None = Field(1, ge=1)
    max_demoted_brokers: int | None = Field(1, ge=0)
    max_demoted_share: float | None = Field(0.34, ge=0, le=1)

    def any(self) -> bool:
        return any(
            v is not None
            for v in (self.max_concurrent_actions, self.max_demoted_brokers, self.max_demoted_share)
        )


class CircuitBreakerConfig(StrictModel):
    """Stand down while any of ``stand_down_rules`` is active, or too many brokers look bad."""

    stand_down_rules: list[str] = Field(default_factory=lambda: ["cluster_slow"])
    bad_broker_rules: list[str] = Field(default_factory=lambda: ["slow_broker"])
    max_bad_brokers: int = Field(1, ge=0)  # more brokers than this with active findings: stand down
    max_bad_share: float = Field(0.34, ge=0, le=1)
    finding_ttl_s: float = Field(300.0, gt=0)  # an active finding not repeated for this long has expired


class LeaseConfig(StrictModel):
    enabled: bool = True
    topic: str = "linkwatch.remediation.lease"
    group: str = "linkwatch-remediator"
    session_timeout_ms: int = Field(6000, ge=1000, le=300_000)
    heartbeat_interval_ms: int = Field(1000, ge=100)


class LatencyConfig(StrictModel):
    """Where the rebalance pipeline reads the brokers' Produce p99 (None: no back-off signal)."""

    prometheus_url: str | None = None  # e.g. http://127.0.0.1:9090
    query: str | None = None  # default: remediation.latency.DEFAULT_QUERY
    timeout_s: float = Field(2.0, gt=0, le=30)


class RemediatorConfig(StrictModel):
    cluster: str = "default"
    bootstrap_servers: str = ""
    execute: bool = False  # dry run until this is true
    state_dir: Path = Path("/var/lib/linkwatch/remediation")
    audit_log: Path | None = None  # default: <state_dir>/audit.jsonl
    findings_topic: str = "linkwatch.findings"
    # Which remediation acts on which finding rule; a rule not listed is only audited.
    rules: dict[str, str] = Field(default_factory=lambda: {"slow_broker": "noop"})
    # Chosen remediations and their settings (name -> settings).
    remediations: dict[str, dict[str, Any] | None] = Field(default_factory=lambda: {"noop": None})
    cooldown_s: float = Field(600.0, ge=0)
    # A finding that cleared: demotions are undone after the subject stayed healthy this long.
    restore_hold_s: float = Field(300.0, ge=0)
    caps: CapsConfig = Field(default_factory=CapsConfig)
    circuit_breaker: CircuitBreakerConfig = Field(default_factory=CircuitBreakerConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    latency: LatencyConfig = Field(default_factory=LatencyConfig)
    # Moves of a remediator killed mid-run: on restart, "finish" waits for them, "cancel" reverts.
    on_restart: str = Field("finish", pattern="^(finish|cancel)$")

    @field_validator("remediations")
    @classmethod
    def _known(cls, v: dict[str, Any]) -> dict[str, Any]:
        known = available()
        unknown = [n for n in v if n not in known]
        if unknown:
            raise ValueError(
                f"unknown remediation {', '.join(map(repr, unknown))}: no entry point in group "
                f"{REMEDIATION_GROUP} (installed: {', '.join(sorted(known))})"
            )
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RemediatorConfig:
        if self.execute and not self.caps.any():
            raise ValueError(
                "execute: true needs at least one cap (caps.max_concurrent_actions, "
                "caps.max_demoted_brokers or caps.max_demoted_share)"
            )
        missing = {r: n for r, n in self.rules.items() if n not in self.remediations}
        if missing:
            raise ValueError(f"rules name remediations not configured under remediations: {missing}")
        if self.execute and not self.bootstrap_servers:
            raise ValueError("bootstrap_servers is required when execute is true")
        return self

    @property
    def audit_path(self) -> Path:
        return self.audit_log or self.state_dir / "audit.jsonl"


def load_remediation_config(path: Path | str | None) -> RemediatorConfig:
    """Load and validate, including every remediation's own settings (errors name the key)."""
    cfg = load_config(path, RemediatorConfig, env_prefix="LINKWATCH_REMEDIATION_")
    try:
        load_remediations(cfg.remediations)
    except ConfigError as e:
        raise ConfigError(str(path or "<defaults>"), [f"{e.source}: {p}" for p in e.problems]) from None
    return cfg
