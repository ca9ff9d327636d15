"""The fleet bench's smokes (replayed, and live on the session cluster). The table is tests/bench/benches.py."""

from __future__ import annotations

import pytest

from tests.bench.benches import bench_tests

pytestmark = pytest.mark.minutes(1)

test_bench_without_a_cluster, test_bench_on_the_session_cluster = bench_tests("fleet")
