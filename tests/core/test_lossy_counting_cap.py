"""The hard cap on lossy counting's entries: never exceeded, and the reported error bound still
holds for every tracked key (the uncapped guarantees are tested in tests/analyzer)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from linkwatch.lossy_counting import LossyCounter


@given(stream=st.lists(st.integers(0, 400), max_size=4_000), cap=st.integers(1, 80))
@settings(max_examples=60, deadline=None, derandomize=True)
def test_entries_never_exceed_the_cap_and_the_error_bound_holds(stream: list[int], cap: int) -> None:
    c = LossyCounter(0.05, 0.01, max_entries=cap)
    for x in stream:
        c.add(x)
        assert len(c) <= cap
    exact = Counter(stream)
    for key, est in c.frequent():
        assert est <= exact[key] <= est + c.error_bound()
    # Nothing reaching the support is missed: the bound widens, it is not broken.
    for key, n in exact.items():
        if n - c.error_bound() >= c.support * c.n:
            assert c.estimate(key) >= (c.support - c.epsilon) * c.n


def test_without_the_cap_the_bound_is_epsilon_n() -> None:
    c = LossyCounter(0.05, 0.01)
    c.update(range(5_000))
    assert c.evictions == 0 and c.error_bound() == pytest.approx(0.01 * 5_000)
    assert c.estimate("absent") == 0


def test_a_bad_cap_is_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        LossyCounter(max_entries=0)
