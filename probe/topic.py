"""The probe topic: one partition whose preferred leader is each live broker, kept that way.

The probe owns its topic and changes nothing else in the cluster. :func:`plan` is a pure rule
over a snapshot (:class:`TopicView`); :func:`apply` carries a plan out with the admin client.

Rule 1 — every live broker *owns* one partition: the first partition (by number) whose
preferred leader (first replica) it is. Other partitions are *spares*.
Rule 2 — a live broker without a partition takes a spare whose leader is online (its preferred
leader left, or it duplicates another broker's): the spare is reassigned to
``[broker, next live brokers…]``. No usable spare: a partition is created for it (a partition
whose only replicas left cannot move — with replication factor 1 it stays offline and unprobed
until its broker returns).
Rule 3 — an owned partition whose current leader is not its (live) preferred leader has drifted:
a preferred-leader election moves it back.
Rule 4 — nothing is done while a reassignment of the topic is in progress (the snapshot is not
settled); the next check plans again.

Probes go to every partition with an online leader and are attributed to that *current* leader.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition
from kafka.admin import NewTopic

log = logging.getLogger(__name__)

NO_LEADER = -1


@dataclass(frozen=True)
class TopicView:
    """What the plan needs: live brokers, and per partition its replicas and current leader."""

    brokers: tuple[int, ...]
    replicas: Mapping[int, tuple[int, ...]]
    leaders: Mapping[int, int]  # partition -> leader broker, NO_LEADER when offline
    reassigning: bool = False

    @property
    def exists(self) -> bool:
        return bool(self.replicas)


@dataclass(frozen=True)
class Plan:
    create: tuple[tuple[int, ...], ...] = ()  # replica lists of partitions to add, in order
    reassign: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    elect: tuple[int, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.reassign or self.elect)

    def describe(self) -> str:
        if self.empty:
            return "probe topic: nothing to do"
        parts = []
        if self.create:
            parts.append("create " + ", ".join(str(list(r)) for r in self.create))
        if self.reassign:
            parts.append("reassign " + ", ".join(f"{p}->{list(r)}" for p, r in sorted(self.reassign.items())))
        if self.elect:
            parts.append("elect preferred leaders of " + ", ".join(map(str, self.elect)))
        return "probe topic: " + "; ".join(parts)


def replicas_for(leader: int, brokers: Sequence[int], replication_factor: int) -> tuple[int, ...]:
    """``leader`` then the next live brokers in id order (wrapping), ``replication_factor`` in all
    (fewer when the cluster has fewer brokers)."""
    ring = sorted(brokers)
    i = ring.index(leader)
    n = min(replication_factor, len(ring))
    return tuple(ring[(i + k) % len(ring)] for k in range(n))


def owners(view: TopicView) -> dict[int, int]:
    """Rule 1: live broker -> the partition it owns."""
    live = set(view.brokers)
    out: dict[int, int] = {}
    for p in sorted(view.replicas):
        reps = view.replicas[p]
        if reps and reps[0] in live and reps[0] not in out:
            out[reps[0]] = p
    return out


def plan(view: TopicView, replication_factor: int) -> Plan:
    """Rules 1-4 over one snapshot."""
    if view.reassigning or not view.brokers:
        return Plan()
    owned = owners(view)
    spares = [
        p
        for p in sorted(view.replicas)
        if p not in owned.values() and view.leaders.get(p, NO_LEADER) != NO_LEADER
    ]
    create: list[tuple[int, ...]] = []
    reassign: dict[int, tuple[int, ...]] = {}
    for b in sorted(view.brokers):
        if b in owned:
            continue
        target = replicas_for(b, view.brokers, replication_factor)
        if spares:
            reassign[spares.pop(0)] = target
        else:
            create.append(target)
    elect = tuple(
        p for b, p in sorted(owned.items(), key=lambda kv: kv[1]) if view.leaders.get(p, NO_LEADER) != b
    )
    return Plan(tuple(create), reassign, elect)


# --- the admin side ----------------------------------------------------------------------------


def read_view(admin: Any, topic: str) -> TopicView:
    """Snapshot of the cluster's live brokers and the probe topic (empty if it does not exist)."""
    brokers = tuple(sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"]))
    replicas: dict[int, tuple[int, ...]] = {}
    leaders: dict[int, int] = {}
    described = admin.describe_topics([topic])
    for t in described:
        if t.get("error_code", 0) != 0:
            continue
        for p in t.get("partitions") or []:
            replicas[p["partition_index"]] = tuple(p.get("replica_nodes") or ())
            leaders[p["partition_index"]] = p.get("leader_id", NO_LEADER)
    reassigning = False
    if replicas:
        ongoing = admin.list_partition_reassignments([TopicPartition(topic, p) for p in replicas])
        reassigning = bool(ongoing)
    return TopicView(brokers, replicas, leaders, reassigning)


def apply(admin: Any, topic: str, view: TopicView, p: Plan) -> None:
    """Carry out ``p`` on ``topic`` (created first when it does not exist). Errors propagate."""
    if p.create and not view.exists:
        assignment = dict(enumerate(list(r) for r in p.create))
        admin.create_topics([NewTopic(topic, -1, -1, replica_assignments=assignment)])
    elif p.create:
        total = len(view.replicas) + len(p.create)
        admin.create_partitions({topic: {"count": total, "assignments": [list(r) for r in p.create]}})
    if p.reassign:
        result = admin.alter_partition_reassignments(
            {TopicPartition(topic, part): list(r) for part, r in p.reassign.items()}
        )
        refused = [f"{tp.partition}: {err.__name__}" for tp, err in result.items() if err is not None]
        if refused:
            log.warning("probe topic reassignment refused: %s", "; ".join(refused))
    if p.elect:
        admin.elect_leaders(0, {topic: list(p.elect)}, raise_errors=False)
