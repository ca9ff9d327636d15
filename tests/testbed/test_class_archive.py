"""The brokers' class archive (testbed.class_archive): written once by a broker at its exit,
adopted atomically, mapped by every broker started after; a partial or unwanted one never used."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed import class_archive, jars
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port, require_java


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


# --- the rules, on files --------------------------------------------------------------------


def test_off_by_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = tmp_path / "java"
    java.write_text("")
    for off in ("0", "off", "false", " no "):
        monkeypatch.setenv(class_archive.CDS_ENV, off)
        assert class_archive.archive_path(str(java), tmp_path) is None
    monkeypatch.setenv(class_archive.CDS_ENV, "1")
    assert class_archive.archive_path(str(java), tmp_path) is not None


def test_one_archive_per_jvm_build(tmp_path: Path) -> None:
    a, b = tmp_path / "a-java", tmp_path / "b-java"
    a.write_text("x")
    b.write_text("y")
    link = tmp_path / "java"
    link.symlink_to(a)
    assert class_archive.archive_path(str(link), tmp_path) == class_archive.archive_path(str(a), tmp_path)
    assert class_archive.archive_path(str(a), tmp_path) != class_archive.archive_path(str(b), tmp_path)
    assert class_archive.archive_path(str(a), tmp_path).parent == tmp_path / "class-archives"


def test_the_spark_archive_is_keyed_by_the_jar_files_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A fresh environment at the same path links the same jar files but makes pyspark's
    directories anew: the archive it finds is the one recorded before. A jar that changes keys a
    new one (HotSpot would refuse the old)."""
    import importlib.machinery

    pkg = tmp_path / "site" / "pyspark"
    (pkg / "jars" / "connect-repl").mkdir(parents=True)
    jar = pkg / "jars" / "spark-core.jar"
    jar.write_bytes(b"classes")
    spec = importlib.machinery.ModuleSpec("pyspark", None, is_package=True)
    spec.submodule_search_locations = [str(pkg)]
    monkeypatch.setattr(class_archive.importlib.util, "find_spec", lambda name: spec)
    monkeypatch.delenv(class_archive.CDS_ENV, raising=False)
    first = class_archive.spark_archive_path(tmp_path / "cache")
    assert first is not None

    os.utime(pkg / "jars" / "connect-repl", (2_000_000, 2_000_000))
    (pkg / "jars" / "README").write_text("not a jar")
    assert class_archive.spark_archive_path(tmp_path / "cache") == first

    os.utime(jar, (3_000_000, 3_000_000))
    assert class_archive.spark_archive_path(tmp_path / "cache") != first


def test_a_missing_archive_adds_no_argument(tmp_path: Path) -> None:
    archive = tmp_path / "class-archives" / "broker-x.jsa"
    assert class_archive.use_args(None) == []
    assert class_archive.use_args(archive) == []
    archive.parent.mkdir()
    archive.write_bytes(b"jsa")
    assert class_archive.use_args(archive)[-1] == f"-XX:SharedArchiveFile={archive}"


@pytest.mark.parametrize(
    ("exited_cleanly", "written", "adopted"),
    [
        (True, b"archive", True),
        (False, b"part of an archive", False),  # killed while writing
        (True, None, False),  # exited before writing anything
        (True, b"", False),
    ],
)
def test_adopt_takes_only_a_whole_archive(
    tmp_path: Path, exited_cleanly: bool, written: bytes | None, adopted: bool
) -> None:
    node_dir, archive = tmp_path / "broker-1", tmp_path / "cache" / "class-archives" / "broker-x.jsa"
    node_dir.mkdir()
    args = class_archive.dump_args(archive, node_dir)
    assert args[-1] == f"-XX:ArchiveClassesAtExit={node_dir / class_archive.DUMP_NAME}"
    assert class_archive.is_dumping(node_dir)
    if written is not None:
        (node_dir / class_archive.DUMP_NAME).write_bytes(written)
    assert (class_archive.adopt(node_dir, exited_cleanly) == archive) is adopted
    assert archive.is_file() is adopted
    if adopted:
        assert archive.read_bytes() == written
    assert sorted(p.name for p in archive.parent.glob("*")) == (["broker-x.jsa"] if adopted else [])
    assert not class_archive.is_dumping(node_dir) and not (node_dir / class_archive.DUMP_NAME).exists()
    assert class_archive.adopt(node_dir, True) is None  # nothing left to adopt


def test_the_first_adopted_archive_stays(tmp_path: Path) -> None:
    archive = tmp_path / "class-archives" / "broker-x.jsa"
    for name, content in (("broker-1", b"first"), ("broker-2", b"second")):
        node_dir = tmp_path / name
        node_dir.mkdir()
        class_archive.dump_args(archive, node_dir)
        (node_dir / class_archive.DUMP_NAME).write_bytes(content)
        assert class_archive.adopt(node_dir, True) == archive
    assert archive.read_bytes() == b"first"


# --- on real brokers ------------------------------------------------------------------------


def test_the_session_brokers_map_the_archive_or_write_it(cluster3: ClusterState) -> None:
    """On a machine with the archive every broker maps it; on a fresh one the first broker of
    the first cluster writes it and the others run without."""
    archive = class_archive.archive_path(require_java(), jars.resolve().cache_dir)
    if archive is None:
        pytest.skip(f"{class_archive.CDS_ENV} turns the archive off")
    mapping = [n.node_id for n in cluster3.nodes if str(archive) in _maps(n.pid)]
    dumping = [n.node_id for n in cluster3.nodes if any("ArchiveClassesAtExit" in a for a in _cmdline(n.pid))]
    assert sorted(mapping + dumping) == [1, 2, 3], (mapping, dumping)
    assert len(dumping) <= 1


@pytest.mark.cluster
def test_a_broker_writes_the_archive_at_its_exit_and_the_next_start_maps_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    archive = tmp_path / "cache" / "class-archives" / "broker-test.jsa"
    monkeypatch.setattr(class_archive, "archive_path", lambda java, cache_dir: archive)
    cluster = LocalCluster(
        ClusterSpec(brokers=1, root=tmp_path / "kafka", base_port=find_free_base_port(1, start=42000))
    )
    state = cluster.up()
    try:
        pid = state.nodes[0].pid
        assert f"-XX:ArchiveClassesAtExit={Path(state.nodes[0].dir) / class_archive.DUMP_NAME}" in _cmdline(
            pid
        )
        assert not archive.exists()
        cluster.down(keep_data=True)
        assert archive.is_file() and archive.stat().st_size > 1_000_000
        assert not class_archive.is_dumping(Path(state.nodes[0].dir))
        state = cluster.start_existing(state)
        pid = state.nodes[0].pid
        assert f"-XX:SharedArchiveFile={archive}" in _cmdline(pid)
        assert str(archive) in _maps(pid), "the broker did not map the archive (HotSpot refused it)"
    finally:
        cluster.down()


# --- the Spark drivers' archive -----------------------------------------------------------
#
# Recording it runs a real Spark session (about 40 s on this machine): the suite's own run in
# workers does that, and tests/spark_metrics/test_session.py checks that its drivers map what
# it recorded. Here a stand-in child takes the JVM's part (writes the file named by
# -XX:ArchiveClassesAtExit from a process that outlives the child, and names its pid).

STAND_IN_JVM = """
import os, re, subprocess, sys
dump = re.search(r"-XX:ArchiveClassesAtExit=(\\S+)", os.environ["SPARK_SUBMIT_OPTS"])[1]
writer = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep(0.5); open({dump!r}, 'wb').write(b'jsa')"])
print("a line of the JVM's warnings")
print("jvm-pid", writer.pid, flush=True)
"""


def test_recording_adopts_what_the_jvm_writes_after_the_child_ends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(class_archive, "SPARK_TRAINING", STAND_IN_JVM)
    target = tmp_path / "class-archives" / "spark-x.jsa"
    assert class_archive.record_spark_archive(target, "-XX:TieredStopAtLevel=1") == target
    assert target.read_bytes() == b"jsa"
    assert [p.name for p in target.parent.glob("*.tmp")] == []
    # Once there, it is not recorded again.
    monkeypatch.setattr(class_archive, "SPARK_TRAINING", "raise SystemExit(3)")
    assert class_archive.record_spark_archive(target, "") == target


def test_a_failed_recording_leaves_no_archive_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(class_archive, "SPARK_TRAINING", "import sys; sys.exit('no Spark here')")
    target = tmp_path / "class-archives" / "spark-x.jsa"
    assert class_archive.record_spark_archive(target, "") is None
    assert not target.exists() and [p.name for p in target.parent.glob("*.tmp")] == []
    assert "no Spark here" in (target.parent / "spark-training.log").read_text()


def test_old_spark_archives_are_pruned(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(class_archive, "SPARK_TRAINING", STAND_IN_JVM)
    archives = tmp_path / "class-archives"
    archives.mkdir()
    for age, name in enumerate(["spark-a.jsa", "spark-b.jsa", "spark-c.jsa", "broker-k.jsa"]):
        (archives / name).write_bytes(b"old")
        os.utime(archives / name, (1_000_000 - age, 1_000_000 - age))
    stale = archives / "spark-z.jsa.1.tmp"
    stale.write_bytes(b"half")
    os.utime(stale, (1_000_000, 1_000_000))
    class_archive.record_spark_archive(archives / "spark-new.jsa", "")
    kept = sorted(p.name for p in archives.iterdir() if p.suffix != ".lock")
    assert kept == ["broker-k.jsa", "spark-a.jsa", "spark-b.jsa", "spark-new.jsa"]
