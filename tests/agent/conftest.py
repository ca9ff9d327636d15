"""Agent test fixtures: real traffic on the session cluster, captured from each broker's log."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.requestlog.follow import FileFollower
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from tests.agent.traffic import create_topic, run_traffic


@dataclass
class Captured:
    """Request-log lines each broker wrote while the traffic ran (read from the end, as the
    agent does by default)."""

    topic: str
    lines: dict[int, list[bytes]]


@pytest.fixture(scope="session")
def captured(cluster3: ClusterState) -> Iterator[Captured]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster3.bootstrap, client_id="agent-tests")
    topic = "agent-traffic"
    # One partition led by each broker, and a consumer assigned every partition (no group join
    # to wait for): every broker serves Produce, FetchConsumer and FetchFollower in the 12 s.
    # With default placement a broker could lead nothing and see no consumer fetch (CI failure
    # of 2026-11-24: broker 1 had no FetchConsumer line).
    create_topic(admin, topic, leaders=sorted(n.node_id for n in cluster3.nodes))
    admin.close()
    followers = {n.node_id: FileFollower(n.request_log, start_at_end=True) for n in cluster3.nodes}
    for f in followers.values():
        f.read_lines()  # open at the end
    run_traffic(cluster3.bootstrap, topic, seconds=12, rate=300, group=False)
    lines = {b: f.read_lines(max_bytes=1 << 30) for b, f in followers.items()}
    for f in followers.values():
        f.close()
    yield Captured(topic, lines)


EXPORTER_JAR = (
    Path.home()
    / ".m2/repository/io/prometheus/jmx/jmx_prometheus_javaagent/1.0.1/jmx_prometheus_javaagent-1.0.1.jar"
)


def exporter_jar() -> Path | None:
    """The Prometheus JMX exporter agent from Maven Central (1.0.1 is the last one published
    there), fetched with Maven on first use; None if it cannot be had."""
    import shutil
    import subprocess

    if not EXPORTER_JAR.exists() and shutil.which("mvn"):
        subprocess.run(
            [
                "mvn",
                "-B",
                "-q",
                "dependency:get",
                "-Dartifact=io.prometheus.jmx:jmx_prometheus_javaagent:1.0.1",
            ],
            capture_output=True,
            timeout=300,
        )
    return EXPORTER_JAR if EXPORTER_JAR.exists() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Monitoring:
    """A separate 1-node cluster (the usual home of linkwatch.samples), with the Prometheus JMX
    exporter agent attached when it is available."""

    cluster: LocalCluster
    state: ClusterState
    exporter_url: str | None


@pytest.fixture(scope="package")
def monitoring(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Monitoring]:
    """A one-broker cluster with the JMX exporter, for the package's files that read it; it
    stops when the package's tests are done (a worker runs the package in a row: tests/conftest.py
    PACKAGE_UNITS) instead of idling to the session's end."""
    root = tmp_path_factory.mktemp("monitoring")
    jar = exporter_jar()
    jvm_args, url = [], None
    if jar is not None:
        (root / "jmx-exporter.yaml").write_text("{}\n")  # default naming, every mbean
        port = free_port()
        jvm_args = [f"-javaagent:{jar}=127.0.0.1:{port}:{root / 'jmx-exporter.yaml'}"]
        url = f"http://127.0.0.1:{port}/metrics"
    spec = ClusterSpec(
        brokers=1,
        root=root / "kafka",
        base_port=find_free_base_port(1, start=30000 + (os.getpid() % 200) * 100),
        request_log_level="WARN",
        extra_jvm_args=jvm_args,
    )
    cluster = LocalCluster(spec)
    state = cluster.up()
    try:
        yield Monitoring(cluster, state, url)
    finally:
        cluster.down()
