"""Replica orders and leaders of partitions, changed and waited for: shared by the faults that
move leadership (:mod:`.stalled_follower`) and by tests that fault one broker twice on one
cluster (:func:`restore_preferred_leaders`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from linkwatch.errors import SetupError


def restore_preferred_leaders(admin: Any, topics: list[str], timeout_s: float = 60.0) -> dict[str, list[int]]:
    """Make every partition of ``topics`` led by its preferred (first) replica again and wait for
    it. A fault that stalls a broker long enough (or a restart) moves its leadership to peers, and
    a later fault on that broker would then slow nobody's requests: tests that fault a broker
    twice on one cluster call this first. Returns ``{topic: [leader per partition]}``; raises
    :class:`TimeoutError` naming the partitions still led elsewhere."""
    deadline = time.monotonic() + timeout_s
    elected_at = -1.0
    while True:
        wrong: list[str] = []
        leaders: dict[str, list[int]] = {}
        for meta in admin.describe_topics(topics):
            parts = sorted(meta.get("partitions") or [], key=lambda p: p["partition_index"])
            leaders[meta["name"]] = [p.get("leader_id", -1) for p in parts]
            if not parts:  # no metadata (yet): not "every partition led as preferred"
                wrong.append(f"{meta['name']} (no partitions in the metadata)")
            wrong += [
                f"{meta['name']}-{p['partition_index']} (leader {p.get('leader_id')}, preferred {p['replica_nodes'][0]})"
                for p in parts
                if p.get("replica_nodes") and p.get("leader_id") != p["replica_nodes"][0]
            ]
        if not wrong:
            return leaders
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"not led by their preferred replica after {timeout_s:.0f} s: {', '.join(wrong)}"
            )
        if time.monotonic() - elected_at > 10.0:  # a follower out of the ISR cannot lead yet: ask again
            admin.elect_leaders(0, topics, raise_errors=False)
            elected_at = time.monotonic()
        time.sleep(0.5)


def partitions(admin: Any, topics: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """``{(topic, partition): metadata}`` of every partition of ``topics``."""
    return {
        (meta["name"], p["partition_index"]): p
        for meta in admin.describe_topics(topics)
        for p in meta.get("partitions") or []
    }


def reorder_replicas(admin: Any, orders: dict[tuple[str, int], list[int]], timeout_s: float = 30.0) -> None:
    """Give partitions these replica orders (same replica sets: nothing is copied, the change is
    immediate) and wait until the metadata shows them; raise SetupError naming the laggards."""
    from kafka import TopicPartition

    if not orders:
        return
    admin.alter_partition_reassignments({TopicPartition(t, p): r for (t, p), r in orders.items()})
    topics = sorted({t for t, _ in orders})

    def wrong() -> list[str]:
        meta = partitions(admin, topics)
        return [f"{t}-{p}" for (t, p), r in orders.items() if meta.get((t, p), {}).get("replica_nodes") != r]

    wait_until_none(
        wrong, timeout_s, lambda left: f"replica order not applied after {timeout_s:.0f} s: {left}"
    )


def wait_in_sync(admin: Any, broker_id: int, topics: list[str], timeout_s: float) -> None:
    def out() -> list[str]:
        return [
            f"{t}-{p}" for (t, p), m in partitions(admin, topics).items() if broker_id not in m["isr_nodes"]
        ]

    wait_until_none(
        out, timeout_s, lambda left: f"broker {broker_id} is not in the ISR of {left} after {timeout_s:.0f} s"
    )


def wait_until_none(
    laggards: Callable[[], list[str]], timeout_s: float, message: Callable[[str], str]
) -> None:
    """Poll ``laggards`` every 0.2 s until it returns nothing; past ``timeout_s`` raise SetupError
    with ``message`` of the ones left (comma-separated)."""
    deadline = time.monotonic() + timeout_s
    while left := laggards():
        if time.monotonic() > deadline:
            raise SetupError(message(", ".join(left)))
        time.sleep(0.2)
