"""A fresh, read-only view of the cluster, and the few admin calls remediations make.

:class:`ClusterView` is a plain snapshot (brokers and racks, every partition's replicas, ISR and
leader, log-dir sizes, reassignments in flight, the replication throttle configs) so that
planners are pure functions of it and tests can build one inline. :func:`read_view` fills it
from a live cluster with the kafka-python admin client; nothing here changes the cluster except
the functions whose names say so (``submit_*``, ``elect_preferred``, ``set_configs``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

from linkwatch.errors import LinkwatchError
from linkwatch.records import is_own

# Throttle configs (KIP-73): rates per broker, throttled replica lists per topic.
BROKER_THROTTLE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
TOPIC_THROTTLE_KEYS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
MIN_INSYNC_KEY = "min.insync.replicas"


class AdminError(LinkwatchError):
    """The cluster refused or failed an admin call; the message names the resource."""


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int

    @property
    def under_replicated(self) -> bool:
        return set(self.isr) != set(self.replicas)


@dataclass(frozen=True)
class ReplicaDir:
    """One replica's place on disk: ``future`` marks the destination copy of an intra-broker move."""

    broker: int
    log_dir: str
    topic: str
    partition: int
    size_bytes: int
    future: bool = False


@dataclass(frozen=True)
class LogDirState:
    broker: int
    path: str
    capacity_bytes: int  # filesystem total (DescribeLogDirs v4), or a configured capacity
    used_bytes: int  # sum of the replicas in this dir (Kafka's own sizes)


@dataclass
class ClusterView:
    brokers: dict[int, str | None]  # broker id -> rack
    partitions: dict[tuple[str, int], PartitionState]
    log_dirs: list[LogDirState] = field(default_factory=list)
    replicas: list[ReplicaDir] = field(default_factory=list)
    reassigning: dict[tuple[str, int], dict[str, list[int]]] = field(default_factory=dict)
    broker_configs: dict[int, dict[str, str]] = field(default_factory=dict)
    topic_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Each topic's effective min.insync.replicas (its own, else the broker default); a topic not
    # here is unknown, and a planner that shrinks a replica set must then assume the worst.
    min_insync: dict[str, int] = field(default_factory=dict)
    read_at: float = 0.0

    def led_by(self, broker: int, topics: Iterable[str] | None = None) -> list[PartitionState]:
        wanted = set(topics) if topics is not None else None
        return [
            p
            for p in self.partitions.values()
            if p.leader == broker and (wanted is None or p.topic in wanted)
        ]

    def summary(self) -> dict[str, Any]:
        """What the audit log records as the state before/after an action (kept small)."""
        return {
            "leaders": {f"{t}-{p}": s.leader for (t, p), s in sorted(self.partitions.items())},
            "replicas": {f"{t}-{p}": list(s.replicas) for (t, p), s in sorted(self.partitions.items())},
            "reassigning": sorted(f"{t}-{p}" for t, p in self.reassigning),
            "throttles": {
                **{f"broker:{b}": c for b, c in sorted(self.broker_configs.items()) if c},
                **{f"topic:{t}": c for t, c in sorted(self.topic_configs.items()) if c},
            },
        }


def read_view(
    admin: Any,
    topics: list[str] | None = None,
    *,
    with_log_dirs: bool = True,
    capacity_bytes: int | None = None,
) -> ClusterView:
    """Read a fresh view. ``topics=None``: every topic but the internal ones and linkwatch's
    own (the probe keeps its topic's placement itself)."""
    cluster = admin.describe_cluster()
    brokers = {b["broker_id"]: b.get("rack") for b in cluster["brokers"]}
    partitions: dict[tuple[str, int], PartitionState] = {}
    for meta in admin.describe_topics(topics):
        if meta.get("is_internal") or meta["name"].startswith("__") or is_own(meta["name"]):
            continue
        for p in meta.get("partitions") or []:
            key = (meta["name"], p["partition_index"])
            partitions[key] = PartitionState(
                topic=meta["name"],
                partition=p["partition_index"],
                replicas=tuple(p["replica_nodes"]),
                isr=tuple(p["isr_nodes"]),
                leader=p["leader_id"],
            )
    names = sorted({t for t, _ in partitions})
    view = ClusterView(brokers=brokers, partitions=partitions, read_at=time.time())
    view.reassigning = {(tp.topic, tp.partition): r for tp, r in admin.list_partition_reassignments().items()}
    view.broker_configs = _configs(
        admin, ConfigResourceType.BROKER, [str(b) for b in brokers], BROKER_THROTTLE_KEYS
    )
    topic_configs = _configs(admin, ConfigResourceType.TOPIC, names, (*TOPIC_THROTTLE_KEYS, MIN_INSYNC_KEY))
    view.topic_configs = {
        t: {k: v for k, v in c.items() if k in TOPIC_THROTTLE_KEYS} for t, c in topic_configs.items()
    }
    view.min_insync = {
        t: int(c[MIN_INSYNC_KEY]) for t, c in topic_configs.items() if c.get(MIN_INSYNC_KEY, "").isdigit()
    }
    view.broker_configs = {int(k): v for k, v in view.broker_configs.items()}
    if with_log_dirs:
        view.log_dirs, view.replicas = _log_dirs(admin, set(names), capacity_bytes)
    return view


def _configs(admin: Any, rtype: ConfigResourceType, names: list[str], keys: tuple[str, ...]) -> dict:
    """Only the keys that are set (dynamic overrides); an unset key is absent."""
    if not names:
        return {}
    result = admin.describe_configs(
        [ConfigResource(rtype, n, list(keys)) for n in names], config_filter="all"
    )
    out: dict[str, dict[str, str]] = {}
    for by_name in result.values():
        for name, entries in by_name.items():
            values = {}
            for key in keys:
                entry = entries.get(key)
                value = entry.get("value") if isinstance(entry, dict) else entry
                if value:
                    values[key] = value
            out[name] = values
    return out


def _log_dirs(
    admin: Any, topics: set[str], capacity_bytes: int | None
) -> tuple[list[LogDirState], list[ReplicaDir]]:
    dirs, replicas = [], []
    for entry in admin.describe_log_dirs():
        broker = entry["broker"]
        for d in entry["log_dirs"]:
            used = 0
            for t in d["topics"]:
                for p in t["partitions"]:
                    used += p["partition_size"]
                    if t["name"] in topics:
                        replicas.append(
                            ReplicaDir(
                                broker=broker,
                                log_dir=d["log_dir"],
                                topic=t["name"],
                                partition=p["partition_index"],
                                size_bytes=p["partition_size"],
                                future=bool(p.get("is_future_key")),
                            )
                        )
            capacity = capacity_bytes or int(d.get("total_bytes") or 0) or used or 1
            dirs.append(
                LogDirState(broker=broker, path=d["log_dir"], capacity_bytes=capacity, used_bytes=used)
            )
    return dirs, replicas


# --- the calls that change the cluster --------------------------------------------------------


def submit_reassignments(admin: Any, moves: Mapping[tuple[str, int], list[int] | None]) -> None:
    """Start (replicas) or cancel (None, KIP-455) reassignments; raise naming refused partitions."""
    if not moves:
        return
    result = admin.alter_partition_reassignments({TopicPartition(t, p): r for (t, p), r in moves.items()})
    refused = [f"{tp.topic}-{tp.partition}: {err.__name__}" for tp, err in result.items() if err is not None]
    # Cancelling a reassignment that already finished is not an error worth stopping for.
    refused = [r for r in refused if "NoReassignmentInProgress" not in r]
    if refused:
        raise AdminError("reassignment refused: " + "; ".join(refused))


def elect_preferred(admin: Any, partitions: Iterable[tuple[str, int]]) -> None:
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    if by_topic:
        admin.elect_leaders(0, by_topic, raise_errors=False)


def set_configs(admin: Any, rtype: ConfigResourceType, name: str, configs: Mapping[str, str | None]) -> None:
    """Incrementally set (or, for None, delete) configs of one resource; raise if refused."""
    ops = {
        k: (AlterConfigOp.DELETE, None) if v is None else (AlterConfigOp.SET, v) for k, v in configs.items()
    }
    result = admin.alter_configs([ConfigResource(rtype, name, ops)], raise_on_unknown=False, incremental=True)
    errors = [f"{n}: {o}" for by_name in result.values() for n, o in by_name.items() if o != "OK"]
    if errors:
        raise AdminError(f"config change refused for {rtype.name.lower()} " + "; ".join(errors))
