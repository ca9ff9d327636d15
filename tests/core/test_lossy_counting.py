"""Lossy counting guarantees on Zipf and adversarial streams, against exact counts."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from linkwatch.lossy_counting import LossyCounter


def zipf_stream(n: int, keys: int, s: float, seed: int) -> list[str]:
    rng = random.Random(seed)
    weights = [1 / (k**s) for k in range(1, keys + 1)]
    return [f"k{k}" for k in rng.choices(range(1, keys + 1), weights=weights, k=n)]


def adversarial_stream(n: int, seed: int) -> list[str]:
    # Keys hovering around the support boundary, arriving late and in bursts.
    rng = random.Random(seed)
    stream = [f"u{i}" for i in range(n // 2)]  # singletons
    for key, share in (("above", 0.06), ("edge", 0.05), ("between", 0.047), ("below", 0.04)):
        stream += [key] * int(share * n)
    rng.shuffle(stream)
    return stream[:n]


STREAMS = [
    ("zipf 1.1", zipf_stream(50_000, 5_000, 1.1, 1)),
    ("zipf 0.8", zipf_stream(50_000, 2_000, 0.8, 2)),
    ("adversarial", adversarial_stream(40_000, 3)),
    ("uniform", [f"k{i % 1000}" for i in range(30_000)]),
]


@pytest.mark.parametrize("stream", [s for _, s in STREAMS], ids=[n for n, _ in STREAMS])
@pytest.mark.parametrize(("support", "epsilon"), [(0.05, 0.005), (0.02, 0.001)])
def test_guarantees(stream: list[str], support: float, epsilon: float) -> None:
    counter = LossyCounter(support, epsilon)
    counter.update(stream)
    exact = Counter(stream)
    n = len(stream)
    reported = dict(counter.frequent())
    must = {k for k, c in exact.items() if c >= support * n}
    assert must <= set(reported), "a key above s·N was missed"
    assert all(exact[k] >= (support - epsilon) * n for k in reported), "a key below (s−ε)·N was reported"
    assert all(exact[k] - epsilon * n <= c <= exact[k] for k, c in reported.items()), "count outside ε·N"


def test_memory_is_bounded() -> None:
    import math

    counter = LossyCounter(0.05, 0.01)
    counter.update(f"u{i}" for i in range(100_000))  # all distinct: the worst case for memory
    assert len(counter) <= (1 / 0.01) * math.log(0.01 * 100_000) + 1 / 0.01


def test_zipf_top_keys_found() -> None:
    counter = LossyCounter(0.05, 0.005)
    counter.update(zipf_stream(20_000, 1_000, 1.2, 4))
    assert [k for k, _ in counter.frequent()][:2] == ["k1", "k2"]


@pytest.mark.parametrize(
    ("support", "epsilon"), [(0.05, 0.05), (0.05, 0.0), (0.0, 0.01), (1.0, 0.1), (0.01, 0.02)]
)
def test_bad_parameters(support: float, epsilon: float) -> None:
    with pytest.raises(ValueError, match="epsilon < support"):
        LossyCounter(support, epsilon)
