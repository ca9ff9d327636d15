"""Rack spread: partitions whose replicas all sit in one rack, under-replicated and offline counts.

Pure rules over ``describe_topics`` / ``describe_cluster`` answers (or any equivalent dicts),
with the broker→rack map as an argument so they can be checked against an explicit layout.
:class:`RackWatch` turns them into findings, one per topic and kind, only when the set of
affected partitions changes (and a closing finding when it empties).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from lag.collector import PassResult
from linkwatch.config import StrictModel
from linkwatch.records import Finding, is_own


class RackConfig(StrictModel):
    enabled: bool = True
    include_internal: bool = False  # __consumer_offsets etc., and linkwatch's own topics
    single_replica_is_finding: bool = True  # RF=1 means one rack by definition
    racks: dict[int, str] = Field(default_factory=dict)  # override/fill the brokers' broker.rack
    max_partitions_listed: int = Field(20, ge=1, le=1000)


@dataclass(frozen=True)
class PartitionPlacement:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    internal: bool = False


@dataclass
class SpreadReport:
    one_rack: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # topic -> [(p, rack)]
    single_replica: dict[str, list[int]] = field(default_factory=dict)
    under_replicated: dict[str, list[int]] = field(default_factory=dict)
    offline: dict[str, list[int]] = field(default_factory=dict)
    unknown_rack_brokers: set[int] = field(default_factory=set)


def placements(topics: Iterable[dict[str, Any]]) -> list[PartitionPlacement]:
    """From kafka-python's ``describe_topics()`` answer."""
    out = []
    for t in topics:
        if t.get("error_code", 0) != 0:
            continue
        for p in t.get("partitions", []):
            out.append(
                PartitionPlacement(
                    t["name"],
                    p["partition_index"],
                    p.get("leader_id", -1),
                    tuple(p.get("replica_nodes", [])),
                    tuple(p.get("isr_nodes", [])),
                    bool(t.get("is_internal", False)),
                )
            )
    return out


def rack_map(brokers: Iterable[dict[str, Any]], overrides: dict[int, str]) -> dict[int, str]:
    racks = {b["broker_id"]: b["rack"] for b in brokers if b.get("rack")}
    racks.update(overrides)
    return racks


def spread(parts: Iterable[PartitionPlacement], racks: dict[int, str], cfg: RackConfig) -> SpreadReport:
    r = SpreadReport()
    for p in parts:
        if (p.internal or is_own(p.topic)) and not cfg.include_internal:
            continue
        if p.leader < 0 or not p.isr:
            r.offline.setdefault(p.topic, []).append(p.partition)
        elif len(p.isr) < len(p.replicas):
            r.under_replicated.setdefault(p.topic, []).append(p.partition)
        missing = {b for b in p.replicas if b not in racks}
        if missing:
            r.unknown_rack_brokers |= missing
            continue
        if len(p.replicas) == 1:
            if cfg.single_replica_is_finding:
                r.single_replica.setdefault(p.topic, []).append(p.partition)
        elif len({racks[b] for b in p.replicas}) == 1:
            r.one_rack.setdefault(p.topic, []).append((p.partition, racks[p.replicas[0]]))
    for d in (r.single_replica, r.under_replicated, r.offline):
        for v in d.values():
            v.sort()
    return r


_KINDS = {
    "rack_spread": (
        "warning",
        "replicas of {n} partition(s) of {topic} all sit in one rack",
        "reassign so replicas span racks (e.g. with a rack-aware assignment)",
    ),
    "single_replica": (
        "warning",
        "{n} partition(s) of {topic} have one replica (one rack, no redundancy)",
        "raise the replication factor if the data matters",
    ),
    "under_replicated": (
        "warning",
        "{n} partition(s) of {topic} are under-replicated",
        "check the lagging followers' brokers (disk, network, replication throttles)",
    ),
    "offline": (
        "critical",
        "{n} partition(s) of {topic} are offline (no leader)",
        "bring back a broker holding a replica; consider unclean election only as a last resort",
    ),
}


class RackWatch:
    """Findings for rack spread and replica health, emitted only when the affected set changes."""

    def __init__(self, cfg: RackConfig, cluster: str, source: str) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.source = source
        self._last: dict[tuple[str, str], tuple[int, ...]] = {}
        self.report: SpreadReport | None = None

    def update(self, result: PassResult) -> list[Finding]:
        if not self.cfg.enabled or not result.topics:
            return []
        r = spread(placements(result.topics), rack_map(result.brokers, self.cfg.racks), self.cfg)
        self.report = r
        current: dict[tuple[str, str], tuple[int, ...]] = {}
        racks: dict[str, dict[int, str]] = {}
        for topic, items in r.one_rack.items():
            current[("rack_spread", topic)] = tuple(p for p, _ in items)
            racks[topic] = dict(items)
        for rule, d in (
            ("single_replica", r.single_replica),
            ("under_replicated", r.under_replicated),
            ("offline", r.offline),
        ):
            for topic, ps in d.items():
                current[(rule, topic)] = tuple(ps)
        now_ms = int(result.ts_s * 1000)
        out = []
        for key, ps in current.items():
            if self._last.get(key) != ps:
                out.append(self._finding(key, ps, racks.get(key[1], {}), now_ms, True))
        for key, ps in self._last.items():
            if key not in current:
                out.append(self._finding(key, ps, {}, now_ms, False))
        self._last = current
        return out

    def _finding(
        self, key: tuple[str, str], ps: tuple[int, ...], racks: dict[int, str], now_ms: int, active: bool
    ) -> Finding:
        rule, topic = key
        severity, summary, action = _KINDS[rule]
        listed = list(ps[: self.cfg.max_partitions_listed])
        evidence: dict[str, Any] = {
            "partitions": listed,
            "count": len(ps),
            "truncated": len(ps) > len(listed),
        }
        if racks:
            evidence["rack_of_partition"] = {str(p): racks[p] for p in listed if p in racks}
        text = summary.format(n=len(ps), topic=topic)
        return Finding(
            cluster=self.cluster,
            source=self.source,
            ts_ms=now_ms,
            rule=rule,
            subject=f"topic:{topic}",
            severity=severity if active else "info",
            summary=text if active else f"resolved: {text}",
            evidence=evidence,
            action=action if active else "none",
            active=active,
        )
