"""Memory and time of one log-dir scan with many partitions (a synthetic tree shaped like Kafka's).

    .venv/bin/python bench/agent_logdirs.py [--partitions 10000] [--dirs 2]

Builds ``--dirs`` log dirs holding ``--partitions`` partition dirs in total, each with one
segment (``.log``, ``.index``, ``.timeindex``) of a few KB, then runs the agent's
LogDirCollector over it twice: with one PartitionSize record per partition (the default) and
without (``partition_records: false``), against the baseline of an empty collector round.
Prints the Python heap peak (tracemalloc) and the RSS growth of each round.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.health import Health
from agent.logdirs import LogDirCollector


def build(root: Path, partitions: int, dirs: int) -> list[str]:
    out = [root / f"data-{i}" for i in range(dirs)]
    for d in out:
        d.mkdir(parents=True)
    for p in range(partitions):
        part = out[p % dirs] / f"topic-{p // 100}-{p % 100}"
        part.mkdir()
        (part / "00000000000000000000.log").write_bytes(b"x" * (1000 + p % 5000))
        (part / "00000000000000000000.index").write_bytes(b"")
        (part / "00000000000000000000.timeindex").write_bytes(b"")
    return [str(d) for d in out]


def measure(label: str, collector: LogDirCollector) -> None:
    gc.collect()
    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    tracemalloc.start()
    t0 = time.process_time()
    records = collector.collect(int(time.time() * 1000))
    dt = time.process_time() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss1 = proc.memory_info().rss
    print(
        f"  {label:38s} {len(records):6d} records  {dt:6.2f} CPU-s  heap peak {peak / 1e6:6.1f} MB  "
        f"RSS +{(rss1 - rss0) / 1e6:5.1f} MB (now {rss1 / 1e6:.0f} MB)"
    )
    del records


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--dirs", type=int, default=2)
    ap.add_argument("--smoke", action="store_true", help="a size that runs in seconds (200 partitions)")
    args = ap.parse_args()
    if args.smoke:
        args.partitions = 200
    with tempfile.TemporaryDirectory() as tmp:
        dirs = build(Path(tmp), args.partitions, args.dirs)
        empty = Path(tmp) / "empty"
        empty.mkdir()
        print(f"{args.partitions} partitions in {args.dirs} log dirs (pid {os.getpid()})")
        common = {"cluster": "bench", "broker": 1, "health": Health()}
        measure("baseline: empty log dir", LogDirCollector([str(empty)], **common))
        measure("partition records on (default)", LogDirCollector(dirs, **common))
        measure("partition records off", LogDirCollector(dirs, partition_records=False, **common))
        measure("partition records on, 2nd round", LogDirCollector(dirs, **common))


if __name__ == "__main__":
    main()
