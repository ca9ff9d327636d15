"""Shared fixtures: a real 3-broker KRaft cluster for the whole session, admin client, topics.

The cluster runs on a free block of loopback ports under pytest's temp dir, so test runs in
parallel worktrees do not collide. Every fault injected by a test is reverted after it.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from linkwatch.maven import DEFAULT_CACHE_DIR
from testbed import class_archive, faults
from testbed.cluster import (
    JVM_ARGS_ENV,
    PROPERTIES_ENV,
    ClusterSpec,
    ClusterState,
    LocalCluster,
    find_free_base_port,
)

_ports = itertools.count()

# The suite's Spark drivers (those pyspark and spark-submit start; local mode's executors run in
# them) skip the C2 compiler: they live seconds to minutes on small inputs, where C2's compiling
# is never paid back (the Spark aggregation tests: 158 -> 102 busy CPU-s). Set the variable (even
# empty) to run them with full JIT.
SUITE_SPARK_JVM_ARGS = "-XX:TieredStopAtLevel=1"
# So do the suite's brokers (testbed.cluster.JVM_ARGS_ENV; never the secured ones, whose SCRAM and
# TLS loops need C2), for the same reason: a test broker lives seconds to minutes under a light
# load, and C2 spends that time compiling the produce and fetch paths. Brokers were 988 of the
# suite's 2,281 busy CPU-s (a clean-clone run sampled by process); a 3-broker cluster's start,
# 60 s idle and 40 s of 300 msg/s acks=all took 89 CPU-s with C2 (the C2 thread alone 0.82 cores
# of the brokers' 1.59 under that load) and 60 without, its producer's ack p99 1,408 -> 498 ms.
# Set the variable (even empty) to run them with full JIT. The demo's test runs its brokers with
# full JIT, as `make demo` does: with C1-only brokers its consumer joined nothing in its first try
# of a whole-suite run (at 41272c5, which turned this off, and again once; tests/testbed/test_demo.py).
SUITE_BROKER_JVM_ARGS = "-XX:TieredStopAtLevel=1"
os.environ.setdefault(JVM_ARGS_ENV, SUITE_BROKER_JVM_ARGS)
# The suite's brokers (every one, secured too) also drop two idle loops: the active controller's
# no-op record every 500 ms (metadata.max.idle.interval.ms, KIP-835: each one appended, fetched by
# both other voters and applied by every broker's metadata loader; brokers fence on heartbeats,
# not on these) and the followers' empty fetch round every 500 ms (a follower's fetch waits at the
# leader until data arrives, so this bounds only the idle round: acks=all produce still completes
# as the followers fetch, and a fetch's wait is never counted as slowness). Two session clusters
# idle through most of a run: three C1 brokers holding 180 partitions idled at 0.142 cores, 0.097
# without the no-ops and 0.075 with both (/proc ticks over 60 s). Set the variable (even empty) to
# run them with Kafka's defaults.
SUITE_BROKER_PROPERTIES = "metadata.max.idle.interval.ms=0 replica.fetch.wait.max.ms=2000"
os.environ.setdefault(PROPERTIES_ENV, SUITE_BROKER_PROPERTIES)
# The suite's Spark drivers also map the class archive of a Spark driver (testbed.class_archive:
# a session's start and first query about half the CPU and time). HotSpot ignores a missing
# archive without a word, so every process names it from the start; a run of the whole suite in
# workers records it in the background when this environment has none yet (pytest_configure), and
# the drivers started after it appeared map it.
SPARK_ARCHIVE = class_archive.spark_archive_path(DEFAULT_CACHE_DIR)
_SUITE_SPARK_SUBMIT_OPTS = " ".join(
    [SUITE_SPARK_JVM_ARGS, *([f"-XX:SharedArchiveFile={SPARK_ARCHIVE}"] if SPARK_ARCHIVE else [])]
)
# The caller's own, kept as given. Compared with ours, not tested for presence: xdist's workers
# inherit the variable as the controller's import of this file set it.
SPARK_SUBMIT_OPTS_GIVEN = (
    os.environ.get("SPARK_SUBMIT_OPTS", _SUITE_SPARK_SUBMIT_OPTS) != _SUITE_SPARK_SUBMIT_OPTS
)
os.environ.setdefault("SPARK_SUBMIT_OPTS", _SUITE_SPARK_SUBMIT_OPTS)
_recording: threading.Thread | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _recording
    in_workers = not hasattr(config, "workerinput") and (getattr(config.option, "numprocesses", 0) or 0) > 0
    if in_workers and SPARK_ARCHIVE is not None and not SPARK_ARCHIVE.is_file():
        _recording = threading.Thread(
            target=class_archive.record_spark_archive,
            args=(SPARK_ARCHIVE, SUITE_SPARK_JVM_ARGS),
            name="spark-class-archive",
            daemon=True,
        )
        _recording.start()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _recording is not None:
        _recording.join(timeout=120)  # its JVM is writing the archive: let it land


# A test marked `timing` waits on real brokers under injected faults or latency thresholds; on a
# shared machine its first attempt can lose a race that says nothing about the code. It alone
# gets one rerun; everything else is deterministic and counts on its first run.
TIMING_RERUNS = 1
TIMING_RERUN_DELAY_S = 5


# Fixtures that start a real Kafka cluster: a test using one is a `cluster` test whether or not
# its module says so, so `-m "not cluster"` never starts a broker.
CLUSTER_FIXTURES = frozenset({"cluster3", "monitoring", "own_cluster"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURES.intersection(getattr(item, "fixturenames", ())) and not item.get_closest_marker(
            "cluster"
        ):
            item.add_marker(pytest.mark.cluster)
        if item.get_closest_marker("timing") and not item.get_closest_marker("flaky"):
            item.add_marker(pytest.mark.flaky(reruns=TIMING_RERUNS, reruns_delay=TIMING_RERUN_DELAY_S))


# With workers (`make test TEST_WORKERS=N`, `--dist loadfile`), a file's tests run together in one
# worker, and a worker takes the next file when it is nearly done. xdist hands the files out in
# collection order, so a minutes-long file collected last (tests/testbed/) runs alone at the end
# while the other worker idles. The files marked `minutes(n)` go first, the longest first: the
# short ones then fill in around them and the workers finish together.
_MINUTES = re.compile(r"pytest\.mark\.minutes\((\d+)\)")

# Packages whose conftest starts brokers for the package's files alone (tests/remediation: a
# package-scoped cluster its tests may break; tests/agent: the captured traffic and the
# one-broker monitoring cluster). A worker runs such a package as one unit, in a row: pytest
# ends a package-scoped fixture when the worker's next test is outside the package, so files of
# it handed out one at a time between other packages' started the remediation cluster five times
# in one two-worker run (about 20 s and 22 busy-CPU s each), and each worker captured the agent
# traffic and started a monitoring broker of its own.
PACKAGE_UNITS = ("tests/remediation/", "tests/agent/")

# The files whose tests run a Spark driver in the worker's own process (the session-scoped
# `spark` fixture of tests/spark_metrics/conftest.py, and the analyzer's services, which get that
# session back): one unit, named by its first member, so that one worker starts the driver. Handed
# out by file, two or three workers each started one (a driver's start and first queries took
# 40-56 s of a test's setup in a three-worker run, at about a core).
SPARK_DRIVER_UNIT = (
    "tests/spark_metrics/",
    "tests/aggregation/test_captured_aggregates.py",
    "tests/aggregation/test_window_state_spark.py",
    "tests/analyzer/test_stream_drops.py",
    "tests/analyzer/test_stream_poison.py",
    "tests/analyzer/test_stream_restart.py",
)
_UNITS = (*((pkg,) for pkg in PACKAGE_UNITS), SPARK_DRIVER_UNIT)


def _work_unit(nodeid: str) -> str:
    """The scope a worker is handed: the first member of the unit (PACKAGE_UNITS,
    SPARK_DRIVER_UNIT) the test's file belongs to, else its file."""
    path = nodeid.split("::", 1)[0]
    return next((unit[0] for unit in _UNITS if any(path.startswith(m) for m in unit)), path)


@functools.cache
def _file_minutes(rootdir: str, scope: str) -> int:
    """A unit's `minutes(n)` marks, read from its source (the controller collects nothing): a
    file's mark, or the sum of its unit's files' marks."""
    members = next((unit for unit in _UNITS if unit[0] == scope), (scope,))
    files = []
    for member in members:
        root = Path(rootdir) / member
        files += sorted(root.rglob("test_*.py")) if member.endswith("/") else [root]
    total = 0
    for f in files:
        try:
            m = _MINUTES.search(f.read_text())
        except OSError:
            continue
        total += int(m[1]) if m else 0
    return total


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist", None) != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    rootdir = str(config.rootpath)

    class LongestFileFirst(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # Ties (0 for every unmarked file) keep collection order: max() returns the first.
            longest = max(self.workqueue, key=lambda scope: _file_minutes(rootdir, scope))
            self.workqueue.move_to_end(longest, last=False)
            super()._assign_work_unit(node)

    return LongestFileFirst(config, log)


# TEST_CPU_LOG=FILE appends one JSON line per test (setup, call and teardown together, so a
# fixture's start is counted in the first test using it; not a LINKWATCH_ name: the config
# loader reads those as settings, and five config tests failed under it): its wall time and the whole
# machine's busy CPU seconds meanwhile (from /proc/stat, so the brokers, Spark and processes the
# test drives are counted, which the test process's own times would miss). Meaningful on an
# otherwise quiet machine with one worker; it is how the suite's CPU is attributed to tests.
_CPU_LOG = os.environ.get("TEST_CPU_LOG")


def _busy_cpu_s() -> float:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not _CPU_LOG:
        yield
        return
    wall, cpu = time.monotonic(), _busy_cpu_s()
    yield
    with open(_CPU_LOG, "a") as f:
        f.write(
            json.dumps(
                {
                    "test": item.nodeid,
                    "wall_s": time.monotonic() - wall,
                    "cpu_s": _busy_cpu_s() - cpu,
                    # With workers: which one, and when the test ended (to draw their timelines).
                    "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
                    "end_s": time.time(),
                }
            )
            + "\n"
        )


@pytest.fixture(scope="session")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    """A running 3-broker cluster (racks a/b/c, two log dirs each, request log at DEBUG)."""
    root = tmp_path_factory.mktemp("cluster3") / "kafka"
    spec = ClusterSpec(brokers=3, root=root, base_port=find_free_base_port(3, start=_start_port()))
    cluster = LocalCluster(spec)
    state = cluster.up()
    try:
        yield state
    finally:
        faults.revert_all()
        cluster.down()


def _start_port() -> int:
    # Different sessions (e.g. parallel worktrees) start their search at different places.
    return 20000 + (os.getpid() % 300) * 100


@pytest.fixture(autouse=True)
def _revert_faults() -> Iterator[None]:
    yield
    faults.revert_all()


@pytest.fixture
def admin(cluster3: ClusterState):
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster3.bootstrap, client_id="linkwatch-tests")
    yield client
    client.close()


@pytest.fixture
def topic_name() -> str:
    """A fresh topic name per test (topics are never shared between tests)."""
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on for the test: a server asked for it must fail."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]
