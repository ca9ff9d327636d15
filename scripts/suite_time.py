"""Where the test suite's time goes: summarize a ``TEST_CPU_LOG`` log (tests/conftest.py).

    TEST_CPU_LOG=/tmp/suite.jsonl make test
    .venv/bin/python scripts/suite_time.py /tmp/suite.jsonl [--top 25]

Prints the whole run's wall and busy-CPU minutes (summed over tests), then, for a run in
several workers whose lines name them, each worker's tests, its summed wall time and when its
last test ended (seconds after the first test started: the packing, since the run ends with the
last worker), then the test files and the tests that took the most wall time (a fixture's start
is counted in the first test using it), each with its share of the summed time. The busy CPU of
a line is the whole machine's, so in several workers it counts what runs beside the test too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def load(path: Path) -> list[dict]:
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        try:
            row = json.loads(line)
            one = {"test": str(row["test"]), "wall_s": float(row["wall_s"]), "cpu_s": float(row["cpu_s"])}
            if "worker" in row:  # lines from a run in workers (tests/conftest.py)
                one["worker"], one["end_s"] = str(row["worker"]), float(row["end_s"])
            rows.append(one)
        except (ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{path}:{n}: not a test-time line ({e})") from None
    return rows


def workers(rows: list[dict]) -> None:
    """Each worker's tests, summed wall time and last end, after the run's first start."""
    timed = [r for r in rows if "worker" in r]
    if not timed:
        return
    start = min(r["end_s"] - r["wall_s"] for r in timed)
    by_worker: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in timed:
        w = by_worker[r["worker"]]
        w[0] += 1
        w[1] += r["wall_s"]
        w[2] = max(w[2], r["end_s"] - start)
    print(f"\n{'worker':10s} {'tests':>5s} {'wall s':>8s} {'last end s':>10s}")
    for name, (n, w, end) in sorted(by_worker.items()):
        print(f"{name:10s} {n:5d} {w:8.1f} {end:10.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    if not args.log.is_file():
        raise SystemExit(f"no such file: {args.log}")
    rows = load(args.log)
    wall = sum(r["wall_s"] for r in rows)
    cpu = sum(r["cpu_s"] for r in rows)
    print(f"{len(rows)} tests: {wall / 60:.1f} wall minutes, {cpu / 60:.1f} busy-CPU minutes")
    workers(rows)
    by_file: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for r in rows:
        f = by_file[r["test"].split("::")[0]]
        f[0] += 1
        f[1] += r["wall_s"]
        f[2] += r["cpu_s"]
    print(f"\n{'file':64s} {'tests':>5s} {'wall s':>8s} {'cpu s':>8s} {'share':>6s}")
    for name, (n, w, c) in sorted(by_file.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{name:64s} {n:5d} {w:8.1f} {c:8.1f} {w / wall:6.1%}")
    print(f"\n{'test':100s} {'wall s':>8s} {'cpu s':>8s}")
    for r in sorted(rows, key=lambda r: -r["wall_s"])[: args.top]:
        print(f"{r['test'][:100]:100s} {r['wall_s']:8.1f} {r['cpu_s']:8.1f}")


if __name__ == "__main__":
    sys.exit(main())
