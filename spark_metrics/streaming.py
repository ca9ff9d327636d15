"""Streaming path: ``linkwatch.samples`` (Kafka) → checks → dedup → Parquet archive, checkpointed.

Every record read is checked first (:func:`classify`): a record that is not a usable envelope
(a tombstone, empty, larger than ``max_record_bytes``, not JSON, not an object, a wrong or
future ``v``, an unknown ``kind``, no ``key``, no integer ``ts_ms``) or whose event time lies
outside ``[processing time − max_event_age, processing time + max_event_lead]`` is dropped
there, *before* the watermark, the dedup state or the analyzer's window state sees it, and
counted by reason (:class:`StreamDrops`, from the archive query's observed metrics). The
bound is what keeps one producer from stopping the stream for everyone: Spark's watermark is
the largest event time seen minus the delay, kept in the checkpoint across restarts, and one
record stamped in 2099 would make every later record "late" for ever.

The stream keeps the raw record JSON plus the envelope columns (``kind``, ``key``, ``ts_ms``,
``hour``) and drops re-sent records by ``key`` within the watermark (rows older than the
watermark are dropped by Spark and counted as ``late``). The Parquet file sink with a
checkpoint is exactly-once, so a restart resumes from the committed offsets without writing a
batch twice; re-sends that arrive after the watermark are removed again when the archive is
read (:func:`spark_metrics.batch.read_archive` deduplicates by ``key``). The analysis keeps its
windows in memory fed by :func:`start_window_stream` (``evaluation: incremental``, the default;
:mod:`aggregation.window_state`), or reads the archive with the same transforms as the batch path
(``evaluation: reread``).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from linkwatch import records as R
from linkwatch.kafka_client import KafkaClientConfig, spark_kafka_options
from linkwatch.records import SAMPLES_TOPIC

log = logging.getLogger(__name__)

ARCHIVE_QUERY = "linkwatch-samples-archive"
WINDOW_QUERY = "linkwatch-samples-windows"
# The name of the archive query's observed metrics (one count per reason and micro-batch).
DROPS_OBSERVATION = "linkwatch.stream-drops"  # a Spark observation's name, not a metric
# Why :func:`classify` discards a record, in the order it checks (the first that holds is the
# reason); the labels of ``linkwatch_analyzer_stream_dropped_total``. Names shared with
# :func:`linkwatch.records.decode` mean the same thing.
DROP_REASONS: tuple[str, ...] = (
    "tombstone",  # the Kafka value is null (a delete marker for the key)
    "empty",  # zero bytes, or only whitespace
    "oversize",  # more than max_record_bytes (never parsed)
    "not_json",
    "not_object",  # JSON, but an array, a string, a number or null
    "bad_version",  # "v" missing, not an integer, or < 1
    "future_version",  # "v" above the schema version this reader knows
    "unknown_kind",  # "kind" missing or not a kind of linkwatch.records
    "missing_field",  # no "key" or no "ts_ms"
    "bad_type",  # "ts_ms" not an integer
    "too_old",  # event time before processing time − max_event_age
    "too_new",  # event time after processing time + max_event_lead
)
# Rows older than the watermark, dropped by Spark's dedup (its numRowsDroppedByWatermark).
LATE = "late"

MIB = 1 << 20


@dataclass(frozen=True)
class EventTimeBounds:
    """Event times accepted around the processing time (the micro-batch's timestamp), in ms."""

    max_age_ms: int = 86_400_000
    max_lead_ms: int = 30_000


@dataclass(frozen=True)
class StreamOptions:
    kafka: KafkaClientConfig | str  # the cluster holding ``topic``
    archive_dir: Path
    checkpoint_dir: Path
    topic: str = SAMPLES_TOPIC
    watermark: str = "2 minutes"
    trigger_s: float = 2.0
    max_offsets_per_trigger: int = 200_000
    starting_offsets: str = "earliest"  # only on the first start; the checkpoint wins afterwards
    bounds: EventTimeBounds = EventTimeBounds()
    max_record_bytes: int = MIB


_INTEGER = r"^-?[0-9]{1,19}$"


def classify(raw: DataFrame, bounds: EventTimeBounds | None = None, max_record_bytes: int = MIB) -> DataFrame:
    """Kafka-shaped rows (``value`` binary or string, null for a tombstone) → ``value`` (the
    JSON text), ``kind``, ``key``, ``ts_ms`` and ``drop_reason`` (one of :data:`DROP_REASONS`,
    null for a record to keep).

    Parses each record once (``json_tuple``) and never a value over ``max_record_bytes``; no
    expression here can fail on any input (Spark 4 runs in ANSI mode, where a plain cast of a
    bad string raises and would stop the query), so no record can stop the stream. ``bounds``
    None: no event-time check around now (batch reads over a chosen range), only that the time is
    one at all (from 1970 to the year 9999)."""
    size = F.octet_length("value")
    text = F.col("value").cast("string")
    small = F.when(size <= max_record_bytes, text)  # null for oversize: never parsed
    fields = raw.select(
        F.col("value").isNull().alias("_tombstone"),
        size.alias("_size"),
        small.alias("value"),
        F.json_tuple(small, "v", "kind", "key", "ts_ms").alias("_v", "kind", "key", "_ts"),
    )
    v = F.when(F.col("_v").rlike(_INTEGER), F.col("_v")).try_cast("long")
    ts_ms = F.when(F.col("_ts").rlike(_INTEGER), F.col("_ts")).try_cast("long")
    # Java regex \s: space, tab, newline, vertical tab, form feed, carriage return (F.trim takes
    # spaces only).
    blank = F.col("value").rlike(r"^\s*$")
    json_null = F.col("value").rlike(r"^\s*null\s*$")
    reason = (
        F.when(F.col("_tombstone"), "tombstone")
        .when((F.col("_size") == 0) | blank, "empty")
        .when(F.col("value").isNull(), "oversize")
        .when(F.get_json_object("value", "$").isNull() & ~json_null, "not_json")
        .when(~F.col("value").rlike(r"^\s*\{"), "not_object")
        .when(v.isNull() | (v < 1), "bad_version")
        .when(v > R.SCHEMA_VERSION, "future_version")
        .when(F.col("kind").isNull() | ~F.col("kind").isin(list(R.KINDS)), "unknown_kind")
        .when(F.col("key").isNull() | F.col("_ts").isNull(), "missing_field")
        .when(ts_ms.isNull(), "bad_type")
        # Outside what a timestamp holds at all (Spark's end at year 294247 raises in ANSI mode).
        .when(ts_ms < 0, "too_old")
        .when(ts_ms > F.lit(R.MAX_TS_MS), "too_new")
    )
    if bounds is not None:
        now_ms = F.unix_millis(F.current_timestamp())  # the micro-batch's time in a stream
        reason = reason.when(ts_ms < now_ms - F.lit(bounds.max_age_ms), "too_old").when(
            ts_ms > now_ms + F.lit(bounds.max_lead_ms), "too_new"
        )
    return fields.select("value", "kind", "key", ts_ms.alias("ts_ms"), reason.alias("drop_reason"))


def _kept(classified: DataFrame) -> DataFrame:
    """The usable rows of :func:`classify` with the columns for the watermark and the archive's
    partitioning; ``event_time`` is computed only for rows whose ``ts_ms`` passed the checks."""
    ok = classified.where(F.col("drop_reason").isNull()).drop("drop_reason")
    return ok.withColumn("event_time", F.timestamp_millis("ts_ms")).withColumn(
        "hour", F.floor(F.col("ts_ms") / 3_600_000).cast("long")
    )


def envelope(raw: DataFrame) -> DataFrame:
    """Raw Kafka rows → ``value`` (JSON string) + envelope columns for dedup and pruning, for
    batch reads and writes: the usable rows of :func:`classify` (no event-time bound)."""
    return _kept(classify(raw))


def observe_drops(classified: DataFrame) -> DataFrame:
    """``classified`` with one count per drop reason observed per micro-batch (read back by
    :class:`StreamDrops` from the query's progress)."""
    counts: list[Column] = [F.count_if(F.col("drop_reason") == r).alias(r) for r in DROP_REASONS]
    return classified.observe(DROPS_OBSERVATION, *counts)


class StreamDrops:
    """What the archive query discarded, by reason (:data:`DROP_REASONS` and :data:`LATE`).

    Fed one ``StreamingQueryProgress`` at a time (:meth:`add_progress`, from a
    :class:`StreamDropsListener`); each batch id is counted once, so a progress seen twice
    never counts twice. A batch Spark runs again after a failure in a later process is counted
    again there (the counter starts at zero with the process, as counters do). Thread-safe."""

    def __init__(self, query_name: str = ARCHIVE_QUERY) -> None:
        self.query_name = query_name
        self._counts: Counter[str] = Counter(dict.fromkeys((*DROP_REASONS, LATE), 0))
        self._batches: set[tuple[str, int]] = set()
        self._lock = threading.Lock()

    def add_progress(self, progress: Any) -> None:
        if progress.name != self.query_name:
            return
        with self._lock:
            batch = (str(progress.id), int(progress.batchId))
            if batch in self._batches:
                return
            self._batches.add(batch)
            if len(self._batches) > 10_000:  # batch ids only grow: keep the recent ones
                self._batches = set(sorted(self._batches, key=lambda b: b[1])[-1000:])
            observed = progress.observedMetrics.get(DROPS_OBSERVATION)
            if observed is not None:
                for reason, n in observed.asDict().items():
                    self._counts[reason] += int(n or 0)
            self._counts[LATE] += sum(int(op.numRowsDroppedByWatermark) for op in progress.stateOperators)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class StreamDropsListener(StreamingQueryListener):
    """Hands every progress of the session's queries to a :class:`StreamDrops` (which keeps
    its own query's). Errors are logged, never raised into Spark's listener bus."""

    def __init__(self, drops: StreamDrops) -> None:
        self.drops = drops

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        try:
            self.drops.add_progress(event.progress)
        except Exception:
            log.exception("counting the stream's dropped records failed")

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        pass


def kafka_source(spark: SparkSession, opts: StreamOptions) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(opts.kafka))
        .option("subscribe", opts.topic)
        .option("startingOffsets", opts.starting_offsets)
        .option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
        .option("failOnDataLoss", "false")
        .load()
    )


def start_archive_stream(spark: SparkSession, opts: StreamOptions) -> StreamingQuery:
    """Start the stream; returns the running query (stop it with ``query.stop()``). What it
    discards is counted in its observed metrics (:class:`StreamDrops` reads them)."""
    checked = observe_drops(classify(kafka_source(spark, opts), opts.bounds, opts.max_record_bytes))
    rows = _kept(checked)
    deduped = rows.withWatermark("event_time", opts.watermark).dropDuplicatesWithinWatermark(["key"])
    return (
        # One writer task per micro-batch: one file per (kind, hour) and batch, not one per
        # shuffle partition (the samples are small; files and tasks are what cost).
        deduped.drop("event_time")
        .coalesce(1)
        .writeStream.format("parquet")
        .option("path", str(opts.archive_dir))
        .option("checkpointLocation", str(opts.checkpoint_dir))
        .partitionBy("kind", "hour")
        .trigger(processingTime=f"{opts.trigger_s} seconds")
        .queryName(ARCHIVE_QUERY)
        .start()
    )


class WindowBatchError(RuntimeError):
    """A window micro-batch could not be read or merged; the full error is in the driver log."""


def window_batch_handler(
    on_batch: Callable[[list[str]], None], stopping: threading.Event
) -> Callable[[DataFrame, int], None]:
    """The ``foreachBatch`` function of :func:`start_window_stream`.

    No error text from inside it reaches Spark. Spark 4.0 tests a Python callback's error
    message with ``Py4JJavaError: An error occurred while calling((.|\\r\\n|\\r|\\n)*)(…)``
    (``StreamExecution.isInterruptionException``, to tell a stop from a failure); that pattern
    recurses once per character, and the message of a failed ``collect`` carries the whole Java
    stack trace, so the stream thread died of a ``StackOverflowError`` in ``java.util.regex``
    instead of stopping (or failing) cleanly. So: while ``stopping`` is set (the service is
    stopping the query, which cancels the running collect) it returns quietly; otherwise it
    logs the error here and fails the query with a short :class:`WindowBatchError`."""

    def batch(df: DataFrame, batch_id: int) -> None:
        try:
            on_batch([r["value"] for r in df.collect()])
        except Exception as e:
            if stopping.is_set():
                return
            log.exception("window micro-batch %d failed", batch_id)
            raise WindowBatchError(f"window micro-batch {batch_id} failed: {type(e).__name__}") from None

    return batch


def start_window_stream(
    spark: SparkSession,
    opts: StreamOptions,
    on_batch: Callable[[list[str]], None],
    starting_timestamp_ms: int,
    kinds: tuple[str, ...],
    stopping: threading.Event | None = None,
) -> StreamingQuery:
    """A second query beside the archive stream: each micro-batch's records of ``kinds`` are
    brought to the driver once and handed to ``on_batch`` (the analyzer's in-memory window
    state, which merges them and drops re-sends by ``key``).

    It starts at ``starting_timestamp_ms`` (the state's horizon; offsets past the end start at
    the end) from a fresh checkpoint under ``opts.checkpoint_dir``: the driver state does not
    survive a restart, so the query must not resume where the lost state left off — the state
    is rebuilt from the archive and this re-read of the horizon, and its dedup makes the
    overlap harmless. ``on_batch`` runs in the driver; an exception from it fails the query
    with a :class:`WindowBatchError` (catch and count inside it). Set ``stopping`` before
    ``query.stop()`` (see :func:`window_batch_handler`)."""
    shutil.rmtree(opts.checkpoint_dir, ignore_errors=True)
    source = (
        spark.readStream.format("kafka")
        .options(**spark_kafka_options(opts.kafka))
        .option("subscribe", opts.topic)
        .option("startingTimestamp", str(starting_timestamp_ms))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
        .option("failOnDataLoss", "false")
        .load()
    )
    # The same checks as the archive query (its records never reach the state either); counted
    # there, once, not here: this query re-reads the horizon at every start.
    checked = classify(source, opts.bounds, opts.max_record_bytes)
    rows = _kept(checked).where(F.col("kind").isin(list(kinds))).select("value")
    handler = window_batch_handler(on_batch, stopping if stopping is not None else threading.Event())
    return (
        rows.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(opts.checkpoint_dir))
        .trigger(processingTime=f"{opts.trigger_s} seconds")
        .queryName(WINDOW_QUERY)
        .start()
    )


def checkpoint_watermark_ms(checkpoint_dir: Path) -> int | None:
    """The watermark (ms) the archive query's checkpoint will resume with, or None (no batch
    committed yet, or a layout this reader does not know). Spark keeps it in the newest file of
    ``offsets/``: a version line, then the batch metadata as JSON."""
    import json

    try:
        batches = [p for p in (Path(checkpoint_dir) / "offsets").iterdir() if p.name.isdigit()]
        newest = max(batches, key=lambda p: int(p.name), default=None)
        if newest is None:
            return None
        meta = json.loads(newest.read_text().splitlines()[1])
        return int(meta["batchWatermarkMs"])
    except (OSError, IndexError, ValueError, KeyError, TypeError):
        return None
