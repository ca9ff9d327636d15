"""Key distributions and load options: shapes and clear errors."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkwatch.errors import ConfigError
from testbed.load import CLIENTS, ConsumerLoad, KeyDistribution, LoadStats, ProducerLoad, ensure_topic, p99_ms


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
        ({"client": "sarama"}, "--load-client"),
    ],
)
def test_bad_producer_options(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ProducerLoad("127.0.0.1:1", "t", **kwargs)


# -- the ack p99 of the last seconds (demo screen, remediation bench) -------------------------


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.floats(min_value=0.0, max_value=60.0), min_size=1, max_size=400))
def test_p99_is_the_value_at_rank_floor_099_n_minus_1(latencies_s: list[float]) -> None:
    ordered = sorted(latencies_s)
    rank = int(0.99 * (len(ordered) - 1))
    assert p99_ms(latencies_s) == ordered[rank] * 1000
    # At least 99 % of the values are at or under it (nearest rank, never interpolated).
    assert sum(v * 1000 <= p99_ms(latencies_s) for v in latencies_s) >= 0.99 * (len(latencies_s) - 1)


@pytest.mark.parametrize(
    ("latencies_s", "min_samples", "expected"),
    [
        ([], 1, None),  # nothing acked: no p99, not 0
        ([0.5] * 19, 20, None),  # too few for the caller's purpose
        ([0.5] * 20, 20, 500.0),
        ([0.001 * i for i in range(1, 101)], 1, 99.0),  # rank floor(0.99 * 99) = 98
        ([0.002], 1, 2.0),
    ],
)
def test_p99_table(latencies_s: list[float], min_samples: int, expected: float | None) -> None:
    got = p99_ms(latencies_s, min_samples=min_samples)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_recent_keeps_the_acks_of_the_window_only() -> None:
    stats = LoadStats()
    for at, latency, partition in [(100.0, 0.9, 0), (104.0, 0.2, 1), (105.0, 0.1, 2), (106.0, 0.05, 0)]:
        stats.recent_latencies.append((at, latency, partition))
    assert stats.recent(2.0, now=106.0) == [(0.2, 1), (0.1, 2), (0.05, 0)]
    assert stats.recent(0.5, now=106.0) == [(0.05, 0)]
    assert stats.recent(10.0, now=200.0) == []


# -- on the real brokers: both clients ----------------------------------------------------------


@pytest.mark.cluster
def test_both_clients_put_a_key_on_one_partition_and_time_every_ack(cluster3, admin, topic_name: str) -> None:
    """Each client's load acks all it sent, with a latency for every ack, and a key lands on the
    same partition through either (murmur2, as the Java client): a bench's skew is the same
    whichever client carries its load."""
    ensure_topic(admin, topic_name, 6, 3)
    partitions = {}
    for client in CLIENTS:
        load = ProducerLoad(cluster3.bootstrap, topic_name, 200, KeyDistribution("uniform", 1), client=client)
        load.start()
        time.sleep(2.0)
        stats = load.stop()
        assert stats.errors == 0, (client, stats.last_error)
        assert stats.sent >= 200 and stats.acked == stats.sent, (client, stats.sent, stats.acked)
        latencies = [lat for lat, _ in stats.recent(60.0)]
        assert len(latencies) == stats.acked and all(0 < lat < 10 for lat in latencies), client
        assert len(stats.acked_by_partition) == 1, (client, stats.acked_by_partition)
        partitions[client] = next(iter(stats.acked_by_partition))
    assert len(set(partitions.values())) == 1, partitions


def test_a_consumer_whose_client_fails_says_why_and_starts_again(cluster3) -> None:
    """A client that raises (here: a topic name Kafka refuses, on the real brokers) does not end
    the load in silence: its error is kept, the client is made again, and stop() still ends it."""
    load = ConsumerLoad(cluster3.bootstrap, "not a topic!", "load-errors").start()
    try:
        deadline = time.monotonic() + 60
        while load.errors < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert load.errors >= 2, "the consumer's failing client was not made again"
        assert load.error is not None and "topic" in load.error.lower(), load.error
        assert not load.assigned.is_set() and load.consumed == 0
    finally:
        load.stop()
    assert load._thread is not None and not load._thread.is_alive()
