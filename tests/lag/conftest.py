"""Fixtures for lag tests: a producer, a fresh group name, collectors that are closed after."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from lag.collector import CollectorConfig, LagCollector
from lag.timestamps import TimestampReader
from testbed.cluster import ClusterState


@pytest.fixture(scope="session")
def cluster3(request: pytest.FixtureRequest) -> Iterator[ClusterState]:
    """The session cluster, or (while developing) an already running one named by
    ``LINKWATCH_DEV_LAG_CLUSTER=<cluster dir>`` so a loaded machine need not start another."""
    existing = os.environ.get("LINKWATCH_DEV_LAG_CLUSTER")
    if existing:
        state = ClusterState.load(Path(existing))
        if state is None:
            raise pytest.UsageError(f"LINKWATCH_DEV_LAG_CLUSTER={existing}: no cluster state there")
        yield state
        return
    yield request.getfixturevalue("cluster3")


@pytest.fixture
def producer(cluster3: ClusterState) -> Iterator[KafkaProducer]:
    p = KafkaProducer(bootstrap_servers=cluster3.bootstrap, linger_ms=5)
    yield p
    p.close()


@pytest.fixture
def group_name() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def make_collector(cluster3: ClusterState, admin: KafkaAdminClient) -> Iterator:
    readers: list[TimestampReader] = []

    def build(groups: list[str], **overrides: object) -> LagCollector:
        reader = TimestampReader(cluster3.bootstrap, timeout_s=2.0)
        readers.append(reader)
        cfg = CollectorConfig(
            include=[f"^{g}$" for g in groups],
            **{"window_s": 3.0, "min_evaluations": 3, **overrides},  # type: ignore[arg-type]
        )
        return LagCollector(admin, reader, cfg)

    yield build
    for r in readers:
        r.close()
