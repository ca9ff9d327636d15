"""The fleet bench's smokes (replayed, and live on the session cluster). The table is tests/bench/benches.py."""

from __future__ import annotations

import pytest

from testbed.cluster import ClusterState
from tests.bench.benches import Bench, params, run

pytestmark = pytest.mark.minutes(1)


@pytest.mark.parametrize("bench", params("fleet", cluster=False))
def test_bench_without_a_cluster(bench: Bench) -> None:
    run(bench, None)


@pytest.mark.parametrize("bench", params("fleet", cluster=True))
def test_bench_on_the_session_cluster(bench: Bench, cluster3: ClusterState) -> None:
    run(bench, cluster3)
