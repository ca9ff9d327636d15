"""The retry-log rate limit: the first record of a kind, then one per interval with the count
of those it stood for; nothing dropped uncounted."""

from __future__ import annotations

import logging
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.log_limit import RateLimitFilter


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _record(name: str, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)


DEAD = "Marking the coordinator dead (node %s) for group %s: %s."


def test_a_storm_is_one_line_then_one_summary_per_interval():
    clock = Clock()
    f = RateLimitFilter(10.0, clock)
    passed = []
    for i in range(25_000):  # 2,000 a second for 12.5 s
        clock.now = i / 2000
        r = _record("kafka.coordinator", DEAD, 2, "g", "Node Disconnected")
        if f.filter(r):
            passed.append((clock.now, r.getMessage()))
    assert [t for t, _ in passed] == [0.0, 10.0]
    assert passed[0][1] == "Marking the coordinator dead (node 2) for group g: Node Disconnected."
    assert passed[1][1].endswith("Node Disconnected. [19999 more like this in the last 10 s]")
    assert f.suppressed == 25_000 - 2


@pytest.mark.parametrize(
    ("first", "second", "both_pass"),
    [
        (("kafka.coordinator", DEAD), ("kafka.coordinator", DEAD), False),  # same kind
        (("kafka.coordinator", DEAD), ("kafka.coordinator", "Heartbeat failed: %s"), True),  # other template
        (("kafka.coordinator", DEAD), ("kafka.coordinator.consumer", DEAD), True),  # other logger
    ],
)
def test_kinds_are_logger_and_template(first, second, both_pass):
    f = RateLimitFilter(10.0, Clock())
    assert f.filter(_record(first[0], first[1], 1, "g", "x"))
    assert f.filter(_record(second[0], second[1], 2, "h", "y")) is both_pass


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be > 0, got 0"):
        RateLimitFilter(0)


events = st.lists(st.tuples(st.floats(0, 5, allow_nan=False), st.sampled_from(["a", "b", "c"])), max_size=200)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(events, st.sampled_from([0.5, 1.0, 3.0]))
def test_every_record_is_passed_or_counted_in_a_summary(steps, interval):
    """Any sequence of records: passed + suppressed = all; each kind's summaries add up to what
    was suppressed of it, except those after its last passed record (still in the window); and
    two passed records of a kind are at least an interval apart."""
    clock = Clock()
    f = RateLimitFilter(interval, clock)
    passed: dict[str, list[float]] = {}
    summarised: dict[str, int] = {}
    sent: dict[str, int] = {}
    for dt, kind in steps:
        clock.now += dt
        r = _record("kafka.x", kind)
        sent[kind] = sent.get(kind, 0) + 1
        if f.filter(r):
            passed.setdefault(kind, []).append(clock.now)
            text = r.getMessage()
            if "more like this" in text:
                summarised[kind] = summarised.get(kind, 0) + int(text.split("[")[1].split()[0])
    assert sum(map(len, passed.values())) + f.suppressed == len(steps)
    for kind, times in passed.items():
        assert all(b - a >= interval for a, b in pairwise(times))
        assert summarised.get(kind, 0) <= sent[kind] - len(times)
    assert sum(summarised.values()) <= f.suppressed
