"""The brokers' class archive: Java class data sharing (CDS) for the testbed's Kafka JVMs.

A Kafka 4.x broker loads about 4,000 classes from its jars at start-up, and parsing and verifying
them is a large share of a start's CPU. A dynamic CDS archive (JDK 13+) holds those classes
already parsed; a JVM started with it maps the file instead. Measured on the 2-core test machine
(2026-12-06, ``LocalCluster.up`` of 3 brokers, formatting included, whole machine's busy CPU):
31.2 CPU-s and 16.8 s to ready without the archive, 24.3 CPU-s and 12.5 s with it.

How the archive comes to be, with no extra process: when a cluster starts and the archive for
this ``java`` is missing, its first broker is started with ``-XX:ArchiveClassesAtExit`` into its
own node directory; the JVM writes the archive when it exits. When that broker is stopped and
exited by itself (not SIGKILLed mid-write), :func:`adopt` copies the file into the runtime's cache
under a temporary name and renames it into place (atomic: concurrent test workers never see half
a file; the last one to finish wins, and any of them is valid). Every JVM started after that maps
it. An archive the JVM finds unusable (another JDK build, another classpath) is ignored by the
JVM itself with a warning, and the broker starts as it would without.

The brokers carry the Jolokia agent, so the archive is written and read with
``-XX:+AllowArchivingWithJavaAgent`` (a diagnostic flag: HotSpot prints a one-line warning that
such an archive is for testing, which lands in each broker's ``stdout.log``). These are the
testbed's local clusters (tests, the demo, ``linkwatch cluster up``), not a production broker's
JVM. ``TESTBED_CDS=0`` turns it off (and the Spark drivers' archive below).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

# Not LINKWATCH_*: every variable with that prefix is read as a config key by the commands.
CDS_ENV = "TESTBED_CDS"
# Both the dumping and the mapping JVM must have it: HotSpot refuses an archive whose setting
# differs from its own.
DIAGNOSTIC = ("-XX:+UnlockDiagnosticVMOptions", "-XX:+AllowArchivingWithJavaAgent")
# In a dumping broker's node directory: the archive its JVM writes at exit, and the cache path
# it is adopted into (written beside it, so that stopping needs neither java nor the jars).
DUMP_NAME = "class-archive.jsa"
TARGET_NAME = "class-archive.target"


def _off() -> bool:
    return os.environ.get(CDS_ENV, "1").strip() in ("0", "false", "off", "no")


def _stamp(path: Path) -> str:
    real = path.resolve()
    st = real.stat()
    return f"{real}\0{st.st_size}\0{st.st_mtime_ns}"


def archive_path(java: str, cache_dir: Path) -> Path | None:
    """Where the archive for this ``java`` lives under ``cache_dir`` (the Kafka runtime's), or
    None when turned off. Keyed by the resolved JVM binary and its size and mtime: an archive is
    valid for one JVM build only."""
    if _off():
        return None
    key = hashlib.sha256(_stamp(Path(java)).encode()).hexdigest()[:16]
    return cache_dir / "class-archives" / f"broker-{key}.jsa"


def use_args(archive: Path | None) -> list[str]:
    """JVM arguments to map the archive, if there is one (brokers and the storage formatter)."""
    if archive is None or not archive.is_file():
        return []
    return [*DIAGNOSTIC, f"-XX:SharedArchiveFile={archive}"]


def dump_args(archive: Path, node_dir: Path) -> list[str]:
    """JVM arguments for the broker that writes the archive at its exit, into its node directory
    (``archive`` is where :func:`adopt` puts it then)."""
    (node_dir / TARGET_NAME).write_text(str(archive))
    (node_dir / DUMP_NAME).unlink(missing_ok=True)
    return [*DIAGNOSTIC, f"-XX:ArchiveClassesAtExit={node_dir / DUMP_NAME}"]


def is_dumping(node_dir: Path) -> bool:
    """The broker of ``node_dir`` was started to write the archive at its exit."""
    return (node_dir / TARGET_NAME).is_file()


def adopt(node_dir: Path, exited_cleanly: bool) -> Path | None:
    """After a broker of ``node_dir`` stopped: move the archive it wrote at exit into the cache
    (only if it exited by itself: a JVM killed while writing leaves a partial file, which is
    removed). Returns the adopted archive's path, or None."""
    dump, target_file = node_dir / DUMP_NAME, node_dir / TARGET_NAME
    if not target_file.is_file():
        return None
    target = Path(target_file.read_text().strip())
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        if not exited_cleanly or not dump.is_file() or dump.stat().st_size == 0:
            return None
        if target.is_file():
            return target  # another cluster's broker got there first
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(dump, tmp)
        os.replace(tmp, target)
        return target
    except OSError:
        tmp.unlink(missing_ok=True)
        return None  # a cache that cannot be written: the brokers start as they would without
    finally:
        dump.unlink(missing_ok=True)
        target_file.unlink(missing_ok=True)


# --- Spark drivers --------------------------------------------------------------------------
#
# A Spark driver (pyspark's, or spark-submit's for `linkwatch report` / `analyze`) loads about
# 13,000 classes before its first query. The test suite starts dozens of them, each for seconds
# to minutes; with an archive of the classes one session loads, a session's start and first
# query measured 18.0-19.6 -> 8.6-10.3 CPU-s and 14.8-17.5 -> 6.9-8.1 s (2026-12-06, this
# machine). The archive is recorded by one short session (``SPARK_TRAINING``) in a child Python
# whose JVM writes it at its exit; HotSpot takes it only with the same JVM and the same jars
# (paths, sizes, mtimes), so it is keyed by both, and a new virtualenv records its own.

#: The session whose loaded classes are archived: local mode with the Kafka connector, the SQL
#: the aggregation uses (JSON parsing, a shuffle, an Arrow map), then the JVM's pid for the
#: parent to wait on. Classes it did not load are read from the jars as usual.
SPARK_TRAINING = """
from pyspark.sql import functions as F
from spark_metrics.session import spark_session

s = spark_session("local[2]", app_name="linkwatch-class-archive", kafka=True, shuffle_partitions=2)
raw = s.createDataFrame([(f'{{"b": {i % 3}, "v": {i}}}',) for i in range(300)], "value string")
rows = raw.select(F.from_json("value", "b int, v double").alias("r")).select("r.*")
agg = rows.groupBy("b").agg(F.percentile_approx("v", 0.99).alias("p99"), F.count("*").alias("n"))
agg.repartition(2, "b").mapInArrow(lambda batches: (b for b in batches if b.num_rows >= 0), agg.schema).collect()
print("jvm-pid", s.sparkContext._jvm.java.lang.ProcessHandle.current().pid(), flush=True)
s.stop()
"""
#: Spark archives kept besides the newest (one per virtualenv; each about 140 MB).
SPARK_ARCHIVES_KEPT = 2


def spark_archive_path(cache_dir: Path) -> Path | None:
    """The Spark driver archive for this ``java`` and this environment's pyspark jars under
    ``cache_dir``, or None when turned off (``TESTBED_CDS=0``) or without pyspark/java."""
    java = shutil.which("java")
    spec = importlib.util.find_spec("pyspark")
    if _off() or java is None or spec is None or not spec.submodule_search_locations:
        return None
    jars = Path(next(iter(spec.submodule_search_locations))) / "jars"
    if not jars.is_dir():
        return None
    digest = hashlib.sha256(_stamp(Path(java)).encode())
    # The jar files alone: the driver's class path is ``jars/*``, which names no directory, and
    # the directory pyspark ships there (connect-repl) is made anew by each install, so its time
    # keyed a new archive for every fresh environment at the same path (about 40 busy CPU-s to
    # record, at the start of every clean clone's suite) though uv links the same jar files.
    for jar in sorted(jars.glob("*.jar")):
        digest.update(_stamp(jar).encode())
    return cache_dir / "class-archives" / f"spark-{digest.hexdigest()[:16]}.jsa"


def record_spark_archive(target: Path, jvm_args: str, timeout_s: float = 300.0) -> Path | None:
    """Record the Spark driver archive into ``target`` unless it is there: one training session
    (``SPARK_TRAINING``) in a child of this Python with ``jvm_args`` plus the dump; its JVM
    writes the archive when it exits, after the child. One recording at a time per cache (a
    lock beside ``target``). Returns ``target`` when it exists after, else None (no archive: the
    drivers start without one, as before)."""
    from testbed.cluster import pid_alive  # not at the top: testbed.cluster imports this module

    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / "spark.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.is_file():
            return target
        tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        env = {**os.environ, "SPARK_SUBMIT_OPTS": f"{jvm_args} -XX:ArchiveClassesAtExit={tmp}".strip()}
        try:
            done = subprocess.run(
                [sys.executable, "-c", SPARK_TRAINING],
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
            # The JVM shares the child's stdout (its archive warnings land there too): the run
            # ends when both have closed it.
            found = re.search(r"^jvm-pid (\d+)$", done.stdout, re.MULTILINE)
            pid = int(found[1]) if done.returncode == 0 and found else 0
            if not pid:  # what went wrong, for whoever wonders why the drivers start slowly
                (target.parent / "spark-training.log").write_text(done.stdout + done.stderr)
            deadline = time.monotonic() + 60
            while pid and pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if pid and not pid_alive(pid) and tmp.is_file() and tmp.stat().st_size > 0:
                os.replace(tmp, target)
                _prune(target)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        finally:
            tmp.unlink(missing_ok=True)
        return target if target.is_file() else None


def _prune(keep: Path) -> None:
    """Remove all but the newest SPARK_ARCHIVES_KEPT Spark archives besides ``keep``, and
    recordings an interrupted run left (over an hour old)."""
    for tmp in keep.parent.glob("spark-*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - tmp.stat().st_mtime > 3600:
                tmp.unlink()
    others = sorted(
        (p for p in keep.parent.glob("spark-*.jsa") if p != keep),
        key=lambda p: p.stat().st_mtime,
        reverse=True,
    )
    for old in others[SPARK_ARCHIVES_KEPT:]:
        with contextlib.suppress(OSError):
            old.unlink()
