"""A group on the KIP-848 rebalance protocol (``group.protocol=consumer``, the Java client's
default from Kafka 4.0) is listed and judged exactly like a classic group beside it: lag, with
members and without, and STOP once its consumer has left while producers go on.

The consumers are the real Java client (``java/GroupConsumer.java``, compiled here against the
``kafka-clients`` jar of the testbed's Kafka): kafka-python speaks only the classic protocol.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition

from lag.collector import GroupLag, LagCollector
from lag.rules import Status
from testbed import jars
from testbed.cluster import ClusterState
from tests.lag.lagkit import end_offsets, make_topic

pytestmark = pytest.mark.cluster

SOURCE = Path(__file__).with_name("java") / "GroupConsumer.java"
WINDOW_S = 3.0
FIRST = 40  # records there before the consumers start; each group commits them all


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("javac (a JDK) is needed for the Java consumer")
    out = tmp_path_factory.mktemp("java-classes")
    lib = jars.resolve().classpath
    subprocess.run([javac, "-d", str(out), "-cp", lib, str(SOURCE)], check=True, timeout=120)
    return f"{lib}{os.pathsep}{out}"


class JavaConsumer:
    """One ``GroupConsumer`` process; its stdout lines are queued as they come."""

    def __init__(self, classpath: str, bootstrap: str, topic: str, group: str, protocol: str) -> None:
        cmd = ["java", "-Xmx128m", "-cp", classpath, "GroupConsumer", bootstrap, topic, group, protocol]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.strip())

    def wait_for(self, line: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        seen: list[str] = []
        while time.monotonic() < deadline:
            try:
                got = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            seen.append(got)
            if got == line:
                return
        raise AssertionError(f"no {line!r} within {timeout_s}s (exit {self.proc.poll()}), saw {seen[-5:]}")

    def leave(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        self.wait_for("closed", 20)
        self.proc.wait(10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def consumers(java_classpath: str, cluster3: ClusterState) -> Iterator:
    started: list[JavaConsumer] = []

    def start(topic: str, group: str, protocol: str) -> JavaConsumer:
        c = JavaConsumer(java_classpath, cluster3.bootstrap, topic, group, protocol)
        started.append(c)
        return c

    yield start
    for c in started:
        c.kill()


def last_pass(collector: LagCollector, groups: list[str]) -> dict[str, GroupLag]:
    r = collector.run_pass()
    assert not r.errors, r.errors
    assert set(groups) <= set(r.groups), (groups, list(r.groups), r.errors)
    return {g: r.groups[g] for g in groups}


def test_kip848_group_is_judged_like_a_classic_one(
    cluster3: ClusterState, admin: KafkaAdminClient, producer: KafkaProducer, consumers, make_collector
) -> None:
    topic = make_topic(admin, f"kip848-{os.getpid()}-{time.monotonic_ns() % 10**6}")
    tp = TopicPartition(topic, 0)
    for _ in range(FIRST):
        producer.send(topic, b"v", partition=0)
    producer.flush()
    groups = {"consumer": f"{topic}-new", "classic": f"{topic}-classic"}
    running = {proto: consumers(topic, g, proto) for proto, g in groups.items()}
    for c in running.values():
        c.wait_for(f"committed 0 {FIRST}", 45)

    # The broker lists each group with the protocol it runs.
    types = {g["group_id"]: g.get("group_type") for g in admin.list_groups()}
    assert {types[g] for g in groups.values()} == {"consumer", "classic"}, types

    collector = make_collector(list(groups.values()), window_s=WINDOW_S, min_evaluations=2)
    with_members = last_pass(collector, list(groups.values()))
    for g in with_members.values():
        assert g.members_active, (g.group, g.state)
        assert (g.lag_max, g.lag_sum) == (0, 0)
        assert g.verdict.status is Status.OK, g.verdict.reason

    for c in running.values():
        c.leave()
    # Producers go on; nobody consumes: both groups are STOP (no member) after the window.
    seen: dict[str, list[GroupLag]] = {g: [] for g in groups.values()}
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        producer.send(topic, b"v", partition=0)
        producer.flush()
        got = last_pass(collector, list(groups.values()))
        for g, lag in got.items():
            seen[g].append(lag)
        if all(lag.verdict.status is Status.STOP for lag in got.values()):
            break
        time.sleep(0.5)
    end = end_offsets(admin, [tp])[tp]
    for g, history in seen.items():
        last = history[-1]
        assert last.verdict.status is Status.STOP, [h.verdict.reason for h in history]
        assert "no member" in last.verdict.reason, last.verdict.reason
        assert not last.members_active, last.state
        # Exactly the records produced since it committed FIRST (a pass reads the end offset
        # after the commit; nothing was produced between that pass and `end`).
        assert last.lag_max == end - FIRST, (g, last.lag_max, end)
    # Both protocols gave the same verdicts at every pass.
    a, b = seen.values()
    assert [h.verdict.status for h in a] == [h.verdict.status for h in b]
