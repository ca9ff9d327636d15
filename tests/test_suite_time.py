"""``scripts/suite_time.py``: the suite's time per file and per test, from the conftest's log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/suite_time.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_files_and_tests_are_ranked_by_wall_time(tmp_path: Path) -> None:
    log = tmp_path / "suite.jsonl"
    rows = [("tests/a.py::t1", 3.0, 4.0), ("tests/a.py::t2", 1.0, 1.0), ("tests/b.py::t", 6.0, 2.0)]
    log.write_text("".join(json.dumps({"test": t, "wall_s": w, "cpu_s": c}) + "\n" for t, w, c in rows))
    out = _run(str(log)).stdout.splitlines()
    assert out[0] == "3 tests: 0.2 wall minutes, 0.1 busy-CPU minutes"
    files = [line.split() for line in out if line.startswith("tests/") and "::" not in line]
    assert files == [["tests/b.py", "1", "6.0", "2.0", "60.0%"], ["tests/a.py", "2", "4.0", "5.0", "40.0%"]]
    tests = [line.split()[0] for line in out if "::" in line]
    assert tests == ["tests/b.py::t", "tests/a.py::t1", "tests/a.py::t2"]


def test_a_run_in_workers_shows_each_workers_tests_and_last_end(tmp_path: Path) -> None:
    log = tmp_path / "suite.jsonl"
    rows = [  # (test, wall, cpu, worker, end): gw1 starts at 100.0, gw0 ends last at 112.0
        ("tests/a.py::t1", 2.0, 1.0, "gw0", 103.0),
        ("tests/a.py::t2", 9.0, 1.0, "gw0", 112.0),
        ("tests/b.py::t", 4.0, 1.0, "gw1", 104.0),
    ]
    log.write_text(
        "".join(
            json.dumps({"test": t, "wall_s": w, "cpu_s": c, "worker": k, "end_s": e}) + "\n"
            for t, w, c, k, e in rows
        )
    )
    out = _run(str(log)).stdout.splitlines()
    table = [line.split() for line in out if line.startswith("gw")]
    assert table == [["gw0", "2", "11.0", "12.0"], ["gw1", "1", "4.0", "4.0"]]
    # Lines without workers (a run in one process) print no worker table.
    log.write_text(json.dumps({"test": "tests/a.py::t", "wall_s": 1, "cpu_s": 1}) + "\n")
    assert not [line for line in _run(str(log)).stdout.splitlines() if line.startswith("worker")]


def test_a_bad_line_or_path_is_one_line_naming_it(tmp_path: Path) -> None:
    log = tmp_path / "suite.jsonl"
    log.write_text('{"test": "tests/a.py::t", "wall_s": 1, "cpu_s": 1}\nnot json\n')
    bad = _run(str(log))
    assert bad.returncode == 1 and bad.stderr.startswith(f"{log}:2: not a test-time line")
    missing = _run(str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 1 and missing.stderr.strip() == f"no such file: {tmp_path / 'nope.jsonl'}"


def test_a_package_with_its_own_cluster_is_one_work_unit_and_its_marks_add_up() -> None:
    """Workers are handed a package of tests/conftest.py's PACKAGE_UNITS whole (its package-scoped
    cluster starts once), any other test's file alone; the unit is first in line by the sum of
    its files' `minutes(n)` marks."""
    from tests.conftest import PACKAGE_UNITS, _file_minutes, _work_unit

    root = str(Path(__file__).resolve().parents[1])
    assert "tests/remediation/" in PACKAGE_UNITS
    assert _work_unit("tests/remediation/test_actions_cluster.py::test_x[a]") == "tests/remediation/"
    assert _work_unit("tests/remediation/test_intake.py::test_y") == "tests/remediation/"
    assert _work_unit("tests/lag/test_lag_rack.py::test_z") == "tests/lag/test_lag_rack.py"
    each = [
        _file_minutes(root, str(f.relative_to(root)))
        for f in (Path(root) / "tests/remediation").glob("test_*.py")
    ]
    assert _file_minutes(root, "tests/remediation/") == sum(each) > max(each)


def test_the_files_of_the_in_process_spark_driver_are_one_work_unit() -> None:
    """The files that start (or get back) a Spark driver in the worker's process go to one worker
    together, under the name of the unit's first member, and its marks are theirs summed."""
    from tests.conftest import SPARK_DRIVER_UNIT, _file_minutes, _work_unit

    root = Path(__file__).resolve().parents[1]
    name = SPARK_DRIVER_UNIT[0]
    assert _work_unit("tests/spark_metrics/test_transforms.py::test_x") == name
    assert _work_unit("tests/aggregation/test_window_state_spark.py::test_y[a]") == name
    assert _work_unit("tests/analyzer/test_stream_restart.py::test_z") == name
    assert (
        _work_unit("tests/aggregation/test_window_state.py::test_w")
        == "tests/aggregation/test_window_state.py"
    )
    for member in SPARK_DRIVER_UNIT:
        assert (root / member).exists(), member
    marked = _file_minutes(str(root), "tests/aggregation/test_window_state_spark.py")
    assert marked > 0
    assert _file_minutes(str(root), name) >= marked
