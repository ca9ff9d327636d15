"""Analyzer evaluation time as the archive grows: incremental window state vs re-reading the archive.

A synthetic archive (``--brokers`` brokers × 3 request types × all 7 stages per ``--window-s``
window, plus 2 topics × 6 partitions × 3 replicas of partition sizes and one log dir per
broker) is written with the archive's own batch writer (``spark_metrics.batch.write_archive``,
one write per minute of samples), first ``--minutes`` minutes and then up to ``--grow-to``.
At each size, with the analyzer's default lookback (18 × 10 s windows), it times:

* ``reread``: ``AnalysisService.tick`` with ``evaluation: reread`` (Spark reads the archive's
  lookback and aggregates it), ``--ticks`` times;
* ``incremental``: the start-up rebuild of the window state from the archive (once), then
  ``AnalysisService.tick`` with ``evaluation: incremental``, ``--ticks`` times;

and checks that both ticks saw the same aggregates (same rows, floats to 1e-9).

    .venv/bin/python bench/analyzer_tick.py --minutes 10 --grow-to 60
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from analyzer.base import InMemorySink
from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from linkwatch import records as R
from linkwatch.sketch import LatencySketch
from spark_metrics.batch import write_archive
from spark_metrics.session import spark_session
from tests.aggregation.window_records import assert_same_aggregates

STAGES = ["total", "local", "remote", "requestQueue", "responseQueue", "send", "throttle"]
REQUESTS = [R.PRODUCE, "FetchConsumer", "FetchFollower"]
T0 = 1_700_000_000_000 // 3_600_000 * 3_600_000  # on an hour boundary


def window_records(w: int, brokers: int, window_s: int, rng: random.Random) -> list[str]:
    ts = T0 + w * window_s * 1000
    out: list[R.Record] = []
    for b in range(1, brokers + 1):
        for req in REQUESTS:
            for stage in STAGES:
                sk = LatencySketch()
                for _ in range(60):
                    sk.add(rng.lognormvariate(1.0, 1.0))
                out.append(
                    R.StageSketch(
                        cluster="bench",
                        source=f"broker-{b}",
                        ts_ms=ts + b,
                        broker=b,
                        request=req,
                        stage=stage,
                        window_s=window_s,
                        sketch=sk.to_dict(),
                    )
                )
        out.append(
            R.LogDirUsage(
                cluster="bench",
                source=f"broker-{b}",
                ts_ms=ts + b,
                broker=b,
                log_dir="/data",
                capacity_bytes=10**12,
                used_bytes=10**9 * b + w * 10**6,
                partition_bytes=0,
                partitions=12,
                io_util=0.1 * b,
            )
        )
        for topic in ("orders", "clicks"):
            for p in range(6):
                out.append(
                    R.PartitionSize(
                        cluster="bench",
                        source=f"broker-{b}",
                        ts_ms=ts + b,
                        broker=b,
                        log_dir="/data",
                        topic=topic,
                        partition=p,
                        size_bytes=(w + 1) * 1000 * (p + 1),
                        segments=1,
                        oldest_segment_ms=T0,
                        newest_segment_ms=ts,
                        log_end_offset=(w + 1) * (p + 1),
                    )
                )
    return [r.to_json().decode() for r in out]


def grow(spark, archive: Path, first_w: int, last_w: int, brokers: int, window_s: int, rng) -> int:
    per_minute = 60 // window_s
    n = 0
    for start in range(first_w, last_w, per_minute):
        values = [
            v
            for w in range(start, min(start + per_minute, last_w))
            for v in window_records(w, brokers, window_s, rng)
        ]
        write_archive(spark, values, archive)
        n += len(values)
    return n


def service(state_dir: Path, evaluation: str, window_s: int, now_ms: int) -> AnalysisService:
    cfg = AnalyzerConfig(
        cluster="bench",
        window_s=window_s,
        state_dir=state_dir,
        evaluation=evaluation,
        publish_findings=False,
        metrics=AnalyzerMetricsConfig(enabled=False),
    )
    return AnalysisService(cfg, sinks=[InMemorySink()], clock=lambda: now_ms / 1000)


def measure(spark, state_dir: Path, minutes: int, window_s: int, ticks: int) -> None:
    now = T0 + minutes * 60_000
    reread = service(state_dir, "reread", window_s, now)
    reread.spark = spark
    times = []
    for _ in range(ticks):
        t = time.perf_counter()
        reread.tick(now)
        times.append(time.perf_counter() - t)
    print(
        f"{minutes:>3} min archive  reread      tick: median {statistics.median(times):.3f}s  (all: {', '.join(f'{x:.3f}' for x in times)})",
        flush=True,
    )
    inc = service(state_dir, "incremental", window_s, now)
    inc.spark = spark
    t = time.perf_counter()
    inc.state = inc.rebuild_state(now)
    rebuild = time.perf_counter() - t
    times = []
    for _ in range(ticks):
        t = time.perf_counter()
        inc.tick(now)
        times.append(time.perf_counter() - t)
    print(
        f"{minutes:>3} min archive  incremental tick: median {statistics.median(times):.4f}s  (all: {', '.join(f'{x:.4f}' for x in times)}); "
        f"start-up rebuild {rebuild:.1f}s, state {inc.state.records:,} records",
        flush=True,
    )
    assert_same_aggregates(inc.last, reread.last)
    print(
        f"{minutes:>3} min archive  same aggregates: {len(inc.last.broker_stages)} stage rows, {len(inc.last.partitions)} partition rows",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--minutes", type=int, default=10)
    ap.add_argument("--grow-to", type=int, default=60)
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--ticks", type=int, default=3)
    ap.add_argument(
        "--smoke", action="store_true", help="a size that runs in seconds (2 brokers, one 1 min archive)"
    )
    args = ap.parse_args()
    if args.smoke:
        # One size: the suite checks that the bench's code runs and the two ticks agree; a second
        # size cost it another Spark read of the archive (10 s of its 45 alone) and measures nothing.
        args.brokers, args.minutes, args.grow_to, args.ticks = 2, 1, 1, 1
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    spark = spark_session("local[2]", app_name="bench-analyzer-tick", shuffle_partitions=2)
    rng = random.Random(1)
    per_min = 60 // args.window_s
    with tempfile.TemporaryDirectory(prefix="lw-tick-") as tmp:
        state_dir = Path(tmp)
        done = 0
        sizes = [args.minutes] if args.grow_to <= args.minutes else [args.minutes, args.grow_to]
        for minutes in sizes:
            t = time.perf_counter()
            n = grow(
                spark,
                state_dir / "archive",
                done * per_min,
                minutes * per_min,
                args.brokers,
                args.window_s,
                rng,
            )
            print(
                f"archive grown to {minutes} min: +{n:,} records in {time.perf_counter() - t:.1f}s",
                flush=True,
            )
            done = minutes
            measure(spark, state_dir, minutes, args.window_s, args.ticks)
    spark.stop()
    print(f"load average at end: {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
