"""Which keys are hot *now*: lossy counting over consecutive windows of records.

Lossy counting over the whole stream never forgets: a key that was hot for an hour stays above
the support long after it cooled. So counting restarts every ``window_records`` records. A key is
hot while it is frequent in the last complete window (estimated count ≥ (s − ε)·W) or, once the
running window holds ``warmup_records`` records, while its count there is ≥ s·n. A key that stays
below that for one whole window is cold again (returns home) at most two windows after it cooled.

Memory: the running counter holds at most ``max_tracked_keys`` entries (hard cap, see
:class:`linkwatch.lossy_counting.LossyCounter`), the hot set of the last window at most
1 / (s − ε) keys. Not thread-safe: the partitioner holds its lock around every call.
"""

from __future__ import annotations

import math
from collections.abc import Hashable

from linkwatch.lossy_counting import LossyCounter


class HotKeyTracker:
    def __init__(
        self,
        support: float = 0.01,
        epsilon: float = 0.002,
        window_records: int = 10_000,
        warmup_records: int | None = None,
        max_tracked_keys: int = 2_000,
    ) -> None:
        if max_tracked_keys < 1:
            raise ValueError(f"max_tracked_keys must be >= 1, got {max_tracked_keys}")
        first = LossyCounter(support, epsilon, max_tracked_keys)  # validates support and epsilon
        if window_records < math.ceil(1 / epsilon):
            raise ValueError(
                f"window_records must be >= 1/epsilon = {math.ceil(1 / epsilon)}, got {window_records}"
            )
        self.support = support
        self.epsilon = epsilon
        self.window_records = window_records
        self.warmup_records = window_records // 10 if warmup_records is None else warmup_records
        if not 0 < self.warmup_records <= window_records:
            raise ValueError(f"warmup_records must be in (0, window_records], got {self.warmup_records}")
        self.max_tracked_keys = max_tracked_keys
        self._counter = first
        self._last_hot: dict[Hashable, float] = {}  # key -> its share of the last window
        self.windows = 0

    def observe(self, key: Hashable) -> bool:
        """Count one record with ``key``; whether the key is hot after counting it."""
        c = self._counter
        c.add(key)
        hot = self.is_hot(key)
        if c.n >= self.window_records:
            self._last_hot = {k: n / c.n for k, n in c.frequent()}
            self._counter = LossyCounter(self.support, self.epsilon, self.max_tracked_keys)
            self.windows += 1
        return hot

    def is_hot(self, key: Hashable) -> bool:
        c = self._counter
        return key in self._last_hot or (c.n >= self.warmup_records and c.estimate(key) >= self.support * c.n)

    def share(self, key: Hashable) -> float:
        """The key's estimated share of the records: the larger of the last window's and the
        running window's (0 before the warmup), never above the true share of either window."""
        c = self._counter
        running = c.estimate(key) / c.n if c.n >= self.warmup_records else 0.0
        return max(self._last_hot.get(key, 0.0), running)

    def hot_keys(self) -> list[Hashable]:
        """The keys hot now (last window's and the running window's), in no particular order."""
        c = self._counter
        running = {k for k, n in c.frequent() if c.n >= self.warmup_records and n >= self.support * c.n}
        return list(self._last_hot.keys() | running)

    def tracked(self) -> int:
        """Keys held in memory (running counter + last window's hot set)."""
        return len(self._counter) + len(self._last_hot)
