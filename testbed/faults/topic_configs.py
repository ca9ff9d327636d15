"""Topic config overrides for the length of a block, e.g. ``flush.messages=1``: every append to
those topics is flushed, so log appends on their leaders become slow (their Local stage). The
overrides are deleted on exit, whatever they read back as."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kafka.admin import ConfigResourceType

from testbed.faults.configs import apply
from testbed.faults.registry import register, unregister


@contextlib.contextmanager
def topic_configs(admin, topics: list[str], configs: dict[str, str]) -> Iterator[None]:
    """Override topic configs (e.g. ``flush.messages=1``: every append is flushed, so log
    appends on the topics' leaders become slow) and delete the overrides on exit."""
    if not topics or not configs:
        raise ValueError(f"topic_configs needs topics and configs, got {topics!r}, {configs!r}")

    def undo() -> None:
        apply(admin, ConfigResourceType.TOPIC, topics, dict.fromkeys(configs))

    token = register(f"topic configs {sorted(configs)} on {len(topics)} topics", undo)
    try:
        apply(admin, ConfigResourceType.TOPIC, topics, dict(configs))
        yield
    finally:
        unregister(token)
        undo()
