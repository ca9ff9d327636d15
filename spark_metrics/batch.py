"""Batch path: samples over a time range, from the Parquet archive or from Kafka by timestamp.

Both return frames with a ``value`` column of record JSON, ready for
:func:`spark_metrics.aggregate.aggregate` (the same transforms as the streaming path).
"""

from __future__ import annotations

from pathlib import Path

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from linkwatch.kafka_client import KafkaClientConfig, spark_kafka_options
from linkwatch.records import SAMPLES_TOPIC
from spark_metrics.streaming import envelope


def _in_range(df: DataFrame, from_ms: int, to_ms: int) -> DataFrame:
    return df.where((F.col("ts_ms") >= from_ms) & (F.col("ts_ms") < to_ms))


def read_archive(
    spark: SparkSession, archive_dir: Path, from_ms: int, to_ms: int, single_partition: bool = False
) -> DataFrame | None:
    """Records with ``from_ms <= ts_ms < to_ms`` from the archive (None if it has no data yet).
    Re-sends that reached the archive more than a watermark apart are removed here.

    ``single_partition`` puts the range in one partition before anything else: a single
    partition satisfies every grouping and window requirement, so the dedup and all the
    aggregations downstream plan no shuffle at all. That is what the running analyzer wants
    for its few-minute lookback (a few thousand rows, where each shuffle stage costs far more
    than the rows); a report over a long range leaves it off and stays parallel."""
    if not any(Path(archive_dir).glob("kind=*/hour=*/*.parquet")):
        return None
    try:
        df = spark.read.parquet(str(archive_dir))
    except AnalysisException as e:
        if "UNABLE_TO_INFER_SCHEMA" in str(e) or "Unable to infer schema" in str(e):
            return None  # files written but no micro-batch committed yet
        raise
    hours = (F.col("hour") >= from_ms // 3_600_000) & (F.col("hour") <= to_ms // 3_600_000)
    df = _in_range(df.where(hours), from_ms, to_ms)
    if single_partition:
        df = df.coalesce(1)
    return df.dropDuplicates(["key"]).select("value")


def read_kafka(
    spark: SparkSession, kafka: KafkaClientConfig | str, from_ms: int, to_ms: int, topic: str = SAMPLES_TOPIC
) -> DataFrame:
    """Records whose Kafka timestamp and ``ts_ms`` fall in the range, read directly from Kafka.
    Needs the connector jars (``spark_session(kafka=True)``)."""
    raw = (
        spark.read.format("kafka")
        .options(**spark_kafka_options(kafka))
        .option("subscribe", topic)
        .option("startingTimestamp", str(from_ms))
        .option("endingTimestamp", str(to_ms))
        .option("failOnDataLoss", "false")
        .load()
    )
    return _in_range(envelope(raw), from_ms, to_ms).dropDuplicates(["key"]).select("value")


def write_archive(spark: SparkSession, values: list[str], archive_dir: Path) -> None:
    """Append record JSON to the archive in the stream's layout (``kind=…/hour=…``, the same
    envelope columns), in one batch job: for backfills, tests and benches. The stream's own
    files stay as they are; reads deduplicate by ``key`` across both."""
    raw = spark.createDataFrame([(v,) for v in values], "value string")
    (
        envelope(raw)
        .drop("event_time")
        .coalesce(1)
        .write.mode("append")
        .partitionBy("kind", "hour")
        .parquet(str(archive_dir))
    )
