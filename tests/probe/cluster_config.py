"""The probe's config for tests on the real cluster: a fresh instance and topic per call,
probes every 100 ms, no /metrics server."""

from __future__ import annotations

import uuid
from typing import Any

from probe.config import ProbeConfig


def probe_config(bootstrap: str, window_s: int, **overrides: Any) -> ProbeConfig:
    """A probe on ``bootstrap`` with its own instance and probe topic (names end in one random
    suffix), 100 ms between probes, ``window_s`` windows, the topic checked every second and no
    metrics server; ``overrides`` are further ProbeConfig fields."""
    suffix = uuid.uuid4().hex[:8]
    fields: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "cluster": "c1",
        "instance": f"probe-{suffix}",
        "interval_ms": 100,
        "window_s": window_s,
        "topic": {"name": f"probe-{suffix}", "check_interval_s": 1.0},
        "metrics": {"enabled": False},
    }
    return ProbeConfig(**(fields | overrides))
