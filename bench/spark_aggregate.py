"""Aggregation wall time: sketch merge + quantiles per broker and cluster-wide, three ways.

Synthetic StageSketch rows (the typed columns ``records_of`` yields) for ``--brokers`` brokers ×
``--minutes`` of ``--window-s`` windows × ``--stages`` stages are written once to Parquet per
size; then the same aggregation (bucket counts summed per key, p50/p99/p999, count and mean per
(broker, request, stage, window) and per (request, stage, window) over all brokers — what the
analyzer collects) runs, each engine reading that Parquet, in this order:

* Spark — :func:`spark_metrics.sketch_merge.stage_windows` (the product's: the one
  implementation of the arithmetic, :func:`aggregation.sketch_math.merge`, over Arrow batches);
* DuckDB — the same arithmetic in SQL, 2 threads;
* numpy floor — one process, no engine: pyarrow reads the file (one thread), then
  :func:`spark_metrics.sketch_merge.quantile_table` does the arithmetic.

(The exploding Spark SQL path that ``stage_windows`` replaced was the named baseline of the
figures in ``bench/results/spark.md``; it left the code when the arithmetic got one home.)

Each result is compared with DuckDB's row for row (count, p50/p99/p999 to 1e-9 relative).

    .venv/bin/python bench/spark_aggregate.py --brokers 200 2000 --minutes 60 [--master URL]
    .venv/bin/python bench/spark_aggregate.py --smoke     # seconds: 5 brokers × 2 minutes

``--masters URL URL ...`` compares Spark masters instead (for example ``local[2]`` against a
standalone cluster started with ``linkwatch spark up``): on the same Parquet input, each
master's session runs the Spark path ``--repeat`` times (the first run carries the executors'
start and is reported apart); medians of the rest, and every master's rows compared with
DuckDB's.

    .venv/bin/linkwatch spark up --workers 2 --cores 1
    .venv/bin/python bench/spark_aggregate.py --brokers 200 2000 --masters 'local[2]' spark://127.0.0.1:17070
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from linkwatch import records as R
from linkwatch.sketch import _MAPPING
from spark_metrics.session import spark_session
from spark_metrics.sketch_merge import STAGE_DIMS, quantile_table, stage_windows

STAGES = ["total", "local", "remote", "requestQueue", "responseQueue", "send", "throttle"]
T0 = 1_700_000_000_000
FILES = 8  # Parquet files per input, so every engine can read in parallel

SKETCH_TYPE = pa.struct(
    [
        ("zero", pa.int64()),
        ("buckets", pa.map_(pa.string(), pa.int64())),
        ("count", pa.int64()),
        ("sum", pa.float64()),
        ("min", pa.float64()),
        ("max", pa.float64()),
    ]
)


def record_columns(ids: np.ndarray, window_s: int) -> dict[str, pa.Array]:
    """The StageSketch fields the generator does not vary, at their defaults (a full capture):
    every field of the record is a column, as ``records_of`` yields them, so a field added to
    the record later reaches the input without a change here."""
    import dataclasses

    fixed = {"v": R.SCHEMA_VERSION, "kind": R.StageSketch.KIND, "cluster": "bench", "window_s": window_s}
    n = len(ids)
    out: dict[str, pa.Array] = {}
    for f in dataclasses.fields(R.StageSketch):
        if f.name in ("broker", "request", "stage", "ts_ms", "sketch"):
            continue
        value = fixed.get(f.name, f.default if f.default is not dataclasses.MISSING else f"{f.name}-bench")
        out[f.name] = pa.array([value] * n)
    out["v"], out["kind"] = pa.array([fixed["v"]] * n), pa.array([fixed["kind"]] * n)
    out["key"] = pa.array([f"bench-{i}" for i in ids.tolist()])
    return out


def generate(path: Path, brokers: int, windows: int, window_s: int, stages: int, width: int) -> int:
    """One sketch per (broker, stage, window): ``width`` consecutive log buckets (keys ascending,
    as the agents write them) around a broker-dependent centre (broker 0 is slow: its centre
    sits 200 buckets ≈ 7× higher), counts 1..40 from a seeded generator."""
    rng = np.random.default_rng(17)
    n = brokers * windows * stages
    path.mkdir(parents=True, exist_ok=True)
    for f, ids in enumerate(np.array_split(np.arange(n, dtype=np.int64), FILES)):
        broker = ids % brokers
        stage = (ids // brokers) % stages
        ts = T0 + (ids // (brokers * stages)) * window_s * 1000
        centre = 300 + np.where(broker == 0, 200, 0) + ids % 7
        keys = (centre[:, None] - width // 2 + np.arange(width)[None, :]).ravel()
        counts = rng.integers(1, 41, size=len(ids) * width, dtype=np.int64)
        offsets = pa.array(np.arange(0, len(ids) * width + 1, width, dtype=np.int32))
        buckets = pa.MapArray.from_arrays(offsets, pc.cast(pa.array(keys), pa.string()), pa.array(counts))
        sketch = pa.StructArray.from_arrays(
            [
                pa.array(np.zeros(len(ids), dtype=np.int64)),
                buckets,
                pa.array(counts.reshape(len(ids), width).sum(axis=1)),
                pa.array(np.full(len(ids), 1000.0)),
                pa.array(np.full(len(ids), 1.0)),
                pa.array(np.full(len(ids), 900.0)),
            ],
            fields=list(SKETCH_TYPE),
        )
        table = pa.table(
            {
                "broker": broker,
                "request": pa.array(["Produce"] * len(ids)),
                "stage": pa.array(np.array(STAGES)[stage]),
                "ts_ms": ts,
                "sketch": sketch,
                **record_columns(ids, window_s),
            }
        )
        pq.write_table(table, path / f"part-{f:02d}.parquet")
    return n


# One level of the merge in SQL: {dims} are the group columns (broker omitted for the cluster).
DUCK_LEVEL = """
(WITH b AS (SELECT {dims}, bkey, SUM(n) AS n FROM entries GROUP BY ALL),
 t AS (SELECT {dims}, SUM(zero) AS zero, SUM(sum_ms) AS sum_ms FROM base GROUP BY ALL),
 cum AS (
   SELECT b.*, t.zero, t.sum_ms,
          SUM(n) OVER (PARTITION BY {dims} ORDER BY bkey) AS cum,
          t.zero + SUM(n) OVER (PARTITION BY {dims}) AS cnt
   FROM b JOIN t USING ({dims})),
 picked AS (
   SELECT {dims}, any_value(cnt) AS count, any_value(sum_ms) AS sum_ms,
          MIN(bkey) FILTER (WHERE zero + cum > floor(0.5 * (cnt - 1))) AS k50,
          MIN(bkey) FILTER (WHERE zero + cum > floor(0.99 * (cnt - 1))) AS k99,
          MIN(bkey) FILTER (WHERE zero + cum > floor(0.999 * (cnt - 1))) AS k999
   FROM cum GROUP BY ALL)
 SELECT {broker} AS broker, request, stage, window_start_ms, count,
        pow(2.0, (k50 - {off}) / {mul}) * {f} AS p50_ms,
        pow(2.0, (k99 - {off}) / {mul}) * {f} AS p99_ms,
        pow(2.0, (k999 - {off}) / {mul}) * {f} AS p999_ms,
        sum_ms / count AS mean_ms
 FROM picked)
"""

DUCK_SQL = """
WITH base AS (
  SELECT broker, request, stage, (ts_ms // {ms}) * {ms} AS window_start_ms,
         sketch.zero AS zero, sketch.sum AS sum_ms, sketch.buckets AS buckets
  FROM read_parquet('{path}/*.parquet')
),
entries AS (
  SELECT broker, request, stage, window_start_ms, CAST(e.key AS INTEGER) AS bkey, e.value AS n
  FROM (SELECT *, unnest(map_entries(buckets)) AS e FROM base)
)
{broker_level}
UNION ALL
{cluster_level}
"""


def duck_sql(path: Path, window_s: int) -> str:
    consts = {"off": _MAPPING._offset, "mul": _MAPPING._multiplier, "f": 2.0 / (1 + _MAPPING.gamma)}
    return DUCK_SQL.format(
        ms=window_s * 1000,
        path=path,
        broker_level=DUCK_LEVEL.format(dims=", ".join(STAGE_DIMS), broker="broker", **consts),
        cluster_level=DUCK_LEVEL.format(dims=", ".join(STAGE_DIMS[1:]), broker="NULL::BIGINT", **consts),
    )


def run_duckdb(con: duckdb.DuckDBPyConnection, path: Path, window_s: int) -> float:
    started = time.perf_counter()
    con.execute(f"CREATE OR REPLACE TABLE duck AS {duck_sql(path, window_s)}").fetchall()
    return time.perf_counter() - started


def run_numpy(path: Path, window_s: int) -> tuple[float, float, pa.Table]:
    """(read seconds, arithmetic seconds, result): one process, one thread for the read."""
    started = time.perf_counter()
    raw = pq.read_table(path, use_threads=False)
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    ms = window_s * 1000
    buckets = pc.struct_field(raw.column("sketch"), "buckets").combine_chunks()
    keys, items = buckets.keys, buckets.items  # flat over all maps (the generator writes no nulls)
    offsets = buckets.offsets.to_numpy()
    offsets = pa.array(offsets - offsets[0], pa.int32())
    assert offsets[-1].as_py() == len(keys) == len(items)
    as_list = lambda values: pa.ListArray.from_arrays(offsets, values)  # noqa: E731
    table = pa.table(
        {
            "broker": raw.column("broker"),
            "request": raw.column("request"),
            "stage": raw.column("stage"),
            "window_start_ms": pa.array(raw.column("ts_ms").to_numpy() // ms * ms),
            "zero": pc.struct_field(raw.column("sketch"), "zero"),
            "sum_ms": pc.struct_field(raw.column("sketch"), "sum"),
            "keys": as_list(pc.cast(keys, pa.int32())),
            "counts": as_list(items),
        }
    )
    out = quantile_table(table, [STAGE_DIMS, STAGE_DIMS[1:]], STAGE_DIMS)
    return read_s, time.perf_counter() - started, out


def differing(con: duckdb.DuckDBPyConnection, other: str) -> int:
    """Rows of ``other`` that differ from DuckDB's (or are missing on either side)."""
    keys = " AND ".join(f"d.{k} IS NOT DISTINCT FROM o.{k}" for k in STAGE_DIMS)
    close = " AND ".join(
        f"(d.{q} IS NOT DISTINCT FROM o.{q} OR abs(d.{q} - o.{q}) <= 1e-9 * abs(o.{q}))"
        for q in ("p50_ms", "p99_ms", "p999_ms")
    )
    return con.execute(
        f"""SELECT count(*) FROM duck d FULL OUTER JOIN {other} o ON {keys}
            WHERE d.request IS NULL OR o.request IS NULL OR d.count <> o.count OR NOT ({close})"""
    ).fetchall()[0][0]


def load_line(when: str) -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {when}: {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def bench_size(spark, args: argparse.Namespace, root: Path, brokers: int) -> None:
    data = root / f"sketches-{brokers}"
    windows = args.minutes * 60 // args.window_s
    started = time.perf_counter()
    n = generate(data, brokers, windows, args.window_s, args.stages, args.width)
    print(
        f"\n== {brokers} brokers × {windows} windows × {args.stages} stage(s): {n:,} sketches, "
        f"{args.width} buckets each = {n * args.width:,} bucket counts "
        f"(generated in {time.perf_counter() - started:.1f}s)",
        flush=True,
    )
    con = duckdb.connect()
    con.execute("SET threads = 2").fetchall()
    timings: dict[str, float] = {}
    for name, build in (("spark", lambda df: stage_windows(df, args.window_s)),):
        out = root / f"{name.replace(' ', '_')}-{brokers}"
        started = time.perf_counter()
        build(spark.read.parquet(str(data))).write.mode("overwrite").parquet(str(out))
        timings[name] = time.perf_counter() - started
        con.execute(
            f"CREATE OR REPLACE VIEW {name.replace(' ', '_')} AS SELECT * FROM read_parquet('{out}/*.parquet')"
        ).fetchall()
        print(f"{name} ({args.master}): {timings[name]:.1f}s", flush=True)
    timings["duckdb"] = run_duckdb(con, data, args.window_s)
    rows = con.execute("SELECT count(*) FROM duck").fetchall()[0][0]
    print(f"duckdb (2 threads): {timings['duckdb']:.1f}s for {rows:,} result rows", flush=True)
    read_s, calc_s, floor = run_numpy(data, args.window_s)
    timings["numpy"] = read_s + calc_s
    con.register("numpy_floor", floor)
    print(f"numpy floor (1 process): {timings['numpy']:.1f}s (read {read_s:.1f}s, arithmetic {calc_s:.1f}s)")
    for other in ("spark", "numpy_floor"):
        print(f"rows differing from duckdb: {other} {differing(con, other)}")
    took = timings["spark"]
    print(
        f"spark vs: duckdb {took / timings['duckdb']:.2f}x; numpy floor {took / timings['numpy']:.2f}x",
        flush=True,
    )


def bench_masters(args: argparse.Namespace, root: Path, brokers: int) -> None:
    """The new path on each of ``args.masters``, same input; medians of the warm runs."""
    data = root / f"sketches-{brokers}"
    windows = args.minutes * 60 // args.window_s
    n = generate(data, brokers, windows, args.window_s, args.stages, args.width)
    print(f"\n== {brokers} brokers × {windows} windows: {n:,} sketches × {args.width} buckets", flush=True)
    con = duckdb.connect()
    con.execute("SET threads = 2").fetchall()
    run_duckdb(con, data, args.window_s)
    medians: dict[str, float] = {}
    for i, master in enumerate(args.masters):
        spark = spark_session(
            master,
            app_name="linkwatch-bench",
            shuffle_partitions=args.shuffle_partitions,
            extra={"spark.ui.showConsoleProgress": "false"},
        )
        try:
            out = root / f"master{i}-{brokers}"
            runs = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                stage_windows(spark.read.parquet(str(data)), args.window_s).write.mode("overwrite").parquet(
                    str(out)
                )
                runs.append(time.perf_counter() - started)
        finally:
            spark.stop()
        con.execute(
            f"CREATE OR REPLACE VIEW master{i} AS SELECT * FROM read_parquet('{out}/*.parquet')"
        ).fetchall()
        warm = runs[1:] or runs
        medians[master] = statistics.median(warm)
        print(
            f"spark on {master}: median {medians[master]:.1f}s of {len(warm)} warm runs "
            f"(all: {', '.join(f'{r:.1f}' for r in runs)}; the first carries the executors' start); "
            f"rows differing from duckdb: {differing(con, f'master{i}')}",
            flush=True,
        )
    base = args.masters[0]
    for master in args.masters[1:]:
        print(f"{master} vs {base}: {medians[master] / medians[base]:.2f}x the time", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--brokers", type=int, nargs="+", default=[200, 2000])
    ap.add_argument("--minutes", type=int, default=60)
    ap.add_argument("--window-s", type=int, default=10)
    ap.add_argument("--stages", type=int, default=1, help="stages per broker and window (1..7)")
    ap.add_argument("--width", type=int, default=40, help="log buckets per sketch")
    ap.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    ap.add_argument("--masters", nargs="+", default=None, help="compare these masters (Spark only)")
    ap.add_argument("--repeat", type=int, default=4, help="runs per master with --masters")
    ap.add_argument("--shuffle-partitions", type=int, default=8)
    ap.add_argument("--dir", type=Path, default=None, help="keep inputs and outputs here")
    ap.add_argument("--smoke", action="store_true", help="a size that runs in seconds: 5 brokers × 2 minutes")
    args = ap.parse_args()
    if args.smoke:
        args.brokers, args.minutes, args.shuffle_partitions, args.repeat = [5], 2, 2, 2
    root = args.dir or Path(tempfile.mkdtemp(prefix="lw-bench-"))
    print(load_line("at start"), flush=True)
    if args.masters:
        try:
            for brokers in args.brokers:
                bench_masters(args, root, brokers)
        finally:
            if args.dir is None:
                shutil.rmtree(root, ignore_errors=True)
        print(load_line("at end"))
        return
    spark = spark_session(args.master, app_name="linkwatch-bench", shuffle_partitions=args.shuffle_partitions)
    try:
        for brokers in args.brokers:
            bench_size(spark, args, root, brokers)
    finally:
        spark.stop()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print(load_line("at end"))


if __name__ == "__main__":
    main()
