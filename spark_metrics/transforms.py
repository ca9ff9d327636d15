"""Transforms shared by the batch and the streaming paths: DataFrame → DataFrame, thresholds
and window sizes as arguments, no I/O.

Pipeline: raw Kafka-shaped rows (``value`` bytes/string, optional ``timestamp``) →
:func:`with_drop_reason` / :func:`records_of` (typed records of one kind, bad ones dropped) →
:func:`dedup` (on the record ``key``) → aggregates:

* :func:`stage_quantiles` — sketches merged per (broker, request, stage, window) by summing
  counts per log-bucket key, then p50/p99/p999 by a cumulative sum over the keys (the same
  arithmetic as :func:`linkwatch.sketch.quantile_from_buckets`). Percentiles are never averaged.
* :func:`cluster_quantiles` — the same per (request, stage, window) over all brokers.
  These two are the exploding reference: the analyzer's aggregation computes both levels in
  one pass with :func:`spark_metrics.sketch_merge.stage_windows` (equal to 1e-9 relative,
  tested in ``tests/spark_metrics/test_sketch_merge.py``); the probe's sketches still use
  :func:`_quantiles` (a few rows per broker and window).
* :func:`partition_windows`, :func:`logdir_windows` — per topic-partition size and traffic,
  per log dir usage.
* :func:`imbalance` — ``I = max/avg − 1`` of a measure over the members of a group.
* :func:`client_windows` — the agents' slow-request exemplars per client, broker and window.

Skew: sketches are exploded to (…, bucket key, count) and summed with a partial (map-side)
aggregation, so a broker or window carrying most of the samples only adds rows to a
per-key sum bounded by the number of log buckets (a few hundred); the window function that
accumulates counts runs over at most that many rows per group.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from linkwatch import records as R
from linkwatch.aggregates import NONZERO_QUANTILES, QUANTILES
from linkwatch.sketch import _MAPPING
from spark_metrics.schema import record_schema, required_fields

STAGE_DIMS = ["broker", "request", "stage", "window_start_ms"]

# --- parsing and dedup ------------------------------------------------------------------------


def _json(raw: DataFrame) -> DataFrame:
    return raw.select(F.col("value").cast("string").alias("json"))


def with_drop_reason(raw: DataFrame) -> DataFrame:
    """Adds ``kind`` and ``drop_reason`` (null for a usable record) to raw rows.

    Reasons mirror :func:`linkwatch.records.decode`: ``not_json``, ``bad_version``,
    ``future_version``, ``unknown_kind``, ``missing_field`` (absent or wrong type),
    ``bad_value`` (a field outside its ``RANGES``).
    """
    js = _json(raw)
    envelope = F.from_json("json", "v long, kind string")
    js = js.withColumn("env", envelope).withColumn("kind", F.col("env.kind"))
    ok_json = F.get_json_object("json", "$").isNotNull()
    missing, bad = F.lit(False), F.lit(False)
    for kind, cls in R.KINDS.items():
        parsed = F.from_json("json", record_schema(cls))
        absent = F.lit(False)
        for name in required_fields(cls):
            absent = absent | parsed[name].isNull()
        missing = F.when(F.col("kind") == kind, absent).otherwise(missing)
        if cls.RANGES:
            bad = F.when(F.col("kind") == kind, ~_in_ranges(cls, parsed)).otherwise(bad)
    reason = (
        F.when(~ok_json, "not_json")
        .when(~F.col("json").rlike(r"^\s*\{"), "not_object")
        .when(F.col("env.v").isNull() | (F.col("env.v") < 1), "bad_version")
        .when(F.col("env.v") > R.SCHEMA_VERSION, "future_version")
        .when(~F.col("kind").isin(list(R.KINDS)), "unknown_kind")
        .when(missing, "missing_field")
        .when(bad, "bad_value")
    )
    return js.withColumn("drop_reason", reason).drop("env")


def records_of(raw: DataFrame, cls: type[R.Record], cluster: str | None = None) -> DataFrame:
    """Typed records of one kind; malformed ones are dropped (count them with
    :func:`with_drop_reason`). Adds ``event_time`` (timestamp of ``ts_ms``) for watermarks."""
    js = _json(raw).where(F.get_json_object("json", "$.kind") == cls.KIND)
    rec = js.select(F.from_json("json", record_schema(cls)).alias("r")).select("r.*")
    ok = (F.col("v") >= 1) & (F.col("v") <= R.SCHEMA_VERSION)
    for name in required_fields(cls):
        ok = ok & F.col(name).isNotNull()
    if cls.RANGES:
        ok = ok & _in_ranges(cls, F.struct(*(F.col(n) for n in cls.RANGES)))
    if cluster is not None:
        ok = ok & (F.col("cluster") == cluster)
    return rec.where(ok).withColumn("event_time", F.timestamp_millis("ts_ms"))


def _in_ranges(cls: type[R.Record], parsed: Column) -> Column:
    """True where every field of ``cls.RANGES`` in ``parsed`` is absent or in ``(low, high]``
    (as :func:`linkwatch.records.from_dict`; NaN is out: Spark orders it above every number)."""
    ok = F.lit(True)
    for name, (low, high) in cls.RANGES.items():
        v = parsed[name]
        ok = ok & (v.isNull() | ((v > F.lit(low)) & (v <= F.lit(high))))
    return ok


def dedup(records: DataFrame, watermark: str | None = None) -> DataFrame:
    """Drop re-sent records (same ``key``). Streaming: within the watermark on ``event_time``."""
    if watermark is None:
        return records.dropDuplicates(["key"])
    return records.withWatermark("event_time", watermark).dropDuplicatesWithinWatermark(["key"])


def window_start(ts_ms: Column | str, window_s: int) -> Column:
    ms = window_s * 1000
    return (
        (F.floor(F.col(ts_ms) / ms) * ms).cast("long") if isinstance(ts_ms, str) else F.floor(ts_ms / ms) * ms
    )


# --- sketches → quantiles ---------------------------------------------------------------------


def key_to_value(key: Column) -> Column:
    """Spark form of :func:`linkwatch.sketch.key_to_value` (same constants, same arithmetic)."""
    m = _MAPPING
    return F.pow(F.lit(2.0), (key - F.lit(m._offset)) / F.lit(m._multiplier)) * F.lit(2.0 / (1 + m.gamma))


def logged_requests(sketch: str = "sketch", ratio: str = "capture_ratio") -> Column:
    """Spark form of :func:`linkwatch.aggregates.logged_requests` for one StageSketch row: its
    count (zero + bucket counts, null counts adding nothing) times ``capture_ratio`` (1.0 when
    absent), rounded half up."""
    count = F.coalesce(F.col(f"{sketch}.zero"), F.lit(0)) + F.aggregate(
        F.map_values(f"{sketch}.buckets"), F.lit(0).cast("long"), lambda acc, n: acc + F.coalesce(n, F.lit(0))
    )
    return F.floor(count * F.coalesce(F.col(ratio), F.lit(1.0)) + F.lit(0.5)).cast("long")


def sketch_buckets(sketches: DataFrame, window_s: int) -> tuple[DataFrame, DataFrame]:
    """``(buckets, totals)`` per broker/request/stage/window: bucket counts summed per key, and
    the zero count, count, sum and logged requests of the merged sketches."""
    base = sketches.select(
        F.col("broker"),
        F.col("request"),
        F.col("stage"),
        window_start("ts_ms", window_s).alias("window_start_ms"),
        F.col("sketch"),
        logged_requests().alias("logged"),
    )
    buckets = (
        base.select(*STAGE_DIMS, F.explode("sketch.buckets").alias("bkey", "n"))
        .groupBy(*STAGE_DIMS, F.col("bkey").cast("int").alias("bkey"))
        .agg(F.sum("n").alias("n"))
    )
    totals = base.groupBy(*STAGE_DIMS).agg(
        F.sum("sketch.zero").alias("zero"),
        F.sum("sketch.sum").alias("sum_ms"),
        F.sum("logged").alias("logged"),
    )
    return buckets, totals


def _passes(rank: Column):
    # A one-argument lambda: F.filter treats a second parameter as the element index.
    return lambda c: F.col("zero") + c["cum"] > rank


def _quantiles(buckets: DataFrame, totals: DataFrame, dims: list[str]) -> DataFrame:
    upto = Window.partitionBy(*dims).orderBy("bkey").rowsBetween(Window.unboundedPreceding, 0)
    acc = buckets.withColumn("cum", F.sum("n").over(upto))
    per_group = acc.groupBy(*dims).agg(
        F.sum("n").alias("bucket_n"), F.collect_list(F.struct("bkey", "cum")).alias("cum")
    )
    out = totals.join(per_group, dims, "left").withColumn(
        "count", (F.col("zero") + F.coalesce("bucket_n", F.lit(0))).cast("long")
    )
    # ``logged`` rides along where the totals carry it (stage sketches, not the probe's).
    cols = [*dims, "count", *(["logged"] if "logged" in totals.columns else [])]
    for name, q in QUANTILES.items():
        rank = F.floor(F.lit(q) * (F.col("count") - 1))
        # First key whose cumulative count (after the zeros) passes the rank.
        hit = F.filter("cum", _passes(rank))
        key = F.array_min(F.transform(hit, lambda c: c["bkey"]))
        value = (
            F.when(F.col("count") == 0, F.lit(None))
            .when(rank < F.col("zero"), 0.0)
            .otherwise(key_to_value(key))
        )
        cols.append(value.cast("double").alias(name))
    for name, q in NONZERO_QUANTILES.items():
        # The same over the bucket counts alone: rank floor(q · (n − 1)) of the n values above zero.
        above = F.coalesce("bucket_n", F.lit(0))
        rank = F.floor(F.lit(q) * (above - 1))
        hit = F.filter("cum", lambda c: c["cum"] > rank)  # noqa: B023 (used at once)
        key = F.array_min(F.transform(hit, lambda c: c["bkey"]))
        value = F.when((F.col("count").isNull()) | (above <= 0), F.lit(None)).otherwise(key_to_value(key))
        cols.append(value.cast("double").alias(name))
    cols.append(F.when(F.col("count") > 0, F.col("sum_ms") / F.col("count")).alias("mean_ms"))
    return out.select(*cols)


def stage_quantiles(sketches: DataFrame, window_s: int) -> DataFrame:
    """StageSketch records → one row per (broker, request, stage, window) with count,
    p50/p99/p999, the p99 of the values above zero and mean in ms (columns of
    :class:`linkwatch.aggregates.StageWindow`)."""
    buckets, totals = sketch_buckets(sketches, window_s)
    return _quantiles(buckets, totals, STAGE_DIMS)


def cluster_quantiles(sketches: DataFrame, window_s: int) -> DataFrame:
    """The same merged over all brokers per (request, stage, window); ``broker`` is null."""
    buckets, totals = sketch_buckets(sketches, window_s)
    dims = STAGE_DIMS[1:]
    cb = buckets.groupBy(*dims, "bkey").agg(F.sum("n").alias("n"))
    ct = totals.groupBy(*dims).agg(
        F.sum("zero").alias("zero"), F.sum("sum_ms").alias("sum_ms"), F.sum("logged").alias("logged")
    )
    out = _quantiles(cb, ct, dims)
    return out.select(F.lit(None).cast("long").alias("broker"), *out.columns)


def client_windows(slow: DataFrame, window_s: int) -> DataFrame:
    """Slow-request exemplars per (broker, request, client, window): how many, and the largest
    ``send`` and ``throttle`` times among them (the analyzer names a slow client from these).
    A missing client id becomes ``""`` and a missing stage 0, so no exemplar is lost."""
    stage = lambda name: F.coalesce(F.col("stages_ms")[name], F.lit(0.0))  # noqa: E731
    return slow.groupBy(
        "broker",
        "request",
        F.coalesce(F.col("client_id"), F.lit("")).alias("client_id"),
        window_start("ts_ms", window_s).alias("window_start_ms"),
    ).agg(
        F.count(F.lit(1)).alias("count"),
        F.max(stage("send")).alias("send_ms_max"),
        F.max(stage("throttle")).alias("throttle_ms_max"),
    )


# --- partitions, log dirs, imbalance ----------------------------------------------------------


def partition_windows(sizes: DataFrame, window_s: int) -> DataFrame:
    """PartitionSize records → per (topic, partition, window): size (largest replica's last
    reading, i.e. the leader's), bytes/s and messages/s from the change since the previous
    window (null for the first window or when the log shrank by retention)."""
    w = window_start("ts_ms", window_s).alias("window_start_ms")
    per_replica = sizes.groupBy("topic", "partition", "broker", w).agg(
        F.max_by("size_bytes", "ts_ms").alias("size_bytes"),
        F.max_by("log_end_offset", "ts_ms").alias("leo"),
    )
    per_window = per_replica.groupBy("topic", "partition", "window_start_ms").agg(
        F.max("size_bytes").alias("size_bytes"), F.max("leo").alias("leo")
    )
    prev = Window.partitionBy("topic", "partition").orderBy("window_start_ms")
    dt = (F.col("window_start_ms") - F.lag("window_start_ms").over(prev)) / 1000.0

    def rate(col: str) -> Column:
        delta = F.col(col) - F.lag(col).over(prev)
        return F.when(delta >= 0, delta / dt)

    return per_window.select(
        "topic",
        F.col("partition").cast("int").alias("partition"),
        "window_start_ms",
        F.col("size_bytes").cast("long").alias("size_bytes"),
        rate("size_bytes").cast("double").alias("bytes_in_per_s"),
        rate("leo").cast("double").alias("messages_in_per_s"),
    )


def logdir_windows(usage: DataFrame, window_s: int) -> DataFrame:
    """LogDirUsage records → the last reading per (broker, log dir, window) with usage ratio."""
    w = window_start("ts_ms", window_s).alias("window_start_ms")
    last = usage.groupBy("broker", "log_dir", w).agg(
        F.max_by("capacity_bytes", "ts_ms").alias("capacity_bytes"),
        F.max_by("used_bytes", "ts_ms").alias("used_bytes"),
        F.max_by("io_util", "ts_ms").alias("io_util"),
    )
    ratio = F.when(F.col("capacity_bytes") > 0, F.col("used_bytes") / F.col("capacity_bytes")).otherwise(0.0)
    return last.select(
        "broker",
        "log_dir",
        "window_start_ms",
        "capacity_bytes",
        "used_bytes",
        ratio.cast("double").alias("usage_ratio"),
        F.col("io_util").cast("double").alias("io_util"),
    )


def imbalance(
    df: DataFrame, *, scope: str, measure: str, value: str, member: Column, group: Column
) -> DataFrame:
    """``I = max/avg − 1`` of ``value`` over members per (group, window); null values ignored.
    Columns of :class:`linkwatch.aggregates.ImbalanceWindow`."""
    rows = df.where(F.col(value).isNotNull()).select(
        group.alias("group"),
        "window_start_ms",
        member.cast("string").alias("member"),
        F.col(value).alias("x"),
    )
    agg = rows.groupBy("group", "window_start_ms").agg(
        F.count("*").alias("members"),
        F.max("x").cast("double").alias("max_value"),
        F.avg("x").cast("double").alias("avg_value"),
        F.max_by("member", "x").alias("max_member"),
    )
    ratio = F.when(F.col("avg_value") > 0, F.col("max_value") / F.col("avg_value") - 1.0).otherwise(0.0)
    return agg.select(
        F.lit(scope).alias("scope"),
        F.lit(measure).alias("measure"),
        "group",
        "window_start_ms",
        F.col("members").cast("long").alias("members"),
        "max_value",
        "avg_value",
        ratio.alias("ratio"),
        "max_member",
    )


def all_imbalances(partitions: DataFrame, logdirs: DataFrame) -> DataFrame:
    """Topic (per measure), broker (used bytes) and log-dir (used bytes) imbalance."""
    frames = [
        imbalance(
            partitions, scope="topic", measure=m, value=col, member=F.col("partition"), group=F.col("topic")
        )
        for m, col in (
            ("bytes_in", "bytes_in_per_s"),
            ("messages_in", "messages_in_per_s"),
            ("size", "size_bytes"),
        )
    ]
    per_broker = logdirs.groupBy("broker", "window_start_ms").agg(F.sum("used_bytes").alias("used_bytes"))
    frames.append(
        imbalance(
            per_broker,
            scope="broker",
            measure="size",
            value="used_bytes",
            member=F.col("broker"),
            group=F.lit(""),
        )
    )
    frames.append(
        imbalance(
            logdirs,
            scope="log_dir",
            measure="size",
            value="used_bytes",
            member=F.concat_ws(":", "broker", "log_dir"),
            group=F.lit(""),
        )
    )
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


# --- the probe --------------------------------------------------------------------------------

PROBE_DIMS = ["broker", "window_start_ms"]


def _probe_sketch_quantiles(base: DataFrame, column: str) -> DataFrame:
    """p50/p99 of one sketch column of probe samples merged per (broker, window)."""
    buckets = (
        base.select(*PROBE_DIMS, F.explode(f"{column}.buckets").alias("bkey", "n"))
        .groupBy(*PROBE_DIMS, F.col("bkey").cast("int").alias("bkey"))
        .agg(F.sum("n").alias("n"))
    )
    # A sketch that is ``{}`` or absent (commit_latency of a broker coordinating no commit, or of
    # an older writer) parses to nulls: it counts as empty, so its quantiles are null.
    totals = base.groupBy(*PROBE_DIMS).agg(
        F.coalesce(F.sum(f"{column}.zero"), F.lit(0)).alias("zero"),
        F.coalesce(F.sum(f"{column}.sum"), F.lit(0.0)).alias("sum_ms"),
    )
    q = _quantiles(buckets, totals, PROBE_DIMS)
    return q.select(*PROBE_DIMS, *(F.col(n).alias(f"{column}_{n}") for n in ("p50_ms", "p99_ms")))


def probe_windows(samples: DataFrame, window_s: int) -> DataFrame:
    """ProbeSample records → per (leader broker, window): probes sent, ok, decided, availability,
    p50/p99 of produce and end-to-end latency and p99 of the commits this broker coordinated,
    from the merged sketches (columns of :class:`linkwatch.aggregates.ProbeBrokerWindow`).
    Availability is summed counts' ratio, never an average of ratios."""
    base = samples.select(
        "broker",
        window_start("ts_ms", window_s).alias("window_start_ms"),
        "sent",
        "ok",
        F.aggregate(F.map_values("unavailable"), F.lit(0).cast("long"), lambda acc, x: acc + x).alias("bad"),
        "produce",
        "end_to_end",
        "commit_latency",
    )
    counts = base.groupBy(*PROBE_DIMS).agg(
        F.sum("sent").alias("sent"), F.sum("ok").alias("ok"), F.sum("bad").alias("bad")
    )
    decided = F.col("ok") + F.col("bad")
    out = (
        counts.join(_probe_sketch_quantiles(base, "produce"), PROBE_DIMS, "left")
        .join(_probe_sketch_quantiles(base, "end_to_end"), PROBE_DIMS, "left")
        .join(_probe_sketch_quantiles(base, "commit_latency"), PROBE_DIMS, "left")
        .withColumn("decided", decided)
    )
    return out.select(
        F.col("broker").cast("long").alias("broker"),
        "window_start_ms",
        F.col("sent").cast("long").alias("sent"),
        F.col("ok").cast("long").alias("ok"),
        F.col("decided").cast("long").alias("decided"),
        F.when(F.col("decided") > 0, F.col("ok") / F.col("decided")).cast("double").alias("availability"),
        "produce_p50_ms",
        "produce_p99_ms",
        "end_to_end_p50_ms",
        "end_to_end_p99_ms",
        F.col("commit_latency_p99_ms").alias("commit_p99_ms"),
    )
