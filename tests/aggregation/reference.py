"""The sketch arithmetic written plainly, one group at a time: the oracle the one implementation
(:mod:`aggregation.sketch_math`, numpy over whole columns) is tested against. Tests only.

Each function states the rule in the most direct Python (a dict of bucket counts, a running sum),
so it can be read against the definition in :mod:`aggregation.sketch_math`; it is checked itself
against DDSketch's own quantiles in ``tests/core/test_sketch.py``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from linkwatch.sketch import key_to_value

QUANTILES: dict[str, float] = {"p50_ms": 0.5, "p99_ms": 0.99, "p999_ms": 0.999}
NONZERO_QUANTILES: dict[str, float] = {"nonzero_p99_ms": 0.99}


def quantile_from_buckets(zero: int, buckets: Iterable[tuple[int, int]], q: float) -> float | None:
    """Quantile of merged buckets: ``buckets`` is (key, count) pairs, any order, keys may repeat.
    The bucket holding rank ``floor(q · (n − 1))`` (the zeros first), as DDSketch reads it;
    None when there is nothing. Counts must not be negative."""
    merged: dict[int, int] = {}
    for key, count in buckets:
        merged[key] = merged.get(key, 0) + count
    n = zero + sum(merged.values())
    if n == 0:
        return None
    rank = math.floor(q * (n - 1))
    if rank < zero:
        return 0.0
    seen = zero
    for key in sorted(merged):
        seen += merged[key]
        if seen > rank:
            return key_to_value(key)
    return key_to_value(max(merged))


def merged_row(sketches: Sequence[tuple[Mapping, float]]) -> dict[str, float | int | None]:
    """count, logged, the quantiles, the nonzero quantiles and mean of well-formed sketch dicts
    (:meth:`linkwatch.sketch.LatencySketch.to_dict`) merged, each with its capture ratio."""
    zero = sum(int(s["zero"]) for s, _ in sketches)
    pairs = [(int(k), int(c)) for s, _ in sketches for k, c in s["buckets"].items()]
    count = zero + sum(c for _, c in pairs)
    logged = sum(
        math.floor((int(s["zero"]) + sum(int(c) for c in s["buckets"].values())) * ratio + 0.5)
        for s, ratio in sketches
    )
    row: dict[str, float | int | None] = {"count": count, "logged": logged}
    row |= {name: quantile_from_buckets(zero, pairs, q) for name, q in QUANTILES.items()}
    row |= {name: quantile_from_buckets(0, pairs, q) for name, q in NONZERO_QUANTILES.items()}
    row["mean_ms"] = sum(float(s["sum"]) for s, _ in sketches) / count if count else None
    return row


def close(a: float | None, b: float | None, rel: float = 1e-9) -> bool:
    """Equal to ``rel`` relative, or both None."""
    return (a is None and b is None) or (a is not None and b is not None and math.isclose(a, b, rel_tol=rel))
