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
JVM. ``TESTBED_BROKER_CDS=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

# Not LINKWATCH_*: every variable with that prefix is read as a config key by the commands.
CDS_ENV = "TESTBED_BROKER_CDS"
# Both the dumping and the mapping JVM must have it: HotSpot refuses an archive whose setting
# differs from its own.
DIAGNOSTIC = ("-XX:+UnlockDiagnosticVMOptions", "-XX:+AllowArchivingWithJavaAgent")
# In a dumping broker's node directory: the archive its JVM writes at exit, and the cache path
# it is adopted into (written beside it, so that stopping needs neither java nor the jars).
DUMP_NAME = "class-archive.jsa"
TARGET_NAME = "class-archive.target"


def archive_path(java: str, cache_dir: Path) -> Path | None:
    """Where the archive for this ``java`` lives under ``cache_dir`` (the Kafka runtime's), or
    None when turned off. Keyed by the resolved JVM binary and its size and mtime: an archive is
    valid for one JVM build only."""
    if os.environ.get(CDS_ENV, "1").strip() in ("0", "false", "off", "no"):
        return None
    real = Path(java).resolve()
    st = real.stat()
    key = hashlib.sha256(f"{real}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:16]
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
