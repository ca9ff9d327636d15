"""testbed.recovery's readings of the producers' acks (no cluster: unstarted ProducerLoads whose
real LoadStats hold acks placed at known times)."""

from __future__ import annotations

import time

import pytest

from testbed.load import ProducerLoad
from testbed.recovery import healthy_p99_ms, worst_p99_ms


def _load(topic: str, latencies_ms: list[float], age_s: float = 0.0) -> ProducerLoad:
    load = ProducerLoad("127.0.0.1:1", topic)  # never started: only its stats are read
    at = time.monotonic() - age_s
    for i, ms in enumerate(latencies_ms):
        load.stats.recent_latencies.append((at, ms / 1000, i % 6))
    return load


@pytest.mark.parametrize(
    ("loads", "want"),
    [
        # the worst of the producers' p99s: the slower producer sets it
        ([("a", [10.0] * 100), ("b", [10.0] * 98 + [400.0, 900.0])], 400.0),
        # a producer with fewer than 20 acks in the window says nothing; the other one counts
        ([("a", [50.0] * 100), ("b", [2000.0] * 5)], 50.0),
        # no producer with enough acks: no reading
        ([("a", [50.0] * 19)], None),
    ],
    ids=["the slower producer", "too few acks left out", "none with enough acks"],
)
def test_healthy_level_is_the_worst_producers_p99(loads, want) -> None:
    running = [_load(t, lat) for t, lat in loads]
    got = healthy_p99_ms(lambda: running, 0.6)
    assert (got is None) if want is None else got == pytest.approx(want)
    assert got == worst_p99_ms(running)  # the same reading fault_round makes


def test_healthy_level_is_the_highest_reading_over_the_seconds() -> None:
    """Acks that age out of the 5 s window during the reading: the level is the highest read."""
    old_slow = _load("a", [700.0] * 100, age_s=4.8)  # in the first readings, gone after 0.2 s
    fresh = _load("b", [20.0] * 100)
    assert healthy_p99_ms(lambda: [old_slow, fresh], 1.0) == pytest.approx(700.0)
    assert worst_p99_ms([old_slow, fresh]) == pytest.approx(20.0)  # now only the fresh ones
