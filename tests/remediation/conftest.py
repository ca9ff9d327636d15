"""The remediation tests' own 3-broker cluster.

They fill log dirs, move replicas between dirs and brokers, and set throttles: cluster-wide
state that the session cluster's other tests rely on (for example both log dirs of every broker
in use), and that other tests' leftover data would skew (the free-disk-first planner sees every
byte on a dir). So this package overrides ``cluster3`` with a fresh cluster of its own, torn down
when the package is done; ``admin`` and the other session fixtures follow it.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator

import pytest

from remediation.throttle import clear_throttle
from remediation.view import BROKER_THROTTLE_KEYS, read_view
from testbed import faults
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from tests.remediation.kit import FilledDir, create_topic, place, produce


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


@pytest.fixture(autouse=True)
def _no_throttle_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test on this package's cluster, the brokers' throttle rates are removed. A
    scenario that failed mid-move can leave its rates behind; the next one (its rerun too)
    would record them as there before it and put them back at its end (a rerun timed out
    waiting for no throttle left, on rates the first try set). Topic-level throttles go with
    the test's topic. Unit tests (no cluster) are untouched."""
    yield
    if "cluster3" not in request.fixturenames:
        return
    from kafka import KafkaAdminClient

    cluster = request.getfixturevalue("cluster3")  # package-scoped: still up here
    with contextlib.suppress(Exception):
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="linkwatch-tests-cleanup")
        try:
            clear_throttle(
                admin, {f"broker:{n.node_id}": dict.fromkeys(BROKER_THROTTLE_KEYS) for n in cluster.nodes}
            )
        finally:
            admin.close()


@pytest.fixture
def fill_broker1_dir(
    cluster3: ClusterState, admin, topic_name: str
) -> Iterator[Callable[[list[int]], FilledDir]]:
    """Fill broker 1's first log dir with ``topic_name``: one partition per size (bytes), led and
    held by broker 1 alone, every replica placed in that dir. The topic is deleted at teardown
    whatever the outcome (its bytes on any dir would skew the next disk scenario or a rerun).

    Before filling, the topics earlier tests of this package left on the cluster are deleted:
    the scenario's capacity is derived from broker 1's dir alone, so a destination dir already
    holding other tests' bytes has no headroom, and how many moves a plan makes would depend
    on which files ran before in this worker (a three-worker run planned one move of four)."""
    filled: list[str] = []

    def fill(sizes: list[int]) -> FilledDir:
        d1 = cluster3.node(1).log_dirs[0]
        _delete_leftover_topics(admin, keep=topic_name)
        filled.append(topic_name)
        create_topic(admin, topic_name, {p: [1] for p in range(len(sizes))})
        produce(cluster3.bootstrap, topic_name, dict(enumerate(sizes)))
        place(admin, topic_name, list(range(len(sizes))), 1, d1)
        used = next(d.used_bytes for d in read_view(admin).log_dirs if (d.broker, d.path) == (1, d1))
        return FilledDir(d1, used)

    yield fill
    if filled:
        with contextlib.suppress(Exception):
            admin.delete_topics(filled)


def _delete_leftover_topics(admin, keep: str, timeout_s: float = 30.0) -> None:
    """Delete every non-internal topic but ``keep`` and wait until no log dir holds a replica of
    one (each test of the package uses topics of its own, so none is in use now)."""
    leftovers = [t for t in admin.list_topics() if not t.startswith("__") and t != keep]
    if not leftovers:
        return
    admin.delete_topics(leftovers)
    gone = set(leftovers)
    deadline = time.monotonic() + timeout_s
    while any(r.topic in gone for r in read_view(admin).replicas):
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the leftover topics {sorted(gone)} still hold replicas after {timeout_s:.0f} s"
            )
        time.sleep(0.2)
