"""Agent test fixtures: real traffic on the session cluster, captured from each broker's log."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from agent.requestlog.follow import FileFollower
from linkwatch.testbed.cluster import ClusterState
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
    create_topic(admin, topic)
    admin.close()
    followers = {n.node_id: FileFollower(n.request_log, start_at_end=True) for n in cluster3.nodes}
    for f in followers.values():
        f.read_lines()  # open at the end
    run_traffic(cluster3.bootstrap, topic, seconds=12, rate=300)
    lines = {b: f.read_lines(max_bytes=1 << 30) for b, f in followers.items()}
    for f in followers.values():
        f.close()
    yield Captured(topic, lines)
