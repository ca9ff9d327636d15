"""The Spark benches' smokes (the aggregation, the analyzer's tick, detection delay on a real cluster). The table is tests/bench/benches.py."""

from __future__ import annotations

import pytest

from testbed.cluster import ClusterState
from tests.bench.benches import Bench, params, run

pytestmark = pytest.mark.minutes(3)


@pytest.mark.parametrize("bench", params("spark", cluster=False))
def test_bench_without_a_cluster(bench: Bench) -> None:
    run(bench, None)


@pytest.mark.parametrize("bench", params("spark", cluster=True))
def test_bench_on_the_session_cluster(bench: Bench, cluster3: ClusterState) -> None:
    run(bench, cluster3)
