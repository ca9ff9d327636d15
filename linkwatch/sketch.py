"""Mergeable relative-error quantile sketches (DDSketch, 1 % relative accuracy).

The agent builds a :class:`LatencySketch` per (request type, stage, window); it travels inside
records as a plain dict of log-bucket keys and counts (:meth:`LatencySketch.to_dict`), so the
aggregation can merge sketches from many brokers by summing counts per key and read quantiles
by the sketch's own rule (:mod:`aggregation.sketch_math`, with this mapping's constants:
:func:`key_to_value`). Percentiles are never averaged.

Quantile definition (shared by the sketch and by tests' exact reference): the value at rank
``floor(q * (n - 1))`` of the sorted samples (the "lower" quantile), as DDSketch reports it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

RELATIVE_ACCURACY = 0.01
_MAPPING = LogarithmicMapping(RELATIVE_ACCURACY)
GAMMA: float = _MAPPING.gamma
# Values at or below this are counted as zero (Kafka stage times are >= 0 and often exactly 0).
MIN_POSITIVE_MS = 1e-3


def key_to_value(key: int) -> float:
    """Representative value of a bucket; within RELATIVE_ACCURACY of every value in it."""
    return float(_MAPPING.value(key))


class LatencySketch:
    """A DDSketch of non-negative latencies in milliseconds, serialisable to a plain dict."""

    __slots__ = ("_sketch",)

    def __init__(self) -> None:
        self._sketch = DDSketch(RELATIVE_ACCURACY)

    def add(self, value_ms: float) -> None:
        # DDSketch counts values below its mapping's min as zero; clamp tiny/negative to 0 too.
        self._sketch.add(value_ms if value_ms > MIN_POSITIVE_MS else 0.0)

    def merge(self, other: LatencySketch) -> None:
        self._sketch.merge(other._sketch)

    @property
    def count(self) -> int:
        return int(self._sketch.count)

    @property
    def sum(self) -> float:
        return float(self._sketch.sum)

    def quantile(self, q: float) -> float | None:
        value = self._sketch.get_quantile_value(q)
        return None if value is None else float(value)

    def to_dict(self) -> dict[str, object]:
        """``{"zero": n, "buckets": {key: count}, "count", "sum", "min", "max"}``; keys as strings."""
        store = self._sketch._store
        buckets = {str(i + store.offset): int(c) for i, c in enumerate(store.bins) if c}
        s = self._sketch
        return {
            "zero": int(s._zero_count),
            "buckets": buckets,
            "count": int(s.count),
            "sum": float(s.sum),
            "min": float(s._min) if s.count else 0.0,
            "max": float(s._max) if s.count else 0.0,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> LatencySketch:
        out = cls()
        sk = out._sketch
        buckets = d.get("buckets", {})
        if not isinstance(buckets, Mapping):
            raise ValueError(f"sketch buckets must be a mapping, got {type(buckets).__name__}")
        for key, count in buckets.items():
            sk._store.add(int(key), int(count))
        zero = int(d.get("zero", 0))  # type: ignore[arg-type]
        sk._zero_count = float(zero)
        sk._count = float(zero + sum(int(c) for c in buckets.values()))
        sk._sum = float(d.get("sum", 0.0))  # type: ignore[arg-type]
        if sk._count:
            sk._min = float(d.get("min", 0.0))  # type: ignore[arg-type]
            sk._max = float(d.get("max", 0.0))  # type: ignore[arg-type]
        return out


def exact_quantile(values: list[float], q: float) -> float:
    """The reference the sketch is tested against: sorted value at rank floor(q * (n - 1))."""
    ordered = sorted(values)
    return ordered[math.floor(q * (len(ordered) - 1))]
