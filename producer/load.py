"""The load vector at the source: what this producer itself has sent to each partition.

Seed 000 keeps, at every source, one counter per worker of the messages it sent there, so no
worker is ever asked for its load. Here the counter decays (half-life ``half_life_s``) so the
vector says what is loaded *now*, and acks feed a second decaying counter: sent − acked is the
share still in flight (a broker slow to ack shows up there first). Lost acks (errors, records the
client dropped before sending) leave sent > acked only until both have decayed, never for good.

Not thread-safe: the partitioner holds its lock around every call. Time comes in as an argument.
"""

from __future__ import annotations

import math


class _Decaying:
    __slots__ = ("t", "value")

    def __init__(self, t: float) -> None:
        self.value = 0.0
        self.t = t

    def at(self, t: float, rate: float) -> float:
        """The value decayed to time ``t`` (stored, so later adds start from there)."""
        if t > self.t:
            self.value *= math.exp(-rate * (t - self.t))
            self.t = t
        return self.value


class PartitionLoad:
    """Decaying sent and acked amounts per partition of one topic (records or bytes, the caller's unit)."""

    def __init__(self, half_life_s: float = 5.0, in_flight_weight: float = 1.0) -> None:
        if half_life_s <= 0:
            raise ValueError(f"half_life_s must be > 0, got {half_life_s}")
        if in_flight_weight < 0:
            raise ValueError(f"in_flight_weight must be >= 0, got {in_flight_weight}")
        self._rate = math.log(2) / half_life_s
        self.in_flight_weight = in_flight_weight
        self._sent: dict[int, _Decaying] = {}
        self._acked: dict[int, _Decaying] = {}

    def _get(self, table: dict[int, _Decaying], partition: int, now: float) -> _Decaying:
        d = table.get(partition)
        if d is None:
            d = table[partition] = _Decaying(now)
        return d

    def sent(self, partition: int, amount: float, now: float) -> None:
        d = self._get(self._sent, partition, now)
        d.value = d.at(now, self._rate) + amount

    def acked(self, partition: int, amount: float, now: float) -> None:
        d = self._get(self._acked, partition, now)
        d.value = d.at(now, self._rate) + amount

    def score(self, partition: int, now: float) -> float:
        """Recent sent amount plus the weighted amount still in flight; 0 for a partition never used."""
        s = self._sent.get(partition)
        if s is None:
            return 0.0
        sent = s.at(now, self._rate)
        a = self._acked.get(partition)
        acked = a.at(now, self._rate) if a is not None else 0.0
        return sent + self.in_flight_weight * max(0.0, sent - acked)

    def knows(self, partition: int) -> bool:
        return partition in self._sent

    def partitions(self) -> int:
        return len(self._sent)
