"""The one aggregation on the recorded cases: the Spark path and the incremental window state
give, row for row, the aggregates pinned in ``fixtures/captured_aggregates.json`` — the rows the
three implementations of the arithmetic agreed on before it had one home (see
:mod:`tests.aggregation.captured`). One table row per case."""

from __future__ import annotations

import pytest

from aggregation.window_state import WindowState
from linkwatch.aggregates import Aggregates
from tests.aggregation.captured import (
    CASES,
    as_aggregates,
    case_rows,
    load_golden,
    placed,
    spark_rows,
)
from tests.aggregation.window_records import CLUSTER, ROW_SETS, assert_same_aggregates

# Floats equal to this (relative): the sums behind a mean are added in the order the rows come,
# which Spark's shuffle does not fix; every other value is computed by the same expressions.
REL = 1e-12


@pytest.fixture(scope="module")
def golden() -> dict[str, dict[str, list[dict]]]:
    return load_golden()


@pytest.fixture(scope="module")
def spark_path(spark) -> dict[str, dict[str, list[dict]]]:
    """Every case through the Spark path: one job per window size."""
    out: dict[str, dict[str, list[dict]]] = {}
    for window_s in sorted({c.window_s for c in CASES.values()}):
        out |= spark_rows(spark, window_s, {n: c for n, c in CASES.items() if c.window_s == window_s})
    return out


def incremental(case: str) -> Aggregates:
    recs, base = placed(CASES[case].records(), 0, CASES[case].window_s)
    state = WindowState(CLUSTER, CASES[case].window_s, horizon_ms=10**12)
    state.add(recs)
    return as_aggregates(case_rows(state.aggregates(), base), CASES[case].window_s)


def test_the_pinned_cases_are_the_shapes_they_claim(golden) -> None:
    """No case is vacuous: the captures give many stage rows, cluster rows merge several
    brokers, the sampled case logs fewer requests than it counts, every row set is filled."""
    assert list(golden) == list(CASES)
    for case in CASES:
        if not case.startswith("scenario"):
            assert len(golden[case]["broker_stages"]) > 100, case
    sampled = golden["kafka-request.log as three brokers, two sampled 1 in 6 and 1 in 3"]
    assert any(r["logged"] < r["count"] for r in sampled["cluster_stages"])
    three = {r["broker"] for r in sampled["broker_stages"]}
    assert three == {1, 2, 3}
    for name in ROW_SETS:
        assert any(sets[name] for sets in golden.values()), name


@pytest.mark.parametrize("case", list(CASES))
def test_the_spark_path_gives_the_pinned_rows(spark_path, golden, case: str) -> None:
    w = CASES[case].window_s
    assert_same_aggregates(as_aggregates(spark_path[case], w), as_aggregates(golden[case], w), rel=REL)


@pytest.mark.parametrize("case", list(CASES))
def test_the_incremental_state_gives_the_pinned_rows(golden, case: str) -> None:
    w = CASES[case].window_s
    assert_same_aggregates(incremental(case), as_aggregates(golden[case], w), rel=REL)
