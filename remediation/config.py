"""The remediator's configuration (one YAML file, validated at load; defaults live here).

Load with :func:`load_remediation_config`; environment overrides use the prefix
``LINKWATCH_REMEDIATION_`` (e.g. ``LINKWATCH_REMEDIATION_EXECUTE=true``).
``config/remediation.sample.yaml`` documents every key. Safe defaults: dry run, one action at a
time, one demoted broker, a 10-minute cooldown per subject, the lease on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StrictBool, StrictInt, field_validator, model_validator

from linkwatch.config import DirLocation, FileLocation, StrictModel, load_config, rename_keys
from linkwatch.errors import ConfigError
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.records import DEFAULT_CLUSTER, SAMPLES_TOPIC
from remediation.base import REMEDIATION_GROUP
from remediation.registry import available, load_remediations


def _real_number(v: Any) -> Any:
    """Safety settings take numbers as numbers: ``'0.5'`` or ``true`` is a typo, not a value."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ValueError(f"must be a number, not {type(v).__name__} (write it without quotes)")
    return v


# A number that is really a number (YAML ``0.5`` or ``1``, never ``'0.5'`` or ``true``).
RealFloat = Annotated[float, BeforeValidator(_real_number)]


class IntakeConfig(StrictModel):
    """Bounds on what a finding may say (:mod:`remediation.intake`); a finding outside them is
    dropped at the boundary, counted and audited."""

    max_age_s: RealFloat = Field(900.0, gt=0)  # older findings are dropped as stale
    max_future_s: RealFloat = Field(60.0, ge=0)  # clock skew allowed for a finding's ts_ms
    max_text_chars: StrictInt = Field(4096, ge=64)  # summary, action, source
    max_evidence_bytes: StrictInt = Field(65536, ge=1024)


class ProbeBounds(StrictModel):
    topic: str | None = None  # where the probe publishes ProbeSample records; None: not watched
    window_s: RealFloat = Field(20.0, gt=0)
    max_increase_ms: RealFloat = Field(200.0, ge=0)  # a leader's p99 may rise this much
    floor_ms: RealFloat = Field(100.0, ge=0)  # a p99 under this is never harm


class LagBounds(StrictModel):
    groups: list[str] = Field(default_factory=list)  # critical groups; empty: not watched
    topic: str = SAMPLES_TOPIC  # where the lag collector publishes ConsumerLag records
    window_s: RealFloat = Field(60.0, gt=0)
    max_increase_s: RealFloat = Field(30.0, ge=0)


class ImpactConfig(StrictModel):
    """The impact guard (:mod:`remediation.impact`): health signals before, during and after an
    action; worse than these bounds stops it, undoes it and opens the breaker."""

    enabled: StrictBool = True
    settle_s: RealFloat = Field(60.0, ge=0)  # watched this long after the last step
    check_every_s: RealFloat = Field(5.0, gt=0)
    breach_checks: StrictInt = Field(2, ge=1)  # readings in a row beyond the bounds before stopping
    max_urp_increase: StrictInt = Field(0, ge=0)
    probe: ProbeBounds = Field(default_factory=ProbeBounds)
    lag: LagBounds = Field(default_factory=LagBounds)


class CapsConfig(StrictModel):
    """``None`` removes a cap; ``execute: true`` needs at least one."""

    max_concurrent_actions: StrictInt | None = Field(1, ge=1)
    max_demoted_brokers: StrictInt | None = Field(1, ge=0)
    max_demoted_share: RealFloat | None = Field(0.34, ge=0, le=1)

    def any(self) -> bool:
        return any(
            v is not None
            for v in (self.max_concurrent_actions, self.max_demoted_brokers, self.max_demoted_share)
        )


class CircuitBreakerConfig(StrictModel):
    """Stand down while any of ``stand_down_rules`` is active, or too many brokers look bad."""

    stand_down_rules: list[str] = Field(default_factory=lambda: ["cluster_slow"])
    bad_broker_rules: list[str] = Field(default_factory=lambda: ["slow_broker"])
    max_bad_brokers: StrictInt = Field(1, ge=0)  # more brokers than this with active findings: stand down
    max_bad_share: RealFloat = Field(0.34, ge=0, le=1)
    finding_ttl_s: RealFloat = Field(300.0, gt=0)  # an active finding not repeated for this long has expired
    # A broker whose demotion was just undone catches up: re-added to replica sets it copies what
    # it missed, cold caches serve its reads, and leading again it waits on the next slow follower.
    # For this long after the restore its findings do not count as a bad broker, so they cannot
    # hold the breaker against the next victim (acting on it again is the cooldown's to allow).
    returning_grace_s: RealFloat = Field(120.0, ge=0)


class FailuresConfig(StrictModel):
    """The breaker on failing actions: ``max_failures`` failed actions within ``window_s`` open it,
    and it stays open (every finding refused) until a person resets it (``remediate reset``)."""

    max_failures: StrictInt = Field(3, ge=1)
    window_s: RealFloat = Field(3600.0, gt=0)


class LeaseConfig(StrictModel):
    """One acting remediator per cluster. With ``execute: true`` the lease also fences every change
    and the execution state lives in ``state_topic`` (compacted, next to the lease topic)."""

    enabled: StrictBool = True
    topic: str = "linkwatch.remediation.lease"
    state_topic: str = "linkwatch.remediation.state"
    group: str = "linkwatch-remediator"
    session_timeout_ms: StrictInt = Field(6000, ge=1000, le=300_000)
    heartbeat_interval_ms: StrictInt = Field(1000, ge=100)


class LatencyConfig(StrictModel):
    """Where the rebalance pipeline reads the brokers' Produce p99 (None: no back-off signal)."""

    prometheus_url: str | None = None  # e.g. http://127.0.0.1:9090
    query: str | None = None  # default: remediation.latency.DEFAULT_QUERY
    timeout_s: float = Field(2.0, gt=0, le=30)


class RemediatorConfig(StrictModel):
    cluster: str = DEFAULT_CLUSTER
    kafka: KafkaClientConfig = KafkaClientConfig()  # the cluster acted on, holding findings_topic
    execute: StrictBool = False  # dry run until this is true (a real boolean: 'true' is refused)
    state_dir: DirLocation = Path("/var/lib/linkwatch/remediation")
    audit_log: FileLocation | None = None  # default: <state_dir>/audit.jsonl
    findings_topic: str = "linkwatch.findings"
    # Which remediation acts on which finding rule; a rule not listed is only audited.
    rules: dict[str, str] = Field(default_factory=lambda: {"slow_broker": "noop"})
    # Chosen remediations and their settings (name -> settings).
    remediations: dict[str, dict[str, Any] | None] = Field(default_factory=lambda: {"noop": None})
    cooldown_s: RealFloat = Field(600.0, ge=0)
    # A finding that cleared: demotions are undone after the subject stayed healthy this long.
    restore_hold_s: RealFloat = Field(300.0, ge=0)
    caps: CapsConfig = Field(default_factory=CapsConfig)
    circuit_breaker: CircuitBreakerConfig = Field(default_factory=CircuitBreakerConfig)
    failures: FailuresConfig = Field(default_factory=FailuresConfig)
    intake: IntakeConfig = Field(default_factory=IntakeConfig)
    impact: ImpactConfig = Field(default_factory=ImpactConfig)
    lease: LeaseConfig = Field(default_factory=LeaseConfig)
    latency: LatencyConfig = Field(default_factory=LatencyConfig)
    # Moves of a remediator killed mid-run: on restart, "finish" waits for them, "cancel" reverts.
    on_restart: str = Field("finish", pattern="^(finish|cancel)$")

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"})

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
        if self.execute and not self.kafka.bootstrap_servers:
            raise ValueError("kafka.bootstrap_servers is required when execute is true")
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
