"""Throttled replication: ``leader/follower.replication.throttled.rate`` on one broker and the
throttled replicas ``*`` on topics, so followers fall behind and acks=all produce waits on them
(the leaders' Remote stage). Both overrides are deleted on exit."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kafka.admin import ConfigResourceType

from testbed.faults.configs import apply
from testbed.faults.registry import register, unregister


@contextlib.contextmanager
def throttle_replication(admin, broker_id: int, rate_bytes_per_s: int, topics: list[str]) -> Iterator[None]:
    """Cap replication into and out of ``broker_id`` at ``rate_bytes_per_s`` for ``topics``."""
    if rate_bytes_per_s <= 0:
        raise ValueError(f"rate_bytes_per_s={rate_bytes_per_s} must be > 0")
    rate = str(rate_bytes_per_s)
    keys = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    replicas = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

    broker = [str(broker_id)]

    def undo() -> None:
        apply(admin, ConfigResourceType.BROKER, broker, dict.fromkeys(keys))
        apply(admin, ConfigResourceType.TOPIC, topics, dict.fromkeys(replicas))

    token = register(f"throttle broker {broker_id}", undo)
    try:
        apply(admin, ConfigResourceType.BROKER, broker, dict.fromkeys(keys, rate))
        apply(admin, ConfigResourceType.TOPIC, topics, dict.fromkeys(replicas, "*"))
        yield
    finally:
        unregister(token)
        undo()
