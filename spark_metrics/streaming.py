"""Streaming path: ``linkwatch.samples`` (Kafka) → dedup → Parquet archive, checkpointed.

The stream keeps the raw record JSON plus the envelope columns (``kind``, ``key``, ``ts_ms``,
``hour``) and drops re-sent records by ``key`` within the watermark. The Parquet file sink
with a checkpoint is exactly-once, so a restart resumes from the committed offsets without
writing a batch twice; re-sends that arrive after the watermark are removed again when the
archive is read (:func:`spark_metrics.batch.read_archive` deduplicates by ``key``). The
analysis keeps its windows in memory fed by :func:`start_window_stream` (``evaluation:
incremental``, the default; :mod:`analyzer.window_state`), or reads the archive with the same
transforms as the batch path (``evaluation: reread``).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from linkwatch.records import SAMPLES_TOPIC

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamOptions:
    bootstrap: str
    archive_dir: Path
    checkpoint_dir: Path
    topic: str = SAMPLES_TOPIC
    watermark: str = "2 minutes"
    trigger_s: float = 2.0
    max_offsets_per_trigger: int = 200_000
    starting_offsets: str = "earliest"  # only on the first start; the checkpoint wins afterwards


def envelope(raw: DataFrame) -> DataFrame:
    """Raw Kafka rows → ``value`` (JSON string) + envelope columns for dedup and pruning.
    Rows without a key or a timestamp cannot be deduplicated or windowed and are dropped."""
    js = raw.select(F.col("value").cast("string").alias("value"))
    out = js.select(
        "value",
        F.get_json_object("value", "$.kind").alias("kind"),
        F.get_json_object("value", "$.key").alias("key"),
        F.get_json_object("value", "$.ts_ms").cast("long").alias("ts_ms"),
    ).where(F.col("key").isNotNull() & F.col("ts_ms").isNotNull() & F.col("kind").isNotNull())
    return out.withColumn("event_time", F.timestamp_millis("ts_ms")).withColumn(
        "hour", F.floor(F.col("ts_ms") / 3_600_000).cast("long")
    )


def kafka_source(spark: SparkSession, opts: StreamOptions) -> DataFrame:
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", opts.bootstrap)
        .option("subscribe", opts.topic)
        .option("startingOffsets", opts.starting_offsets)
        .option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
        .option("failOnDataLoss", "false")
        .load()
    )


def start_archive_stream(spark: SparkSession, opts: StreamOptions) -> StreamingQuery:
    """Start the stream; returns the running query (stop it with ``query.stop()``)."""
    rows = envelope(kafka_source(spark, opts))
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
        .queryName("linkwatch-samples-archive")
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
        .option("kafka.bootstrap.servers", opts.bootstrap)
        .option("subscribe", opts.topic)
        .option("startingTimestamp", str(starting_timestamp_ms))
        .option("startingOffsetsByTimestampStrategy", "latest")
        .option("maxOffsetsPerTrigger", str(opts.max_offsets_per_trigger))
        .option("failOnDataLoss", "false")
        .load()
    )
    rows = envelope(source).where(F.col("kind").isin(list(kinds))).select("value")
    handler = window_batch_handler(on_batch, stopping if stopping is not None else threading.Event())
    return (
        rows.writeStream.foreachBatch(handler)
        .option("checkpointLocation", str(opts.checkpoint_dir))
        .trigger(processingTime=f"{opts.trigger_s} seconds")
        .queryName("linkwatch-samples-windows")
        .start()
    )
