"""Partial aggregates per partition, merged per key: the merged result equals the aggregate of
the whole stream whatever the split, the order, or how partitions move between consumers."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from consumer.split_keys import PartialAggregates, counting, merge_partials

records = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 8), st.integers(-50, 50)), max_size=400)
FAST = settings(max_examples=80, deadline=None, derandomize=True)


@given(stream=records)
@FAST
def test_merged_counts_equal_counts_of_the_whole_stream(stream: list[tuple[int, int, int]]) -> None:
    agg = counting()
    for p, k, _v in stream:
        agg.add(p, k, None)
    assert agg.merged_all() == dict(Counter(k for _p, k, _v in stream))
    assert agg.entries() == len({(p, k) for p, k, _v in stream})


@given(stream=records, owner=st.lists(st.integers(0, 2), min_size=6, max_size=6))
@FAST
def test_partitions_spread_over_consumers_merge_to_the_same_result(
    stream: list[tuple[int, int, int]], owner: list[int]
) -> None:
    # Three consumers of a group, each holding some partitions; the merge step downstream.
    def summing() -> PartialAggregates:
        return PartialAggregates(int, lambda a, v: a + v, lambda a, b: a + b)

    consumers = [summing() for _ in range(3)]
    for p, k, v in stream:
        consumers[owner[p]].add(p, k, v)
    expected: Counter[int] = Counter()
    for _p, k, v in stream:
        expected[k] += v
    merged = merge_partials(lambda a, b: a + b, (c.merged_all() for c in consumers))
    assert merged == {k: s for k, s in expected.items() if k in merged}
    assert set(merged) == {k for _p, k, _v in stream}


@given(stream=records, cut=st.integers(0, 400))
@FAST
def test_a_revoked_partition_resumes_elsewhere_from_its_partials(
    stream: list[tuple[int, int, int]], cut: int
) -> None:
    a, b = counting(), counting()
    for p, k, _v in stream[:cut]:
        a.add(p, k, None)
    stored = {p: a.revoke(p) for p in a.partitions()}  # rebalance: everything moves to b
    assert a.entries() == 0
    for p, partials in stored.items():
        b.restore(p, partials)
    for p, k, _v in stream[cut:]:
        b.add(p, k, None)
    assert b.merged_all() == dict(Counter(k for _p, k, _v in stream))


def test_one_key_over_several_partitions() -> None:
    agg = PartialAggregates(
        lambda: (0, 0), lambda a, v: (a[0] + v, a[1] + 1), lambda a, b: (a[0] + b[0], a[1] + b[1])
    )
    for p, v in [(0, 5), (3, 7), (0, 1), (7, 2)]:
        agg.add(p, "hot", v)
    assert agg.merged("hot") == (15, 4)
    assert agg.partials(0) == {"hot": (6, 2)}
    assert agg.merged("absent") == (0, 0)
    assert agg.entries() == 3
