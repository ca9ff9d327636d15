"""A stalled follower: a broker moved to the end of the replica list of topics' partitions (same
replica set, nothing copied), so it follows and leads none of them, then paused in a duty
cycle: acks=all produce to those partitions waits on it in the leaders' Remote stage while its
own stages show nothing. The replica orders and preferred leaders come back on exit."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from linkwatch.errors import SetupError
from testbed.faults.partitions import (
    partitions,
    reorder_replicas,
    restore_preferred_leaders,
    wait_in_sync,
    wait_until_none,
)
from testbed.faults.pause import PauseDutyCycle
from testbed.faults.registry import register, unregister

# How long a topic may take to appear in the metadata of the broker asked before it is missing.
TOPIC_METADATA_WAIT_S = 5.0


@contextlib.contextmanager
def stall_follower(
    admin: Any,
    broker_id: int,
    pid: int,
    topics: list[str],
    pause_ms: int = 400,
    period_ms: int = 1000,
    timeout_s: float = 60.0,
    own_process: bool = False,
) -> Iterator[dict[str, list[int]]]:
    """Stall broker ``broker_id`` (JVM ``pid``) as a **follower** of every partition of ``topics``.

    Each partition's replicas are reordered (same set, nothing copied) so that ``broker_id`` comes
    last, its new first replica is elected leader, and once ``broker_id`` is in every ISR it is
    paused in a :class:`PauseDutyCycle`: acks=all produce to those partitions then waits on it in
    the leaders' Remote stage, while it leads none of them. Yields ``{topic: [leader per
    partition]}``. On exit the pause stops, the original replica orders come back and the
    preferred leaders are elected again. Keep ``pause_ms`` well under ``replica.lag.time.max.ms``
    (30 s) or the follower leaves the ISR and nobody waits on it any more. ``own_process``: as
    :class:`PauseDutyCycle`'s (pauses on time whatever the caller does).
    """
    if not topics:
        raise ValueError("stall_follower needs topics")
    # A topic created a moment ago may not be in the metadata of the broker this request reaches
    # (each broker applies the metadata log on its own time; a whole-suite run read none right
    # after the creation): asked again for a few seconds before it counts as missing.
    parts: dict[tuple[str, int], dict[str, Any]] = {}

    def missing() -> list[str]:
        parts.clear()
        parts.update(partitions(admin, topics))
        return [t for t in topics if not any(key[0] == t for key in parts)]

    wait_until_none(
        missing,
        TOPIC_METADATA_WAIT_S,
        lambda left: (
            f"stall_follower: topic {left} has no partitions in the metadata after "
            f"{TOPIC_METADATA_WAIT_S:g} s (does it exist?)"
        ),
    )
    original = {key: list(m["replica_nodes"]) for key, m in parts.items()}
    bad = [f"{t}-{p} (replicas {r})" for (t, p), r in original.items() if broker_id not in r or len(r) < 2]
    if bad:
        raise SetupError(
            f"broker {broker_id} cannot be a follower of {', '.join(bad)}: it must be one of 2+ replicas"
        )
    moved = {
        k: [b for b in r if b != broker_id] + [broker_id] for k, r in original.items() if r[-1] != broker_id
    }
    pause = PauseDutyCycle(pid, pause_ms=pause_ms, period_ms=period_ms, own_process=own_process)

    def undo() -> None:
        pause.stop()
        reorder_replicas(admin, {k: original[k] for k in moved}, timeout_s)
        restore_preferred_leaders(admin, topics, timeout_s)

    token = register(f"stall follower {broker_id}", undo)
    try:
        reorder_replicas(admin, moved, timeout_s)
        # A broker whose metadata still has the old orders reads the old leaders as preferred:
        # ask again until no moved partition is led by the stalled broker.
        deadline = time.monotonic() + timeout_s
        leaders = restore_preferred_leaders(admin, topics, timeout_s)
        while any(leaders[t][p] == broker_id for t, p in moved) and time.monotonic() < deadline:
            time.sleep(0.5)
            leaders = restore_preferred_leaders(admin, topics, timeout_s)
        wait_in_sync(admin, broker_id, topics, timeout_s)
        pause.start()
        yield leaders
    finally:
        unregister(token)
        undo()
