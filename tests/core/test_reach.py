"""Reaching a Kafka cluster: the cause of a failure in words, on real loopback sockets (a closed
port, a port that accepts and says nothing), the back-off, and the once-only log and metrics of a
long-running process."""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from linkwatch.errors import UnreachableError
from linkwatch.reach import Backoff, KafkaReach, check_bootstrap, connect, split_address, tcp_problem


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers (not Kafka, or TLS)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(server.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield server.getsockname()[1]
    done.set()
    t.join()
    for c in held:
        c.close()
    server.close()


ADDRESSES = [
    # (address, (host, port)) — IPv6 in brackets, no port means 9092
    ("127.0.0.1:9093", ("127.0.0.1", 9093)),
    ("kafka-1", ("kafka-1", 9092)),
    ("[::1]:9094", ("::1", 9094)),
]


@pytest.mark.parametrize(("address", "expected"), ADDRESSES)
def test_split_address(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected


def test_causes_in_words() -> None:
    assert "nothing listens" in (tcp_problem(f"127.0.0.1:{closed_port()}") or "")
    assert "does not resolve" in (tcp_problem("no-such-host.invalid:9092") or "")
    assert "not a port" in (tcp_problem("127.0.0.1:http") or "")


def test_a_closed_port_is_one_line_naming_key_address_and_cause_at_once() -> None:
    port = closed_port()
    started = time.monotonic()
    with pytest.raises(UnreachableError) as e:
        check_bootstrap(f"127.0.0.1:{port}", key="kafka.bootstrap_servers")
    assert time.monotonic() - started < 2
    msg = str(e.value)
    assert msg == (
        f"cannot reach Kafka at kafka.bootstrap_servers 127.0.0.1:{port}: connection refused: "
        "nothing listens on that port (a wrong port, or the broker is down)"
    )


def test_several_addresses_each_say_their_own_cause() -> None:
    port = closed_port()
    with pytest.raises(UnreachableError) as e:
        check_bootstrap(f"127.0.0.1:{port}, no-such-host.invalid:9092")
    msg = str(e.value)
    assert f"127.0.0.1:{port}: connection refused" in msg
    assert "no-such-host.invalid:9092: the host name does not resolve" in msg
    assert "\n" not in msg


def test_a_port_that_accepts_but_is_not_kafka_fails_within_the_budget(silent_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(UnreachableError) as e:
        check_bootstrap(f"127.0.0.1:{silent_port}", budget_s=2.0)
    assert time.monotonic() - started < 5
    assert "no Kafka answered" in str(e.value) and "TLS or SASL" in str(e.value)


def test_backoff_doubles_to_its_bound_with_jitter() -> None:
    b = Backoff(first_s=1.0, max_s=8.0, rng=random.Random(7))
    delays = [b.next_s() for _ in range(40)]
    assert all(4.0 <= d <= 8.0 for d in delays[3:])
    assert 0.5 <= delays[0] <= 1.0 and 1.0 <= delays[1] <= 2.0 and 2.0 <= delays[2] <= 4.0
    assert len(set(delays)) == len(delays)  # jittered: no two processes knock in step
    b.reset()
    assert b.next_s() <= 1.0
    big = Backoff(first_s=1.0, max_s=60.0)
    big.attempts = 10_000
    assert big.next_s() <= 60.0  # no overflow after a long outage


def test_a_long_running_process_says_it_once_counts_every_attempt_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    reach = KafkaReach("lag", registry)
    stop = threading.Event()
    attempts = []

    def build() -> str:
        attempts.append(1)
        return "built"

    port = closed_port()
    timer = threading.Timer(1.5, stop.set)
    timer.start()
    with caplog.at_level(logging.INFO, logger="linkwatch.lag"):
        got = connect(build, f"127.0.0.1:{port}", reach, stop, backoff=Backoff(0.2, 0.4))
        timer.join()
        up_while_failing = registry.get_sample_value("linkwatch_kafka_up", {"process": "lag"})
        reach.reached()
        reach.reached()
    assert got is None and attempts == []  # never built against a cluster that did not answer
    failures = registry.get_sample_value("linkwatch_kafka_unreachable_total", {"process": "lag"})
    assert failures is not None and failures >= 3
    assert up_while_failing == 0
    said = [r for r in caplog.records if "cannot reach Kafka" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]
    assert f"127.0.0.1:{port}" in said[0].getMessage() and "retrying with back-off" in said[0].getMessage()

    assert registry.get_sample_value("linkwatch_kafka_up", {"process": "lag"}) == 1
    assert sum("answers again" in r.getMessage() for r in caplog.records) == 1


def test_a_real_cluster_passes_the_check_quickly(cluster3) -> None:
    """The check a one-shot command runs first costs little on a cluster that answers (a TCP
    connect, a bootstrap, a TCP connect to each advertised broker)."""
    started = time.monotonic()
    check_bootstrap(cluster3.bootstrap)
    assert time.monotonic() - started < 5
    node = cluster3.nodes[0]
    started = time.monotonic()
    with pytest.raises(UnreachableError, match="no Kafka answered"):  # Jolokia's HTTP port
        check_bootstrap(f"127.0.0.1:{node.ports.jolokia}", budget_s=3)
    assert time.monotonic() - started < 6
