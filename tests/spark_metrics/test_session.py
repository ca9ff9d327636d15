"""``spark_session(log_file=...)``: Spark's log and the JVM's console output go to the file,
never to the process's own screen (the demo's screen is linkwatch's). A session starts its JVM
once per process, so each case runs in a fresh Python process started here."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The child starts a real local Spark, writes one line through Spark's log4j2 and one to the
# JVM's stderr, runs a job of several stages (what used to draw progress bars), then writes to
# its own stdout and stderr, which must still reach the screen.
CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from spark_metrics.session import spark_session

    spark = spark_session(
        "local[2]", app_name="session-log-test", shuffle_partitions=2,
        extra={"spark.ui.showConsoleProgress": "false"}, log_file=Path(sys.argv[1]),
    )
    jvm = spark.sparkContext._jvm
    jvm.org.apache.logging.log4j.LogManager.getLogger("linkwatch.test").warn("log4j-marker")
    jvm.java.lang.System.err.println("jvm-stderr-marker")
    jvm.java.lang.System.err.flush()
    spark.range(200_000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
    print("python-stdout-marker", flush=True)
    print("python-stderr-marker", file=sys.stderr, flush=True)
    spark.stop()
    """
)

SPARK_LINE_SIGNS = (" WARN ", " INFO ", "[Stage", "log4j", "org.apache", "WARNING: Using incubator")


def test_spark_log_and_jvm_output_go_to_the_file_not_the_screen(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "spark.log"  # its folder does not exist yet: the session makes it
    run = subprocess.run([sys.executable, "-c", CHILD, str(log)], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    screen = run.stdout + run.stderr
    assert "python-stdout-marker" in run.stdout and "python-stderr-marker" in run.stderr
    spark_lines = [line for line in screen.splitlines() if any(s in line for s in SPARK_LINE_SIGNS)]
    assert spark_lines == [], spark_lines
    assert "marker" not in screen.replace("python-stdout-marker", "").replace("python-stderr-marker", "")
    written = log.read_text()
    assert "WARN test: log4j-marker" in written  # through the shipped log4j2 config's layout
    assert "jvm-stderr-marker" in written


MAPS_CHILD = textwrap.dedent(
    """
    import sys
    from spark_metrics.session import spark_session

    spark = spark_session("local[2]", app_name="session-archive-test", shuffle_partitions=2)
    pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    print("mapped", sys.argv[1] in open(f"/proc/{pid}/maps").read(), flush=True)
    spark.stop()
    """
)


def test_a_driver_started_after_the_class_archive_was_recorded_maps_it() -> None:
    """The suite's drivers name the Spark class archive (tests/conftest.py); one started once it
    is recorded maps it. HotSpot refuses an archive of other jars or another JVM silently: this
    is where a refusal shows."""
    from testbed import class_archive
    from tests.conftest import SPARK_ARCHIVE, SPARK_SUBMIT_OPTS_GIVEN, SUITE_SPARK_JVM_ARGS

    if SPARK_ARCHIVE is None or SPARK_SUBMIT_OPTS_GIVEN:
        pytest.skip(
            "class archives turned off (TESTBED_CDS=0) or the drivers' options given (SPARK_SUBMIT_OPTS)"
        )
    assert f"-XX:SharedArchiveFile={SPARK_ARCHIVE}" in os.environ["SPARK_SUBMIT_OPTS"]
    # Returns once it is there: waits out the run's own background recording (it holds the
    # lock), or records it here when this run has none going.
    recorded = class_archive.record_spark_archive(SPARK_ARCHIVE, SUITE_SPARK_JVM_ARGS)
    assert recorded == SPARK_ARCHIVE, (SPARK_ARCHIVE.parent / "spark-training.log").read_text()[-3000:]
    run = subprocess.run(
        [sys.executable, "-c", MAPS_CHILD, str(SPARK_ARCHIVE)], capture_output=True, text=True, timeout=240
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "mapped True" in run.stdout, run.stdout[-2000:]
