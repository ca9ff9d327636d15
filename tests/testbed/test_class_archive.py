"""The brokers' class archive (testbed.class_archive): written once by a broker at its exit,
adopted atomically, mapped by every broker started after; a partial or unwanted one never used."""

from __future__ import annotations

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
