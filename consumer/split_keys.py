"""State for keys a skew-aware producer splits over several partitions (``docs/skew.md``).

A hot key's records arrive on up to d partitions, possibly at different consumers of the group,
with no order between partitions. A stateful consumer therefore keeps one **partial** aggregate
per (partition, key), built only from that partition's records (so it stays consistent with that
partition's committed offset and moves with the partition on a rebalance), and merges the
partials per key when it reads or emits a result.

The aggregate must be mergeable: ``merge`` associative and commutative, ``merge(zero(), a) == a``
(counts, sums, min/max, sets, mergeable sketches). Anything that needs the records in key order
(last value wins, sessions, deltas between consecutive records) cannot be merged this way: keep
such keys out of the skew-aware partitioner (they then stay on their home partition).

Not thread-safe: one instance per consumer thread, as the consumer's own state is.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from functools import reduce
from typing import Generic, TypeVar

P = TypeVar("P", bound=Hashable)  # a partition id, e.g. (topic, partition)
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
A = TypeVar("A")


class PartialAggregates(Generic[P, K, V, A]):
    def __init__(self, zero: Callable[[], A], fold: Callable[[A, V], A], merge: Callable[[A, A], A]) -> None:
        self.zero = zero
        self.fold = fold
        self.merge = merge
        self._state: dict[P, dict[K, A]] = {}

    def add(self, partition: P, key: K, value: V) -> None:
        """Fold one record of ``partition`` into that partition's partial for ``key``."""
        part = self._state.setdefault(partition, {})
        part[key] = self.fold(part[key] if key in part else self.zero(), value)

    def partials(self, partition: P) -> dict[K, A]:
        """This partition's partials (a copy): what to store together with its offset."""
        return dict(self._state.get(partition, {}))

    def restore(self, partition: P, partials: Mapping[K, A]) -> None:
        """On assignment: resume ``partition`` from partials stored with its committed offset."""
        self._state[partition] = dict(partials)

    def revoke(self, partition: P) -> dict[K, A]:
        """On revocation: drop ``partition``'s partials and return them (to store with its offset)."""
        return self._state.pop(partition, {})

    def merged(self, key: K) -> A:
        """``key``'s aggregate over the partitions this consumer holds (``zero()`` if none)."""
        return reduce(self.merge, (part[key] for part in self._state.values() if key in part), self.zero())

    def merged_all(self) -> dict[K, A]:
        """Every key's aggregate over the partitions held here."""
        return merge_partials(self.merge, self._state.values())

    def entries(self) -> int:
        """(partition, key) pairs in memory: a cold key costs one, a key split over d partitions up to d."""
        return sum(len(part) for part in self._state.values())

    def partitions(self) -> list[P]:
        return list(self._state)


def merge_partials(merge: Callable[[A, A], A], partials: Iterable[Mapping[K, A]]) -> dict[K, A]:
    """Merge partial maps per key: the step downstream of several consumers (or partitions)."""
    out: dict[K, A] = {}
    for part in partials:
        for k, a in part.items():
            out[k] = merge(out[k], a) if k in out else a
    return out


def counting() -> PartialAggregates[Hashable, Hashable, object, int]:
    """Per-key record counts (the seed's statistics job)."""
    return PartialAggregates(int, lambda a, _v: a + 1, lambda a, b: a + b)
