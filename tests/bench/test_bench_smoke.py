"""The quick bench smokes (tests/bench/benches.py has the table and what each asserts); the
minutes-long ones have files of their own beside this one, so the suite's workers share them."""

from __future__ import annotations

import pytest

from tests.bench.benches import BENCH, BENCHES, PARTS, bench_tests

pytestmark = pytest.mark.minutes(2)


def test_every_bench_has_a_smoke_run() -> None:
    scripts = {p.name for p in BENCH.glob("*.py") if not p.name.startswith("_")}
    assert scripts == {b.script for b in BENCHES}, "a bench without a smoke run here, or one gone"


def test_every_part_has_its_test_file() -> None:
    here = {p.name for p in BENCH.parent.joinpath("tests", "bench").glob("test_bench_*.py")}
    assert {b.part for b in BENCHES} == set(PARTS), "a bench part that no test file runs"
    assert {f"test_bench_{part}.py" for part in PARTS} <= here


test_bench_without_a_cluster, test_bench_on_the_session_cluster = bench_tests("smoke")
