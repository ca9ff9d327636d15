"""Config validated at load (one table of bad inputs), the command, and the demo thread."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from kafka import TopicPartition

from cli.main import main
from lag.runner import LagConfig, start_in_thread
from linkwatch.config import load_config
from linkwatch.errors import ConfigError
from tests.lag.lagkit import commit, make_topic

SAMPLE = Path(__file__).resolve().parents[2] / "config" / "lag.sample.yaml"

BAD = [
    ("cluster: x\n", "bootstrap_servers: required"),
    ("bootstrap_servers: b\ncollector:\n  window_s: 0\n", "collector.window_s=0"),
    ("bootstrap_servers: b\ncollector:\n  include: ['(']\n", "not a valid regular expression"),
    ("bootstrap_servers: b\ncollector:\n  min_evaluations: 1\n", "collector.min_evaluations=1"),
    ("bootstrap_servers: b\ncolector: {}\n", "colector: unknown key"),
    ("bootstrap_servers: b\ncold_read:\n  windows_from: jmx\n", "cold_read.windows_from='jmx'"),
    ("bootstrap_servers: b\ncold_read:\n  confirm: ssh\n", "cold_read.confirm='ssh'"),
    (
        "bootstrap_servers: b\ncold_read:\n  agent_urls: {1: 'broker-1:9108'}\n",
        "broker 1: 'broker-1:9108' is not",
    ),
    ("bootstrap_servers: b\ncold_read:\n  agent_urls: {1: 'ftp://h:1'}\n", "is not an http(s)://host:port"),
    (
        "bootstrap_servers: b\ncold_read:\n  agent_urls: {1: 'http://h:1/?a=b'}\n",
        "is not an http(s)://host:port",
    ),
    ("bootstrap_servers: b\ncold_read:\n  agent_urls: {x: 'http://h:1'}\n", "cold_read.agent_urls.x"),
    ("bootstrap_servers: b\ncold_read:\n  agent_timeout_s: 0\n", "cold_read.agent_timeout_s=0"),
    ("bootstrap_servers: b\nha:\n  session_timeout_ms: 100\n", "ha.session_timeout_ms=100"),
    ("bootstrap_servers: b\nrack:\n  racks: {x: a}\n", "rack.racks.x"),
    ("- just\n- a list\n", "top level must be a mapping"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[b[1] for b in BAD])
def test_bad_config_names_key_value_and_why(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "lag.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path, LagConfig, env_prefix="LINKWATCH_LAG_")
    assert message in str(e.value)


def test_sample_config_is_valid_and_shows_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LINKWATCH_LAG_COLLECTOR__WINDOW_S", "120")
    cfg = load_config(SAMPLE, LagConfig, env_prefix="LINKWATCH_LAG_")
    # The sample names the cluster every sample shares (tests/test_samples.py), not the default.
    defaults = LagConfig(
        kafka={"bootstrap_servers": "127.0.0.1:9092"}, instance=cfg.instance, cluster=cfg.cluster
    )
    assert cfg.collector.window_s == 120
    assert cfg.model_copy(update={"collector": defaults.collector}) == defaults


@pytest.mark.cluster
def test_lag_once_prints_statuses(
    cluster3, admin, topic_name, producer, group_name, tmp_path, capsys
) -> None:
    make_topic(admin, topic_name)
    for _ in range(10):
        producer.send(topic_name, b"v", partition=0)
    producer.flush()
    commit(admin, group_name, {TopicPartition(topic_name, 0): 4})
    cfg = tmp_path / "lag.yaml"
    cfg.write_text(
        f"bootstrap_servers: '{cluster3.bootstrap}'\ncollector:\n  include: ['^{group_name}$']\n"
        "cold_read:\n  windows_from: static\n"
    )
    assert main(["lag", "once", "-c", str(cfg), "--passes", "2", "--every-s", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.count("-- pass") == 2
    assert f"{group_name}" in out and "lag max 6 sum 6" in out


@pytest.mark.cluster
def test_demo_thread_prints_statuses_and_stops(cluster3, admin, topic_name, producer, group_name) -> None:
    make_topic(admin, topic_name)
    producer.send(topic_name, b"v", partition=0)
    producer.flush()
    commit(admin, group_name, {TopicPartition(topic_name, 0): 1})
    lines: list[str] = []
    cfg = LagConfig.model_validate(
        {
            "bootstrap_servers": cluster3.bootstrap,
            "interval_s": 0.3,
            "collector": {"include": [f"^{group_name}$"]},
            "metrics": {"enabled": False},
            "publish": {"samples": False, "findings": False},
            "cold_read": {"windows_from": "static"},
        }
    )
    thread, stop, service = start_in_thread(cfg, printer=lines.append)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and len(lines) < 2:
        time.sleep(0.1)
    stop.set()
    thread.join(timeout=15)
    assert not thread.is_alive()
    assert any(line.startswith(group_name) and "all 1 partitions OK" in line for line in lines), lines
    assert service.last is not None and service.last.groups[group_name].lag_max == 0


@pytest.mark.cluster
def test_demo_component_shows_group_statuses(cluster3, admin, topic_name, producer, group_name) -> None:
    from testbed.demo.lag import LagComponent

    make_topic(admin, topic_name)
    producer.send(topic_name, b"v", partition=0)
    producer.flush()
    commit(admin, group_name, {TopicPartition(topic_name, 0): 0})
    comp = LagComponent(interval_s=0.5, publish=False)
    try:
        assert comp.lines() == ["lag: waiting for the first pass"]
        comp.start(cluster3)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(line.startswith(group_name) for line in comp.lines()):
            time.sleep(0.2)
        lines = comp.lines()
    finally:
        comp.stop()
        comp.stop()  # safe twice
    assert lines[0].startswith("lag (pass")
    assert any(line.startswith(group_name) and "lag max 1 sum 1" in line for line in lines), lines


def test_a_cluster_lost_while_running_is_said_once_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """Passes that cannot reach the cluster (the client's bootstrap error, or no group listed)
    are said once and counted; the pass after the cluster is back says so once."""
    import threading
    from types import SimpleNamespace

    from kafka.errors import KafkaTimeoutError
    from prometheus_client import CollectorRegistry

    from lag.collector import PassResult
    from lag.runner import LagService
    from linkwatch.reach import KafkaReach

    outcomes = [
        KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1"),
        PassResult(ts_s=0.0, errors=["cannot list groups: KafkaTimeoutError: timed out"]),
        KafkaTimeoutError("Unable to bootstrap from 127.0.0.1:1"),
        PassResult(ts_s=0.0),
        PassResult(ts_s=0.0),
    ]
    stop = threading.Event()

    def step() -> tuple[PassResult, list]:
        got = outcomes.pop(0)
        if not outcomes:
            stop.set()
        if isinstance(got, Exception):
            raise got
        return got, []

    registry = CollectorRegistry()
    reach = KafkaReach("lag", registry)
    service = SimpleNamespace(step=step, config=LagConfig(bootstrap_servers="127.0.0.1:1", interval_s=0.01))
    with caplog.at_level(logging.INFO):
        LagService.run(service, stop, None, reach)  # type: ignore[arg-type]
    assert registry.get_sample_value("linkwatch_kafka_unreachable_total", {"process": "lag"}) == 3
    assert registry.get_sample_value("linkwatch_kafka_up", {"process": "lag"}) == 1
    lines = [r.getMessage() for r in caplog.records if r.name.startswith(("linkwatch", "lag"))]
    assert sum("cannot reach Kafka" in line for line in lines) == 1
    assert sum("answers again" in line for line in lines) == 1
    assert not [r for r in caplog.records if r.exc_info], "no traceback for an unreachable cluster"
