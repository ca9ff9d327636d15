"""A fake: an in-memory cluster for the property tests, where no real cluster can run.

The Hypothesis tests hand :meth:`Remediator.handle` thousands of findings per run and compare
two whole runs decision by decision; a real cluster would make each run minutes long and its
views differ between the two runs (leaders move, log dirs fill). Everything the remediator reads
and the calls a demotion makes are here, applied as Kafka applies them (a same-set reassignment
reorders the replicas, a preferred election moves the leader to the first in-sync replica); the
real cluster's behaviour is proven by the ``*_cluster`` tests. ``fail_elections`` makes
``elect_leaders`` raise, as a controller that refuses elections does.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from remediation.impact import under_replicated
from remediation.view import ClusterView, PartitionState

RF3 = {p: (p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1) for p in range(6)}


class FakeCluster:
    """Reader (``brokers``, ``view``, ``under_replicated``) and admin (the calls remediations make)."""

    def __init__(self, topic: str = "t", assignment: dict[int, tuple[int, ...]] = RF3) -> None:
        self.brokers_racks = {1: "a", 2: "b", 3: "c"}
        self.partitions = {(topic, p): PartitionState(topic, p, r, r, r[0]) for p, r in assignment.items()}
        self.fail_elections = False
        self.calls: list[str] = []

    # -- reader --
    def brokers(self) -> set[int]:
        return set(self.brokers_racks)

    def view(self) -> ClusterView:
        return ClusterView(brokers=dict(self.brokers_racks), partitions=copy.deepcopy(self.partitions))

    def under_replicated(self) -> int:
        return under_replicated(self.partitions.values(), ())

    # -- admin --
    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"broker_id": b, "rack": r} for b, r in self.brokers_racks.items()]}

    def alter_partition_reassignments(self, moves: dict[Any, list[int] | None]) -> dict[Any, Any]:
        self.calls.append("alter_partition_reassignments")
        for tp, replicas in moves.items():
            key = (tp.topic, tp.partition)
            if replicas is not None and key in self.partitions:
                self.partitions[key] = replace(self.partitions[key], replicas=tuple(replicas))
        return dict.fromkeys(moves)

    def elect_leaders(
        self, election_type: int, by_topic: dict[str, list[int]], raise_errors: bool = True
    ) -> None:
        self.calls.append("elect_leaders")
        if self.fail_elections:
            raise RuntimeError("election refused by the controller")
        for topic, parts in by_topic.items():
            for p in parts:
                s = self.partitions[(topic, p)]
                self.partitions[(topic, p)] = replace(s, leader=next(b for b in s.replicas if b in s.isr))

    def leaders(self) -> dict[int, int]:
        return {p: s.leader for (_, p), s in self.partitions.items()}

    def replicas(self) -> dict[int, tuple[int, ...]]:
        return {p: s.replicas for (_, p), s in self.partitions.items()}
