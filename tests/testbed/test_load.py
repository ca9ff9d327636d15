"""Key distributions and load options: shapes and clear errors."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from linkwatch.errors import ConfigError
from linkwatch.testbed.load import KeyDistribution, ProducerLoad


def _draw(spec: str, n: int = 50_000, keys: int = 100) -> Counter[bytes | None]:
    sample = KeyDistribution.parse(spec, keys).sampler(random.Random(7))
    return Counter(sample() for _ in range(n))


def test_uniform_keys_are_even() -> None:
    counts = _draw("uniform")
    assert len(counts) == 100
    assert max(counts.values()) / min(counts.values()) < 1.6


@pytest.mark.parametrize("exponent", [0.8, 1.2, 2.0])
def test_zipf_rank_frequencies_follow_the_exponent(exponent: float) -> None:
    counts = _draw(f"zipf:{exponent}")
    top = counts[b"key-000000"]
    # P(k) ∝ 1/k^s: the rank-1 to rank-4 frequency ratio is 4^s.
    assert top / counts[b"key-000003"] == pytest.approx(4**exponent, rel=0.15)


def test_no_keys() -> None:
    assert set(_draw("none", n=100)) == {None}


@pytest.mark.parametrize(
    ("spec", "keys", "message"),
    [
        ("pareto", 10, "use none, uniform or zipf"),
        ("zipf:abc", 10, "exponent must be a number"),
        ("zipf:-1", 10, "exponent must be > 0"),
        ("uniform", 0, "must be at least 1"),
    ],
)
def test_bad_key_distribution(spec: str, keys: int, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        KeyDistribution.parse(spec, keys)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate_per_s": 0}, "--rate"),
        ({"message_bytes": 0}, "--size"),
        ({"acks": "2"}, "--acks"),
    ],
)
def test_bad_producer_options(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerLoad("127.0.0.1:1", "t", **kwargs)
