"""tests/scheduling.py: which file a worker takes next, one scenario per row."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scheduling import UNMARKED_CORES, file_marks, next_scope

# name -> (minutes, cores)
MARKS = {
    "stack.py": (5, 1.6),  # a live stack: most of the machine
    "spark.py": (4, 1.6),
    "failover.py": (4, 0.5),  # mostly waits
    "faults.py": (2, 1.0),
    "unit_a.py": (0, UNMARKED_CORES),
    "unit_b.py": (0, UNMARKED_CORES),
    "light.py": (0, 0.3),
}

SCENARIOS = [
    # (queue, running elsewhere, expected, why)
    (["unit_a.py", "spark.py", "stack.py"], [], "stack.py", "nothing else runs: the longest first"),
    (
        ["spark.py", "failover.py", "unit_a.py"],
        ["stack.py"],
        "failover.py",
        "beside a stack, not a second one",
    ),
    (
        ["spark.py", "faults.py", "unit_a.py"],
        ["failover.py"],
        "spark.py",
        "beside a waiting file, the longest",
    ),
    (["spark.py", "unit_a.py"], ["stack.py"], "unit_a.py", "nothing fits: the fewest cores"),
    (["spark.py", "light.py", "unit_a.py"], ["stack.py"], "light.py", "a short light file fits"),
    (["unit_a.py", "light.py"], ["faults.py"], "unit_a.py", "both fit: the busier fills the machine"),
    (["light.py", "unit_a.py"], ["faults.py"], "unit_a.py", "the busier, wherever it is queued"),
    (["unit_a.py", "unit_b.py"], ["faults.py"], "unit_a.py", "equals: collection order"),
    (["spark.py"], ["stack.py"], "spark.py", "the last file is taken even if it does not fit"),
    (["faults.py", "failover.py"], [], "failover.py", "equal? no: 4 minutes before 2"),
]


@pytest.mark.parametrize(("queue", "running", "expected", "why"), SCENARIOS, ids=[s[3] for s in SCENARIOS])
def test_next_scope(queue: list[str], running: list[str], expected: str, why: str) -> None:
    assert next_scope(queue, running, MARKS.__getitem__, cpus=2) == expected, why


def test_more_cores_fit_more_side_by_side() -> None:
    assert next_scope(["spark.py", "failover.py"], ["stack.py"], MARKS.__getitem__, cpus=4) == "spark.py"


def test_marks_are_read_from_the_source(tmp_path: Path) -> None:
    (tmp_path / "t.py").write_text("pytestmark = [pytest.mark.minutes(3), pytest.mark.cores(1.4)]\n")
    (tmp_path / "u.py").write_text("def test(): pass\n")
    assert file_marks(str(tmp_path), "t.py") == (3, 1.4)
    assert file_marks(str(tmp_path), "u.py") == (0, UNMARKED_CORES)
    assert file_marks(str(tmp_path), "gone.py") == (0, UNMARKED_CORES)
