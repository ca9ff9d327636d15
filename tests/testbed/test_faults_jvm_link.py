"""The safepoint storm on a real broker JVM (its garbage collections counted through its own
Jolokia), and the congested link on a real TCP stream over loopback (its throughput capped while
the fault holds, back after, the device's queueing as it was)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from linkwatch.errors import SetupError
from testbed import faults
from testbed.cluster import ClusterState
from testbed.faults.link import _tc


def _gc_count(jolokia_url: str) -> int:
    body = json.dumps(
        {"type": "read", "mbean": "java.lang:type=GarbageCollector,name=*", "attribute": "CollectionCount"}
    )
    req = urllib.request.Request(jolokia_url, body.encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        values = json.loads(resp.read())["value"]
    return sum(v["CollectionCount"] for v in values.values())


@pytest.mark.cluster
def test_a_safepoint_storm_forces_collections_on_that_jvm_and_stops(cluster3: ClusterState) -> None:
    node = cluster3.nodes[2]
    before = _gc_count(node.jolokia_url)
    with faults.SafepointStorm(node.jolokia_url, how="full_gc", gap_s=0.2) as storm:
        time.sleep(3)
    assert storm.done >= 3 and storm.failed == 0 and storm.stopped_s > 0
    assert _gc_count(node.jolokia_url) - before >= storm.done
    settled = storm.done
    time.sleep(1)
    assert storm.done == settled and not faults.ACTIVE


@pytest.mark.cluster
def test_a_heap_dump_storm_leaves_no_dump_behind(cluster3: ClusterState) -> None:
    with faults.SafepointStorm(cluster3.nodes[1].jolokia_url, how="heap_dump", gap_s=0.5) as storm:
        time.sleep(2)
    assert storm.done >= 1 and storm.failed == 0
    assert not [p for p in faults.safepoints.SCRATCH.glob("linkwatch-safepoint-*")]


@pytest.fixture
def stream() -> Iterator[tuple[int, list[int]]]:
    """A TCP server on loopback that counts what it reads, and a client writing as fast as it can."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    got = [0]
    stop = threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        conn.settimeout(0.5)
        while not stop.is_set():
            try:
                data = conn.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return
            got[0] += len(data)
        conn.close()

    def send() -> None:
        client = socket.create_connection(("127.0.0.1", port))
        chunk = b"x" * 16384
        with contextlib.suppress(OSError):  # the server closed first
            while not stop.is_set():
                client.sendall(chunk)
        client.close()

    threads = [threading.Thread(target=serve, daemon=True), threading.Thread(target=send, daemon=True)]
    for t in threads:
        t.start()
    yield port, got
    stop.set()
    for t in threads:
        t.join(5)
    server.close()


def _rate_kbit(got: list[int], seconds: float) -> float:
    start = got[0]
    time.sleep(seconds)
    return (got[0] - start) * 8 / 1000 / seconds


@pytest.mark.skipif(os.geteuid() != 0, reason="tc needs root")
def test_a_congested_link_caps_that_ports_traffic_and_is_removed(stream: tuple[int, list[int]]) -> None:
    port, got = stream
    free = _rate_kbit(got, 1.0)
    with faults.CongestedLink(port, rate_kbit=4000) as link:
        time.sleep(0.5)  # what was queued before drains
        capped = _rate_kbit(got, 2.0)
        assert link.cap_kbit == 4000
    # Packets queued at the cap are dropped with it: TCP retransmits after its timeout, then runs free.
    deadline = time.monotonic() + 10
    while (after := _rate_kbit(got, 1.0)) <= 20 * capped and time.monotonic() < deadline:
        pass
    assert capped <= 4000 * 1.3, (free, capped)
    assert free > 20 * capped and after > 20 * capped, (free, capped, after)
    assert "htb" not in _tc("qdisc", "show", "dev", "lo") and not faults.ACTIVE


@pytest.mark.skipif(os.geteuid() != 0, reason="tc needs root")
def test_a_congested_link_measures_the_ports_own_rate_for_its_share(stream: tuple[int, list[int]]) -> None:
    port, _ = stream
    with faults.CongestedLink(port, share=0.5, measure_s=1.0) as link:
        assert link.measured_kbit > 0 and link.cap_kbit == max(8, int(link.measured_kbit * 0.5))


@pytest.mark.skipif(os.geteuid() != 0, reason="tc needs root")
def test_someone_elses_root_qdisc_is_left_alone() -> None:
    _tc("qdisc", "add", "dev", "lo", "root", "handle", "9:", "htb")
    try:
        with pytest.raises(SetupError, match="already has a root qdisc"):
            faults.CongestedLink(1, rate_kbit=100).start()
        assert "htb 9:" in _tc("qdisc", "show", "dev", "lo")
    finally:
        _tc("qdisc", "del", "dev", "lo", "root", check=False)
