"""The remediation loop's smoke: the whole loop on the session cluster (fault, finding, demotion, recovery, restore). The table is tests/bench/benches.py."""

from __future__ import annotations

import pytest

from testbed.cluster import ClusterState
from tests.bench.benches import Bench, params, run

pytestmark = pytest.mark.minutes(5)


@pytest.mark.parametrize("bench", params("recover", cluster=True))
def test_bench_on_the_session_cluster(bench: Bench, cluster3: ClusterState) -> None:
    run(bench, cluster3)
