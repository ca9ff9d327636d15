"""Capture policy: the slow-only regex accepts exactly the slow lines; BROKER_LOGGER windows switch
a real broker's request log off and on without a restart."""

from __future__ import annotations

import re
import time

import pytest
from kafka import KafkaProducer

from agent.capture import BrokerLoggerSwitch, at_least_regex, slow_only_filter_yaml, slow_only_regex
from agent.requestlog.follow import FileFollower
from linkwatch.errors import SetupError
from testbed.cluster import ClusterState
from tests.agent.traffic import create_topic


@pytest.mark.parametrize("n", [0, 1, 9, 10, 99, 100, 250, 300, 301, 999, 1000, 1234])
def test_at_least_regex_is_exact(n: int) -> None:
    pattern = re.compile(f"(?:{at_least_regex(n)})")
    for v in range(0, 5000):
        assert bool(pattern.fullmatch(str(v))) == (v >= n), (n, v)


LINE = 'Completed request:{"requestHeader":{"clientId":"totalTimeMs"},"connection":"x","totalTimeMs":%s,"requestQueueTimeMs":0.1}'
CASES = [
    ("fast", "2.345", False),
    ("just under", "299.999", False),
    ("at threshold", "300.0", True),
    ("slow", "722.024", True),
    ("very slow", "31000.5", True),
    ("integer value", "300", True),
    ("decoy in client id only", "1.0", False),
]


@pytest.mark.parametrize(("name", "total", "accepted"), CASES, ids=[c[0] for c in CASES])
def test_slow_only_regex_on_request_lines(name: str, total: str, accepted: bool) -> None:
    assert bool(re.fullmatch(slow_only_regex(300), LINE % total)) == accepted


def test_filter_yaml_is_an_appender_property() -> None:
    import yaml

    block = slow_only_filter_yaml(300)
    parsed = yaml.safe_load("appender:\n" + block)
    assert parsed["appender"]["RegexFilter"]["onMismatch"] == "DENY"
    assert re.fullmatch(parsed["appender"]["RegexFilter"]["regex"], LINE % "300.5")


def test_capture_window_needs_explicit_brokers(admin) -> None:
    with pytest.raises(SetupError):
        BrokerLoggerSwitch(admin, [])


def _produce(bootstrap: str, topic: str, n: int = 30) -> None:
    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1)
    for _ in range(n):
        p.send(topic, value=b"x").get(timeout=10)
    p.close()


def _produce_lines(follower: FileFollower) -> int:
    time.sleep(1.0)
    return sum(1 for line in follower.read_lines(1 << 30) if b'"PRODUCE"' in line)


def test_broker_logger_window_switches_capture_off_and_on(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    (leader,) = create_topic(admin, topic_name, partitions=1, rf=1)
    follower = FileFollower(cluster3.node(leader).request_log)
    switch = BrokerLoggerSwitch(admin, [leader], idle_level="WARN")
    try:
        switch.set_level("WARN")
        time.sleep(1.0)
        follower.read_lines(1 << 30)
        _produce(cluster3.bootstrap, topic_name)
        assert _produce_lines(follower) == 0
        with switch.window(level="DEBUG"):
            _produce(cluster3.bootstrap, topic_name)
            assert _produce_lines(follower) == 30
        _produce(cluster3.bootstrap, topic_name)
        assert _produce_lines(follower) == 0
        dry = BrokerLoggerSwitch(admin, [leader], dry_run=True)
        dry.set_level("DEBUG")
        _produce(cluster3.bootstrap, topic_name)
        assert _produce_lines(follower) == 0
    finally:
        switch.set_level("DEBUG")  # the session cluster's normal state
