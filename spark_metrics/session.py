"""One SparkSession factory for jobs, tests and benches (local mode unless told otherwise)."""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

from linkwatch.errors import SetupError

#: Spark's log4j2 config that writes its log to the file named by ``-Dlinkwatch.spark.log``.
FILE_LOG_CONFIG = Path(__file__).with_name("log4j2-file.properties")
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
#: The connector's data source: on the driver's classpath when the session can read Kafka.
KAFKA_SOURCE_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def spark_session(
    master: str = "local[2]",
    app_name: str = "linkwatch",
    kafka: bool = False,
    shuffle_partitions: int = 4,
    extra: dict[str, str] | None = None,
    log_file: Path | None = None,
) -> SparkSession:
    """Get or create the session. ``kafka=True`` adds the connector jars (resolved once from
    Maven Central into the local cache, see :mod:`spark_metrics.jars`). ``extra`` settings win
    over the defaults here, except that ``spark.driver.extraJavaOptions`` is added to ours.

    ``log_file``: Spark's log (log4j2, :data:`FILE_LOG_CONFIG`) and everything else the JVM
    writes to its stderr (its launcher's warnings, progress bars) go to this file, appended,
    instead of this process's stderr. Like every JVM option it only takes effect when this call
    starts the JVM; a session already running keeps its output where it was."""
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
    )
    if kafka:
        from spark_metrics.jars import kafka_connector_jars

        _refuse_a_driver_without_the_connector()
        builder = builder.config("spark.jars", ",".join(str(p) for p in kafka_connector_jars()))
    extra = dict(extra or {})
    # Spark splits this string like a shell (quotes kept together): the caller's part verbatim,
    # our paths quoted.
    java = ["-Dlog4j2.level=WARN", extra.pop(JAVA_OPTIONS, "")]
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        java += [
            shlex.quote(f"-Dlog4j.configurationFile={FILE_LOG_CONFIG}"),
            shlex.quote(f"-Dlinkwatch.spark.log={log_file}"),
        ]
    builder = builder.config(JAVA_OPTIONS, " ".join(o for o in java if o))
    for key, value in extra.items():
        builder = builder.config(key, value)
    with _stderr_to(log_file) if log_file is not None else contextlib.nullcontext():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def _refuse_a_driver_without_the_connector() -> None:
    """The driver's classpath is fixed when its JVM starts (the first session of the process):
    a JVM started without the connector can never read Kafka, whatever later sessions ask for,
    and Spark says only "Failed to find data source: kafka" at the first read. Say so here."""
    from pyspark import SparkContext

    jvm = SparkContext._jvm
    if jvm is None:  # no JVM yet: this session starts it with the connector
        return
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    try:
        jvm.java.lang.Class.forName(KAFKA_SOURCE_CLASS, False, loader)
    except Exception as exc:  # py4j's error for ClassNotFoundException
        raise SetupError(
            "the Spark driver in this process was started without the Kafka connector: the "
            "first session of a process that reads Kafka must be spark_session(kafka=True)"
        ) from exc


@contextlib.contextmanager
def _stderr_to(path: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the session starts, so the JVM started meanwhile
    inherits it as its stderr for its whole life; this process's own stderr is restored after
    (what it writes in between, from any thread, lands in the file too)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with path.open("ab") as f:
            os.dup2(f.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
