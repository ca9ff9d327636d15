"""Which test file a worker takes next (``make test``'s workers, ``--dist loadfile``).

Two marks a file may carry, read from its source by the controller (which collects nothing):

* ``minutes(n)``: the file takes about n minutes. Long files go first, so the short ones fill in
  around them and the workers finish together (collected last, a long file would run alone).
* ``cores(x)``: the cores the file keeps busy on average, brokers and Spark included (its busy
  CPU seconds over its wall seconds in a one-process run, ``scripts/suite_time.py``). An unmarked
  file counts as one core: the test process.

Rule: the next file is one that fits beside what the other workers are running (its cores plus
theirs within the machine's, with a little slack), the longest of those first and of equally long
ones the busiest (it fills the machine now, and leaves the light ones for beside a heavy file);
when none fits, the one needing the fewest cores. Why: two files that each keep most of the
machine busy (a live stack, a Spark cluster) run side by side at half speed, and a test that
waits for a condition on such a stack keeps the stack burning CPU while it waits; one run
measured the two heaviest files at 212 and 203 s side by side against 97 and 87 s alone. Beside a file that mostly waits
(a failover, a rebalance), the same file runs at nearly its own speed. The files that mostly
wait are the timing-sensitive ones (deadlines on real brokers): beside a heavy file they lose a
race now and then, and get their one rerun (tests/conftest.py), as they do beside any load.
Keeping them away from heavy files was tried in a model of one run's file times: the heavy
files then pile up at the end, side by side, and the gain is gone.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from pathlib import Path

MINUTES = re.compile(r"pytest\.mark\.minutes\((\d+)\)")
CORES = re.compile(r"pytest\.mark\.cores\(([\d.]+)\)")
UNMARKED_CORES = 1.0
#: How far past the machine's cores a pair may go and still count as fitting: the marks are
#: averages, and a pair just over the line still beats the next heavier file.
SLACK_CORES = 0.25


@functools.cache
def file_marks(rootdir: str, scope: str) -> tuple[int, float]:
    """``(minutes, cores)`` of a test file from its source; ``(0, UNMARKED_CORES)`` unmarked."""
    try:
        text = (Path(rootdir) / scope).read_text()
    except OSError:
        return 0, UNMARKED_CORES
    minutes, cores = MINUTES.search(text), CORES.search(text)
    return (int(minutes[1]) if minutes else 0), (float(cores[1]) if cores else UNMARKED_CORES)


def next_scope(
    queue: Iterable[str],
    running_elsewhere: Iterable[str],
    marks: Callable[[str], tuple[int, float]],
    cpus: int,
) -> str:
    """The file of ``queue`` to hand out next, beside the files ``running_elsewhere``;
    ``marks(file)`` is its ``(minutes, cores)``. Ties keep the queue's order (collection order)."""
    spare = cpus + SLACK_CORES - sum(marks(s)[1] for s in running_elsewhere)

    def rank(scope: str) -> tuple:
        minutes, cores = marks(scope)
        return (True, minutes, cores) if cores <= spare else (False, -cores, minutes)

    return max(queue, key=rank)  # max() keeps the first of equals
