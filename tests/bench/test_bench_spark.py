"""The Spark benches' smokes (the aggregation, the analyzer's tick, detection delay on a real cluster). The table is tests/bench/benches.py."""

from __future__ import annotations

import pytest

from tests.bench.benches import bench_tests

pytestmark = pytest.mark.minutes(3)

test_bench_without_a_cluster, test_bench_on_the_session_cluster = bench_tests("spark")
