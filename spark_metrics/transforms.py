"""Transforms shared by the batch and the streaming paths: DataFrame → DataFrame, thresholds
and window sizes as arguments, no I/O.

Pipeline: raw Kafka-shaped rows (``value`` bytes/string, optional ``timestamp``) →
:func:`with_drop_reason` / :func:`records_of` (typed records of one kind, bad ones dropped) →
:func:`dedup` (on the record ``key``) → aggregates:

* sketches (stage timings, the probe's) — :mod:`spark_metrics.sketch_merge`, which merges them
  with the one implementation of the sketch arithmetic (:mod:`aggregation.sketch_math`);
* :func:`client_windows` — the agents' slow-request exemplars per client, broker and window;
* :func:`partition_windows`, :func:`logdir_windows` — per topic-partition size and traffic,
  per log dir usage;
* :func:`imbalance` — ``I = max/avg − 1`` of a measure over the members of a group.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from linkwatch import records as R
from spark_metrics.schema import record_schema, required_fields

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


# --- exemplars -------------------------------------------------------------------------------


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


# --- broker restarts -------------------------------------------------------------------------


def broker_starts(gauges: DataFrame, window_s: int) -> DataFrame:
    """JMX readings (``BrokerGauges``) → per (broker, window) the newest JVM start time read:
    the columns of :class:`linkwatch.aggregates.BrokerStartWindow`. Readings without one (no
    Runtime mbean, an older agent) or with one outside :data:`linkwatch.records.EPOCH_MS_RANGE`
    are left out, as :class:`aggregation.window_state.WindowState` leaves them out."""
    started = F.col("values")[R.BrokerGauges.JVM_START_TIME]
    low, high = R.EPOCH_MS_RANGE
    return (
        gauges.where(started.isNotNull() & ~F.isnan(started) & (started > low) & (started <= high))
        .groupBy("broker", window_start("ts_ms", window_s).alias("window_start_ms"))
        .agg(F.max(started).cast("long").alias("started_ms"))
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
