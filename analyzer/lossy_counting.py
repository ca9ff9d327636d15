"""Lossy counting (Manku & Motwani, 2002) for hot keys in a stream, over sampled record keys.

With support ``s`` and error ``ε`` (ε ≪ s) over a stream of N items, :meth:`LossyCounter.frequent`
guarantees: every key whose true count is ≥ s·N is reported; no key whose true count is
< (s − ε)·N is reported; every reported count underestimates the true count by at most ε·N.
Memory is at most (1/ε)·log(ε·N) entries.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable


class LossyCounter:
    def __init__(self, support: float = 0.05, epsilon: float = 0.005) -> None:
        if not 0 < epsilon < support < 1:
            raise ValueError(f"need 0 < epsilon < support < 1, got support={support} epsilon={epsilon}")
        self.support = support
        self.epsilon = epsilon
        self.width = math.ceil(1 / epsilon)
        self.n = 0
        self._bucket = 1
        self._entries: dict[Hashable, list[int]] = {}  # key -> [count, max undercount delta]

    def add(self, key: Hashable) -> None:
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = [1, self._bucket - 1]
        else:
            entry[0] += 1
        self.n += 1
        if self.n % self.width == 0:
            self._prune()

    def update(self, keys: Iterable[Hashable]) -> None:
        for k in keys:
            self.add(k)

    def _prune(self) -> None:
        b = self._bucket
        self._entries = {k: e for k, e in self._entries.items() if e[0] + e[1] > b}
        self._bucket += 1

    def __len__(self) -> int:
        return len(self._entries)

    def frequent(self) -> list[tuple[Hashable, int]]:
        """Keys with estimated count ≥ (s − ε)·N, most frequent first."""
        floor = (self.support - self.epsilon) * self.n
        hits = [(k, e[0]) for k, e in self._entries.items() if e[0] >= floor]
        return sorted(hits, key=lambda kv: -kv[1])
