"""The remediation tests' own 3-broker cluster.

They fill log dirs, move replicas between dirs and brokers, and set throttles: cluster-wide
state that the session cluster's other tests rely on (for example both log dirs of every broker
in use), and that other tests' leftover data would skew (the free-disk-first planner sees every
byte on a dir). So this package overrides ``cluster3`` with a fresh cluster of its own, torn down
when the package is done; ``admin`` and the other session fixtures follow it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from linkwatch.testbed import faults
from linkwatch.testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port


@pytest.fixture(scope="package")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    root = tmp_path_factory.mktemp("remediation-cluster") / "kafka"
    start = 45000 + (os.getpid() % 150) * 100
    cluster = LocalCluster(
        ClusterSpec(brokers=3, root=root, base_port=find_free_base_port(3, start=start), heap_mb=256)
    )
    state = cluster.up()
    try:
        yield state
    finally:
        faults.revert_all()
        cluster.down()
