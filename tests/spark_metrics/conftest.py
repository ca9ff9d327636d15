"""One local[2] SparkSession for the whole test session; helpers to build raw frames."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pytest
from pyspark.sql import DataFrame, SparkSession

from linkwatch.records import Record
from spark_metrics.session import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """The process's one driver, started as the analyzer starts its own (the Kafka connector,
    FAIR scheduling): the driver's classpath and static settings are fixed by the first session
    of a process, and the analyzer's tests in this process get this one back."""
    session = spark_session(
        "local[2]",
        app_name="linkwatch-tests",
        kafka=True,
        shuffle_partitions=2,
        extra={"spark.scheduler.mode": "FAIR"},
    )
    yield session
    session.stop()


def raw_frame(spark: SparkSession, records: Iterable[Record | str]) -> DataFrame:
    """Kafka-shaped rows (``value`` string) from records, or literal strings for bad input."""
    values = [(r if isinstance(r, str) else r.to_json().decode(),) for r in records]
    return spark.createDataFrame(values, "value string")
