"""Bad set-up gets a one-line error that says what to do; ``down`` is safe to repeat."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from cli.main import main
from linkwatch.errors import SetupError
from testbed import jars
from testbed.cluster import (
    PROPERTIES_ENV,
    STATE_FILE,
    ClusterSpec,
    LocalCluster,
    env_properties,
    find_free_base_port,
    node_ports,
)


def test_port_already_taken(tmp_path: Path) -> None:
    base = find_free_base_port(1, start=41000)
    taken = node_ports(base, 1).controller
    with socket.socket() as s:
        # As a broker binds (and as port_in_use checks): a connection of an earlier test still
        # in TIME_WAIT on this port does not make it taken.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", taken))
        s.listen()
        with pytest.raises(
            SetupError, match=rf"port {taken} \(controller port of broker 1\) is already in use.*--base-port"
        ):
            LocalCluster(ClusterSpec(brokers=1, root=tmp_path / "c", base_port=base)).up()


def _write_stale_state(root: Path) -> None:
    root.mkdir(parents=True)
    state = {
        "cluster_id": "x",
        "root": str(root),
        "base_port": 41000,
        "kafka_version": "4.1.1",
        "started_at": 0.0,
        "nodes": [
            {
                "node_id": 1,
                "rack": "rack-a",
                "pid": 2**22 + 12345,
                "dir": str(root / "broker-1"),
                "log_dirs": [],
                "ports": {"client": 41010, "controller": 41011, "jolokia": 41012},
            }
        ],
    }
    (root / STATE_FILE).write_text(json.dumps(state))


def test_stale_cluster_directory_then_down_twice(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "stale"
    _write_stale_state(root)
    with pytest.raises(SetupError, match=r"stale cluster directory .* run `linkwatch cluster down`"):
        LocalCluster(ClusterSpec(brokers=1, root=root, base_port=find_free_base_port(1, start=41000))).up()
    assert main(["cluster", "down", "--dir", str(root)]) == 0
    assert not root.exists()
    assert main(["cluster", "down", "--dir", str(root)]) == 0
    assert "no broker was running" in capsys.readouterr().out


def test_foreign_directory_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(SetupError, match="not a linkwatch cluster directory"):
        LocalCluster(ClusterSpec(brokers=1, root=tmp_path)).up()
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_missing_java(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no java on it
    with pytest.raises(SetupError, match="Java is not installed"):
        LocalCluster(ClusterSpec(brokers=1, root=tmp_path / "c")).up()


def test_missing_maven(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SetupError, match=r"Maven \(mvn\) is not installed"):
        jars.resolve(cache_dir=tmp_path / "cache")


def test_maven_failure_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "pom.xml").write_text("<project>this is not a pom</project>")
    with pytest.raises(SetupError, match="Maven could not resolve the Kafka jars") as info:
        jars._mvn(["validate"], cwd=tmp_path)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (ClusterSpec(brokers=2), "1 or 3 nodes"),
        (ClusterSpec(heap_mb=2048), "heap_mb=2048"),
        (ClusterSpec(base_port=80), "base_port=80"),
    ],
)
def test_bad_cluster_spec(spec: ClusterSpec, message: str) -> None:
    with pytest.raises(SetupError, match=message):
        spec.validate()


@pytest.mark.parametrize("value", ["replica.fetch.wait.max.ms", "=2000", "a=1 b"])
def test_a_property_that_is_not_key_value_is_named_before_anything_is_written(
    value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PROPERTIES_ENV, value)
    root = tmp_path / "c"
    with pytest.raises(SetupError, match=rf"^{PROPERTIES_ENV}: '.*' is not key=value"):
        LocalCluster(ClusterSpec(brokers=1, root=root, base_port=find_free_base_port(1, start=41000))).up()
    assert not root.exists()


def test_properties_are_split_like_a_shell_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PROPERTIES_ENV, " a.b=1  'c.d=x y' e= ")
    assert env_properties() == {"a.b": "1", "c.d": "x y", "e": ""}
    monkeypatch.setenv(PROPERTIES_ENV, "")
    assert env_properties() == {}


def test_cli_reports_setup_errors_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "up", "--brokers", "2", "--dir", str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("linkwatch: error: brokers=2") and "\n" not in err


def test_status_of_missing_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cluster", "status", "--dir", str(tmp_path / "none")]) == 1
    assert "no cluster in" in capsys.readouterr().out


def test_base_ports_avoid_the_kernels_ephemeral_range() -> None:
    """A block in the range the kernel hands out as source ports is never chosen: an outgoing
    connection may take such a port between the search and the broker's bind."""
    from testbed.cluster import ephemeral_port_range, free_base_port

    low, high = ephemeral_port_range()
    base = free_base_port(lambda b: [b + 10, b + 11, b + 12], start=low - low % 100, stop=high)
    assert not low <= base + 10 <= high and not low <= base + 12 <= high
    assert find_free_base_port(3, start=low - low % 100 + 100) < low


def test_a_block_another_process_reserved_is_never_chosen() -> None:
    """Two test workers search from the same start: the second gets another block, though the
    first one's ports are not bound (a broker it stopped for a while and restarts later)."""
    import subprocess
    import sys

    start = 15000
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from testbed.cluster import find_free_base_port;"
            f"print(find_free_base_port(3, start={start}), flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        theirs = int(other.stdout.readline())
        mine = find_free_base_port(3, start=start)
        assert mine != theirs
        assert find_free_base_port(3, start=start) == mine  # this process may reuse its own
    finally:
        other.communicate("", timeout=30)
    # Once the other process has exited, its block is free for anyone.
    assert find_free_base_port(3, start=theirs) == theirs
