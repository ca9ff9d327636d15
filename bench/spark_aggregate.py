"""Aggregation wall time: per-broker sketch merge + quantiles on Spark local[2] vs DuckDB.

Synthetic StageSketch rows (the typed columns ``records_of`` yields) for ``--brokers`` brokers ×
``--minutes`` of ``--window-s`` windows × ``--stages`` stages are written once to Parquet; then
the same aggregation (sum bucket counts per key, cumulative sum, p50/p99/p999, count, mean per
(broker, request, stage, window)) runs on Spark (``spark_metrics.transforms.stage_quantiles``)
and on DuckDB (the same arithmetic in SQL), both reading that Parquet in the same run. The two
results are compared row for row on a sample, and the ratio is printed.

    .venv/bin/python bench/spark_aggregate.py --brokers 2000 --minutes 60
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import duckdb
from pyspark.sql import functions as F

from linkwatch.sketch import _MAPPING
from spark_metrics import transforms as tf
from spark_metrics.session import spark_session

STAGES = ["total", "local", "remote", "requestQueue", "responseQueue", "send", "throttle"]


def generate(spark, path: Path, brokers: int, windows: int, window_s: int, stages: int, width: int) -> int:
    """One sketch per (broker, stage, window): ``width`` log buckets around a broker-dependent
    centre (broker 0 is slow: its centre sits 200 buckets ≈ 7× higher), counts from a hash."""
    t0 = 1_700_000_000_000
    n = brokers * windows * stages
    ids = spark.range(n)
    stage_arr = F.array(*[F.lit(s) for s in STAGES[:stages]])
    df = ids.select(
        (F.col("id") % brokers).alias("broker"),
        F.lit("Produce").alias("request"),
        F.element_at(stage_arr, ((F.col("id") / brokers).cast("long") % stages + 1).cast("int")).alias(
            "stage"
        ),
        (F.lit(t0) + (F.col("id") / (brokers * stages)).cast("long") * window_s * 1000).alias("ts_ms"),
        (F.lit(300) + F.when(F.col("id") % brokers == 0, 200).otherwise(0) + F.col("id") % 7).alias("centre"),
        F.col("id"),
    )
    keys = F.sequence(F.col("centre") - width // 2, F.col("centre") + width // 2 - 1)
    counts = F.transform(keys, lambda k: (F.abs(F.hash(F.col("id"), k)) % 40 + 1).cast("long"))
    sketch = F.struct(
        F.lit(0).cast("long").alias("zero"),
        F.map_from_arrays(F.transform(keys, lambda k: k.cast("string")), counts).alias("buckets"),
        F.aggregate(counts, F.lit(0).cast("long"), lambda a, c: a + c).alias("count"),
        F.lit(1000.0).alias("sum"),
        F.lit(1.0).alias("min"),
        F.lit(900.0).alias("max"),
    )
    df.select("broker", "request", "stage", "ts_ms", sketch.alias("sketch")).write.mode("overwrite").parquet(
        str(path)
    )
    return n


DUCK_SQL = """
WITH base AS (
  SELECT broker, request, stage, (ts_ms // {ms}) * {ms} AS window_start_ms, sketch
  FROM read_parquet('{path}/*.parquet')
),
buckets AS (
  SELECT broker, request, stage, window_start_ms, CAST(e.key AS INTEGER) AS bkey, SUM(e.value) AS n
  FROM (SELECT *, unnest(map_entries(sketch.buckets)) AS e FROM base)
  GROUP BY ALL
),
totals AS (
  SELECT broker, request, stage, window_start_ms, SUM(sketch.zero) AS zero, SUM(sketch.sum) AS sum_ms
  FROM base GROUP BY ALL
),
cum AS (
  SELECT b.*, t.zero, t.sum_ms,
         SUM(n) OVER (PARTITION BY broker, request, stage, window_start_ms ORDER BY bkey) AS cum,
         t.zero + SUM(n) OVER (PARTITION BY broker, request, stage, window_start_ms) AS cnt
  FROM buckets b JOIN totals t USING (broker, request, stage, window_start_ms)
),
picked AS (
  SELECT broker, request, stage, window_start_ms, any_value(cnt) AS count, any_value(zero) AS zero,
         any_value(sum_ms) AS sum_ms,
         MIN(bkey) FILTER (WHERE zero + cum > floor(0.5 * (cnt - 1))) AS k50,
         MIN(bkey) FILTER (WHERE zero + cum > floor(0.99 * (cnt - 1))) AS k99,
         MIN(bkey) FILTER (WHERE zero + cum > floor(0.999 * (cnt - 1))) AS k999
  FROM cum GROUP BY ALL
)
SELECT broker, request, stage, window_start_ms, count,
       pow(2.0, (k50 - {off}) / {mul}) * {f} AS p50_ms,
       pow(2.0, (k99 - {off}) / {mul}) * {f} AS p99_ms,
       pow(2.0, (k999 - {off}) / {mul}) * {f} AS p999_ms,
       sum_ms / count AS mean_ms
FROM picked
"""


def run_duckdb(path: Path, window_s: int, threads: int) -> tuple[float, duckdb.DuckDBPyConnection, int]:
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}")
    sql = DUCK_SQL.format(
        ms=window_s * 1000,
        path=path,
        off=_MAPPING._offset,
        mul=_MAPPING._multiplier,
        f=2.0 / (1 + _MAPPING.gamma),
    )
    started = time.perf_counter()
    con.execute(f"CREATE TABLE result AS {sql}")
    elapsed = time.perf_counter() - started
    rows = con.execute("SELECT count(*) FROM result").fetchone()[0]
    return elapsed, con, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, default=2000)
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--stages", type=int, default=1, help="stages per broker and window (1..7)")
    ap.add_argument("--width", type=int, default=40, help="log buckets per sketch")
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="lw-bench-"))
    data = root / "sketches"
    windows = args.minutes * 60 // args.window_s
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores", flush=True)
    spark = spark_session("local[2]", app_name="linkwatch-bench", shuffle_partitions=8)
    started = time.perf_counter()
    n = generate(spark, data, args.brokers, windows, args.window_s, args.stages, args.width)
    print(
        f"generated {n:,} sketches ({args.brokers} brokers × {windows} windows × {args.stages} stage(s), "
        f"{args.width} buckets each = {n * args.width:,} bucket counts) in {time.perf_counter() - started:.1f}s",
        flush=True,
    )

    started = time.perf_counter()
    result = tf.stage_quantiles(spark.read.parquet(str(data)), args.window_s)
    result.write.mode("overwrite").parquet(str(root / "spark_out"))
    spark_s = time.perf_counter() - started
    spark_rows = spark.read.parquet(str(root / "spark_out")).count()
    print(f"spark local[2]: {spark_s:.1f}s for {spark_rows:,} result rows", flush=True)

    duck_s, con, duck_rows = run_duckdb(data, args.window_s, threads=2)
    print(f"duckdb (2 threads): {duck_s:.1f}s for {duck_rows:,} result rows", flush=True)
    mismatches = con.execute(
        f"""SELECT count(*) FROM result d JOIN read_parquet('{root}/spark_out/*.parquet') s
            USING (broker, request, stage, window_start_ms)
            WHERE d.count <> s.count OR abs(d.p99_ms - s.p99_ms) > 1e-9 * s.p99_ms
               OR abs(d.p50_ms - s.p50_ms) > 1e-9 * s.p50_ms"""
    ).fetchone()[0]
    print(f"rows differing between engines: {mismatches}")
    print(f"ratio spark/duckdb: {spark_s / duck_s:.1f}x")
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    spark.stop()
    if args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
