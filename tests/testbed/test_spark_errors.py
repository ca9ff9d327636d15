"""The Spark standalone helper refuses bad set-up with one line saying what to do, before it
starts anything; ``down`` and ``status`` are safe without a cluster. (Starting the cluster is
tested in ``tests/analyzer/test_spark_cluster.py``.)"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cli.main import main
from linkwatch.errors import SetupError
from testbed.spark import (
    STATE_FILE,
    SparkClusterSpec,
    SparkStandalone,
    daemon_ports,
    find_free_base_port,
)


@pytest.mark.parametrize(
    ("index", "role", "who"),
    [
        (0, 0, r"RPC port of the master"),
        (0, 1, r"web UI port of the master"),
        (2, 0, r"RPC port of worker 2"),
    ],
)
def test_port_already_taken(tmp_path: Path, index: int, role: int, who: str) -> None:
    base = find_free_base_port(2, start=42000)
    taken = daemon_ports(base, index)[role]
    with socket.socket() as s:
        s.bind(("127.0.0.1", taken))
        s.listen()
        with pytest.raises(SetupError, match=rf"port {taken} \({who}\) is already in use.*--base-port"):
            SparkStandalone(SparkClusterSpec(root=tmp_path / "s", base_port=base)).up()
    assert not (tmp_path / "s").exists(), "nothing is written before the checks pass"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"workers": 0}, r"workers=0: the local Spark cluster runs 1 to 4 workers"),
        ({"cores_per_worker": 64}, r"cores_per_worker=64: choose 1 to \d+"),
        ({"memory_mb_per_worker": 256}, r"memory_mb_per_worker=256: choose 512 to 8192 MB"),
        ({"daemon_heap_mb": 4096}, r"daemon_heap_mb=4096"),
        ({"base_port": 80}, r"base_port=80: choose a port between 1024 and 65000"),
    ],
)
def test_bad_spec(tmp_path: Path, spec: dict, message: str) -> None:
    with pytest.raises(SetupError, match=message):
        SparkStandalone(SparkClusterSpec(root=tmp_path / "s", **spec)).up()


def _write_stale_state(root: Path) -> None:
    root.mkdir(parents=True)
    dead = {"pid": 2**22 + 12345, "port": 42000, "ui_port": 42001, "log": str(root / "x.log")}
    state = {
        "root": str(root),
        "spark_version": "4.0.1",
        "started_at": 0.0,
        "master": {"name": "master", **dead},
        "workers": [{"name": "worker-1", **dead, "port": 42010, "ui_port": 42011}],
    }
    (root / STATE_FILE).write_text(json.dumps(state))


def test_stale_directory_then_down_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "stale"
    _write_stale_state(root)
    with pytest.raises(SetupError, match=r"stale Spark cluster directory .* run `linkwatch spark down`"):
        SparkStandalone(SparkClusterSpec(root=root, base_port=find_free_base_port(2, start=42000))).up()
    assert main(["spark", "status", "--dir", str(root)]) == 1  # the daemons are dead
    assert main(["spark", "down", "--dir", str(root)]) == 0
    assert not root.exists()
    assert main(["spark", "down", "--dir", str(root)]) == 0
    assert "no Spark daemon was running" in capsys.readouterr().out


def test_foreign_directory_is_not_touched(tmp_path: Path) -> None:
    root = tmp_path / "mine"
    root.mkdir()
    (root / "notes.txt").write_text("keep")
    with pytest.raises(SetupError, match=r"is not a linkwatch Spark cluster directory.*--dir"):
        SparkStandalone(SparkClusterSpec(root=root, base_port=find_free_base_port(2, start=42000))).up()
    assert (root / "notes.txt").read_text() == "keep"


def test_status_without_cluster_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spark", "status", "--dir", str(tmp_path / "none")]) == 1
    assert "no Spark cluster in" in capsys.readouterr().out
