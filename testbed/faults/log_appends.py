"""Slow log appends on one broker: the per-broker dynamic ``log.flush.interval.messages=1``, so
every append on that broker only is flushed to disk, like a slow disk of its own (its Produce
Local stage grows, and so do follower appends to it). Deleted on exit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kafka.admin import ConfigResourceType

from testbed.faults.configs import apply
from testbed.faults.registry import register, unregister


@contextlib.contextmanager
def slow_log_appends(admin: Any, broker_id: int) -> Iterator[None]:
    """Make every log append on broker ``broker_id`` flush to disk (per-broker dynamic
    ``log.flush.interval.messages=1``), like a slow disk on that broker only: its Produce Local
    stage grows, and so do its follower appends (acks=all to peers' partitions waits on it).

    ``log.flush.interval.messages`` is a cluster-wide dynamic config, which Kafka also accepts
    per broker; it reaches every log of that broker whose topic has no ``flush.messages``
    override of its own. The per-broker override is deleted on exit. Costs nothing on tmpfs.
    """
    broker = [str(broker_id)]
    key = "log.flush.interval.messages"

    def undo() -> None:
        apply(admin, ConfigResourceType.BROKER, broker, {key: None})

    token = register(f"slow log appends on broker {broker_id}", undo)
    try:
        apply(admin, ConfigResourceType.BROKER, broker, {key: "1"})
        yield
    finally:
        unregister(token)
        undo()
