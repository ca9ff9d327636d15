"""Configuration of ``linkwatch alerts serve`` (the Alertmanager webhook receiver).

Sample with every key: ``config/alerts.example.yml``. Environment overrides use the prefix
``LINKWATCH_ALERTS_`` (e.g. ``LINKWATCH_ALERTS_TOKEN``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from alerts.hooks.base import NOTIFIERS_GROUP
from findings.pipeline import PipelineConfig
from linkwatch import plugins
from linkwatch.config import FileLocation, StrictModel
from linkwatch.errors import ConfigError

ENV_PREFIX = "LINKWATCH_ALERTS_"


class HookConfig(StrictModel):
    type: str = Field(min_length=1, description="entry-point name in linkwatch.notifiers")
    options: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _known_options(self) -> HookConfig:
        # The hook's own Options model, at load: a typo fails `--check`, not the first alert.
        plugins.validate_options(NOTIFIERS_GROUP, self.type, self.options, "hooks")
        return self


class ReceiverConfig(StrictModel):
    host: str = "127.0.0.1"
    port: int = Field(9095, ge=0, le=65535)
    path: str = "/alerts"
    token: SecretStr | None = None
    token_file: FileLocation | None = None
    max_body_bytes: int = Field(1024 * 1024, ge=1024, le=64 * 1024 * 1024)
    max_concurrent_requests: int = Field(16, ge=1, le=1024)  # bodies being processed at once
    # Headers within this of the connection opening, the body within this of the headers.
    request_timeout_s: float = Field(10.0, gt=0, le=300)
    max_connections: int = Field(128, ge=1, le=10_000)  # open at once, slow clients included
    backlog: int = Field(128, ge=1, le=65_535)  # connections the kernel queues before accept
    dedup_entries: int = Field(10000, ge=1, le=10_000_000)
    queue_size: int = Field(1000, ge=1, le=1_000_000)
    audit_log: FileLocation = Path("linkwatch-alerts-audit.jsonl")
    audit_max_bytes: int = Field(64 * 1024 * 1024, ge=4096)
    hooks: list[HookConfig] = Field(default_factory=lambda: [HookConfig(type="log")])
    # Alerts naming a broker or stage go through the findings pipeline (its notifiers are the
    # hooks above; its own ``notifiers`` key is not used here). Absent: every alert to the hooks.
    remediation: PipelineConfig | None = None

    @field_validator("path")
    @classmethod
    def _path(cls, v: str) -> str:
        if not v.startswith("/"):
            raise ValueError("must start with /")
        return v

    def resolved_token(self) -> bytes:
        """The shared token; a receiver never runs without one."""
        if self.token is not None and self.token.get_secret_value():
            return self.token.get_secret_value().encode()
        if self.token_file is not None:
            try:
                text = self.token_file.read_text().strip()
            except OSError as e:
                raise ConfigError("token_file", [f"{self.token_file}: cannot read ({e.strerror})"]) from None
            if text:
                return text.encode()
            raise ConfigError("token_file", [f"{self.token_file}: empty"])
        raise ConfigError("token", [f"required: set token, token_file or ${ENV_PREFIX}TOKEN"])
