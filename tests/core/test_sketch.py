"""Sketches: 1 % relative accuracy against exact quantiles, lossless merge and serialisation."""

from __future__ import annotations

import random

import pytest

from linkwatch.sketch import LatencySketch, exact_quantile, key_to_value
from tests.aggregation.reference import quantile_from_buckets

QS = (0.5, 0.9, 0.99, 0.999)


def _data(kind: str, n: int = 20_000) -> list[float]:
    rng = random.Random(3)
    if kind == "lognormal":
        return [rng.lognormvariate(1.0, 1.5) for _ in range(n)]
    if kind == "bimodal":  # most requests fast, a slow tail (a paused broker)
        return [rng.uniform(0.2, 2.0) if rng.random() < 0.9 else rng.uniform(300, 600) for _ in range(n)]
    if kind == "with_zeros":  # Kafka stage times are often exactly 0
        return [0.0 if rng.random() < 0.6 else rng.expovariate(0.2) for _ in range(n)]
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["lognormal", "bimodal", "with_zeros"])
def test_quantiles_within_one_percent(kind: str) -> None:
    values = _data(kind)
    sketch = LatencySketch()
    for v in values:
        sketch.add(v)
    for q in QS:
        exact = exact_quantile(values, q)
        got = sketch.quantile(q)
        assert got == pytest.approx(exact, rel=0.01, abs=1e-3), (q, exact, got)


def test_merge_of_parts_equals_the_whole_and_survives_serialisation() -> None:
    values = _data("lognormal")
    parts = [LatencySketch() for _ in range(4)]
    for i, v in enumerate(values):
        parts[i % 4].add(v)
    merged = LatencySketch.from_dict(parts[0].to_dict())
    for p in parts[1:]:
        merged.merge(LatencySketch.from_dict(p.to_dict()))
    assert merged.count == len(values)
    assert merged.sum == pytest.approx(sum(values))
    dicts = [p.to_dict() for p in parts]
    buckets = [(int(k), c) for d in dicts for k, c in d["buckets"].items()]
    zero = sum(d["zero"] for d in dicts)
    for q in QS:
        assert quantile_from_buckets(zero, buckets, q) == pytest.approx(merged.quantile(q), rel=1e-9)
        assert merged.quantile(q) == pytest.approx(exact_quantile(values, q), rel=0.01)


def test_empty() -> None:
    assert LatencySketch().quantile(0.99) is None
    assert quantile_from_buckets(0, [], 0.99) is None
    assert LatencySketch.from_dict(LatencySketch().to_dict()).count == 0


def test_bucket_values_are_within_accuracy_of_their_members() -> None:
    for v in (0.01, 1.0, 3.3, 299.0, 300.0, 12345.0):
        s = LatencySketch()
        s.add(v)
        key = int(next(iter(s.to_dict()["buckets"])))
        assert key_to_value(key) == pytest.approx(v, rel=0.01)


def test_bad_buckets_rejected() -> None:
    with pytest.raises(ValueError, match="buckets must be a mapping"):
        LatencySketch.from_dict({"buckets": [1, 2]})
