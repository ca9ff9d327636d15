"""One SparkSession factory for jobs, tests and benches (local mode unless told otherwise)."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession


def spark_session(
    master: str = "local[2]",
    app_name: str = "linkwatch",
    kafka: bool = False,
    shuffle_partitions: int = 4,
    extra: dict[str, str] | None = None,
) -> SparkSession:
    """Get or create the session. ``kafka=True`` adds the connector jars (resolved once from
    Maven Central into the local cache, see :mod:`spark_metrics.jars`)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # bind and advertise loopback only
    # An empty master leaves it to spark-submit (--master).
    builder = SparkSession.builder.master(master) if master else SparkSession.builder
    builder = (
        builder.appName(app_name)
        .config("spark.ui.enabled", "false")
        # Nothing listens beyond loopback unless configured (override with ``extra``).
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "true")
        # The streaming archive is many small files (a few per micro-batch). With the default
        # open cost (4 MiB) every file becomes its own scan task, so an evaluation's first stage
        # grows with the archive's age; a small open cost packs them into a few tasks.
        .config("spark.sql.files.openCostInBytes", "8192")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
    )
    if kafka:
        from spark_metrics.jars import kafka_connector_jars

        builder = builder.config("spark.jars", ",".join(str(p) for p in kafka_connector_jars()))
    for key, value in (extra or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
