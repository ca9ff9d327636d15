"""Lossy counting (Manku & Motwani, 2002) for hot keys in a stream.

Shared by the analyzer (hot keys over sampled record keys) and the producer partitioner (hot keys
among the records it places). Pure algorithm, no I/O and **not thread-safe**: a caller that
shares a counter between threads holds its own lock around every call.

With support ``s`` and error ``ε`` (ε ≪ s) over a stream of N items, :meth:`LossyCounter.frequent`
guarantees: every key whose true count is ≥ s·N is reported; no key whose true count is
< (s − ε)·N is reported; every reported count underestimates the true count by at most ε·N.
Memory is at most (1/ε)·log(ε·N) entries.

``max_entries`` puts a hard cap on the entries besides (for callers that must bound memory under
any stream, e.g. a producer fed by untrusted keys): when an add goes over it, the entries with
the smallest upper bounds are evicted and every later new entry starts with that bound as its
possible undercount. The undercount bound then becomes max(ε·N, :attr:`LossyCounter.evicted_bound`)
(:meth:`LossyCounter.error_bound`); with no cap, or a cap never reached, the guarantees above hold
unchanged.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable

# On going over the cap, evict down to this share of it, so evictions are amortised over many adds.
_EVICT_TO = 0.9


class LossyCounter:
    def __init__(self, support: float = 0.05, epsilon: float = 0.005, max_entries: int | None = None) -> None:
        if not 0 < epsilon < support < 1:
            raise ValueError(f"need 0 < epsilon < support < 1, got support={support} epsilon={epsilon}")
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"max_entries must be >= 1 or None, got {max_entries}")
        self.support = support
        self.epsilon = epsilon
        self.max_entries = max_entries
        self.width = math.ceil(1 / epsilon)
        self.n = 0
        self.evicted_bound = 0  # largest count + delta of an entry evicted by the cap
        self.evictions = 0
        self._bucket = 1
        self._entries: dict[Hashable, list[int]] = {}  # key -> [count, max undercount delta]

    def add(self, key: Hashable) -> None:
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = [1, max(self._bucket - 1, self.evicted_bound)]
        else:
            entry[0] += 1
        self.n += 1
        if self.n % self.width == 0:
            self._prune()
        if self.max_entries is not None and len(self._entries) > self.max_entries:
            self._evict()

    def update(self, keys: Iterable[Hashable]) -> None:
        for k in keys:
            self.add(k)

    def _prune(self) -> None:
        b = self._bucket
        self._entries = {k: e for k, e in self._entries.items() if e[0] + e[1] > b}
        self._bucket += 1

    def _evict(self) -> None:
        assert self.max_entries is not None
        drop = len(self._entries) - max(1, int(self.max_entries * _EVICT_TO))
        victims = heapq.nsmallest(drop, self._entries.items(), key=lambda kv: kv[1][0] + kv[1][1])
        for k, e in victims:
            self.evicted_bound = max(self.evicted_bound, e[0] + e[1])
            del self._entries[k]
        self.evictions += len(victims)

    def __len__(self) -> int:
        return len(self._entries)

    def estimate(self, key: Hashable) -> int:
        """The counted occurrences of ``key`` (0 when it is not tracked); never above the true count."""
        entry = self._entries.get(key)
        return entry[0] if entry is not None else 0

    def error_bound(self) -> float:
        """How far any reported count may lie below the true count."""
        return max(self.epsilon * self.n, self.evicted_bound)

    def frequent(self) -> list[tuple[Hashable, int]]:
        """Keys with estimated count ≥ (s − ε)·N, most frequent first."""
        floor = (self.support - self.epsilon) * self.n
        hits = [(k, e[0]) for k, e in self._entries.items() if e[0] >= floor]
        return sorted(hits, key=lambda kv: -kv[1])
