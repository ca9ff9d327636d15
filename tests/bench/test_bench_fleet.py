"""The fleet bench's smokes (replayed, and live on the session cluster). The table is tests/bench/benches.py."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.bench.benches import bench_tests

pytestmark = pytest.mark.minutes(1)

test_bench_without_a_cluster, test_bench_on_the_session_cluster = bench_tests("fleet")


def test_memory_by_fifth_shows_a_plateau_and_a_rise() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import fleet  # a script's module: bench/ on the path, as when it runs

    flat = [(t, 270.0 + (t % 7), 850.0) for t in range(0, 1800, 10)]
    text = fleet.memory_by_fifth(flat)
    assert text.count("min") == 5 and "0-6 min 273/850" in text and "24-30 min" in text
    rising = [(t, 100.0 + t / 10, 600.0 + t / 5) for t in range(0, 1800, 10)]
    fifths = re.findall(r"min (\d+)/(\d+)", fleet.memory_by_fifth(rising))
    assert [int(py) for py, _ in fifths] == sorted(int(py) for py, _ in fifths) and len(set(fifths)) == 5
