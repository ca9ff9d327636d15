"""The load vector at the source: what this producer itself has sent to each partition.

Seed 000 keeps, at every source, one counter per worker of the messages it sent there, so no
worker is ever asked for its load. Here the counter decays (half-life ``half_life_s``) so the
vector says what is loaded *now*, and acks feed a second decaying counter: sent − acked is the
share still in flight (a broker slow to ack shows up there first). Lost acks (errors, records the
client dropped before sending) leave sent > acked only until both have decayed, never for good.

The counters use forward decay (Cormode et al., ICDE 2009): an amount added at time t is stored
multiplied by e^{λ(t − t₀)}, so adding one costs one multiplication and comparing partitions
at the same time needs no decay at all (every stored value shares the factor e^{−λ(now − t₀)});
t₀ moves forward, and the stored values are scaled down, long before the factors overflow.

Not thread-safe: the partitioner holds its lock around every call. Time comes in as an argument.
"""

from __future__ import annotations

import math

# Move t₀ forward once λ(t − t₀) passes this: e^300 ≈ 1e130, far from a float's 1e308.
_RESCALE_AT = 300.0


class PartitionLoad:
    """Decaying sent and acked amounts per partition of one topic (records or bytes, the caller's unit)."""

    def __init__(self, half_life_s: float = 5.0, in_flight_weight: float = 1.0) -> None:
        if half_life_s <= 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        if in_flight_weight < 0:
            raise ValueError(f"in_flight_weight must be >= 0, got {in_flight_weight}")
        self._rate = math.log(2) / half_life_s
        self.in_flight_weight = in_flight_weight
        self._t0: float | None = None
        self._last = -math.inf  # the latest time seen: time never runs back for the counters
        # Forward-decayed amounts indexed by partition (partitions are 0..n-1 in Kafka).
        self._sent: list[float] = []
        self._acked: list[float] = []
        self._known: set[int] = set()  # partitions sent to

    def weight(self, now: float) -> float:
        """e^{λ(now − t₀)}: what an amount added at ``now`` is stored as (per unit)."""
        if now < self._last:
            now = self._last
        self._last = now
        if self._t0 is None:
            self._t0 = now
        x = self._rate * (now - self._t0)
        if x > _RESCALE_AT:
            scale = math.exp(-x)
            self._sent = [v * scale for v in self._sent]
            self._acked = [v * scale for v in self._acked]
            self._t0, x = now, 0.0
        return math.exp(x)

    def _grow(self, partition: int) -> None:
        if partition < 0:
            raise ValueError(f"partition must be >= 0, got {partition}")
        more = partition + 1 - len(self._sent)
        self._sent += [0.0] * more
        self._acked += [0.0] * more

    def sent(self, partition: int, amount: float, now: float) -> None:
        if partition >= len(self._sent):
            self._grow(partition)
        self._sent[partition] += amount * self.weight(now)
        self._known.add(partition)

    def acked(self, partition: int, amount: float, now: float) -> None:
        if partition >= len(self._sent):
            self._grow(partition)
        self._acked[partition] += amount * self.weight(now)

    def relative_scores(self, partitions: list[int]) -> list[float]:
        """The scores of ``partitions`` times one common positive factor: ordered as
        :meth:`score` at any one time, without decaying anything."""
        if partitions and max(partitions) >= len(self._sent):
            self._grow(max(partitions))
        sent, acked, w = self._sent, self._acked, self.in_flight_weight
        return [s + w * (s - a if s > a else 0.0) for s, a in ((sent[p], acked[p]) for p in partitions)]

    def score(self, partition: int, now: float) -> float:
        """Recent sent amount plus the weighted amount still in flight; 0 for a partition never used."""
        return self.relative_scores([partition])[0] / self.weight(now)

    def knows(self, partition: int) -> bool:
        return partition in self._known

    def partitions(self) -> int:
        return len(self._known)
