"""The remediation loop's smoke: the whole loop on the session cluster (fault, finding, demotion, recovery, restore). The table is tests/bench/benches.py."""

from __future__ import annotations

import pytest

from tests.bench.benches import bench_tests

pytestmark = pytest.mark.minutes(5)

_, test_bench_on_the_session_cluster = bench_tests("recover")
