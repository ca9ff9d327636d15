"""Windowed hot-key tracking against exact counts: no cold key is ever called hot, a key hot over
a whole window is, and a key that cools is cold again within two windows."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from producer.hot_keys import HotKeyTracker

W, S, E = 400, 0.05, 0.005


@given(stream=st.lists(st.integers(0, 40), min_size=1, max_size=3_000))
@settings(max_examples=60, deadline=None, derandomize=True)
def test_hot_only_when_exact_counts_say_so(stream: list[int]) -> None:
    t = HotKeyTracker(S, E, window_records=W)
    last: Counter[int] = Counter()
    running: Counter[int] = Counter()
    for x in stream:
        running[x] += 1
        hot = t.observe(x)
        n = sum(running.values())
        if hot:  # counts are never overestimated, so a hot key really is frequent somewhere
            assert last[x] >= (S - E) * W or (n >= t.warmup_records and running[x] >= S * n)
        if n == W:
            # Uncapped (40 keys): lossy counting reports every key at ≥ s·W of the window.
            assert {k for k, c in running.items() if c >= S * W} <= set(t.hot_keys())
            last, running = running, Counter()


def test_a_key_that_cools_is_cold_after_two_windows() -> None:
    t = HotKeyTracker(S, E, window_records=W)
    for i in range(W):
        t.observe("hot" if i % 3 == 0 else f"c{i}")
    assert t.is_hot("hot")
    for i in range(2 * W):
        t.observe(f"other{i}")
    assert not t.is_hot("hot") and "hot" not in t.hot_keys()


def test_nothing_is_hot_before_the_warmup() -> None:
    t = HotKeyTracker(S, E, window_records=W)
    assert [t.observe("same") for _ in range(t.warmup_records - 1)] == [False] * (t.warmup_records - 1)
    assert t.observe("same")
