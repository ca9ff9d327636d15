"""linkwatch against a secured broker: one broker whose only client listener linkwatch uses is
SASL_SSL (SCRAM-SHA-512, a CA made at test time), reached through the shared ``kafka:`` section
alone — admin, producer and consumer, the lag collector's pass, the probe's window — and a
wrong password that fails with an error naming authentication, quickly."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from lag.runner import LagConfig, LagService
from linkwatch.errors import KafkaConnectError
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from probe.config import ProbeConfig
from probe.service import ProbeService
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port

pytestmark = pytest.mark.cluster

USER, PASSWORD = "lw-monitor", "pw-" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    root = tmp_path_factory.mktemp("secured") / "kafka"
    spec = ClusterSpec(
        brokers=1, root=root, base_port=find_free_base_port(1, start=41000), secured=True,
        scram_users={USER: PASSWORD},
    )  # fmt: skip
    cluster = LocalCluster(spec)
    state = cluster.up()
    try:
        yield state
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def section(secured: ClusterState, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The ``kafka:`` section an operator writes: the password from a file, the test CA."""
    password_file = tmp_path_factory.mktemp("secrets") / "kafka.password"
    password_file.write_text(PASSWORD + "\n")
    return {
        "bootstrap_servers": secured.secure_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": USER,
        "sasl_password_file": str(password_file),
        "ssl_cafile": secured.ca_file,
    }


def _topic(section: dict[str, Any], partitions: int = 1) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(**kafka_python_kwargs(KafkaClientConfig(**section), "test-admin"))
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def _produce(cfg: KafkaClientConfig, topic: str, n: int) -> None:
    producer = KafkaProducer(**kafka_python_kwargs(cfg, "test-producer"), acks="all")
    try:
        for i in range(n):
            producer.send(topic, f"m{i}".encode())
        producer.flush(30)
    finally:
        producer.close()


def test_admin_producer_and_consumer_through_the_shared_section(section: dict[str, Any]) -> None:
    cfg = KafkaClientConfig(**section)
    topic = _topic(section)
    _produce(cfg, topic, 5)
    consumer = KafkaConsumer(
        topic,
        **kafka_python_kwargs(cfg, "test-consumer"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
    )
    try:
        values = [r.value for _, r in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(5)]


def test_the_lag_collectors_pass_sees_a_group_behind(section: dict[str, Any]) -> None:
    cfg = KafkaClientConfig(**section)
    topic, group = _topic(section), f"sec-group-{uuid.uuid4().hex[:6]}"
    _produce(cfg, topic, 10)
    consumer = KafkaConsumer(
        topic, **kafka_python_kwargs(cfg, "test-group"), group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, max_poll_records=4,
    )  # fmt: skip
    try:
        deadline, polled = time.monotonic() + 20, {}
        while not polled and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=500)
        consumer.commit()
    finally:
        consumer.close()
    consumed = sum(len(records) for records in polled.values())
    assert 0 < consumed <= 4
    service = LagService(_lag_config(section, group))
    try:
        result, _ = service.step()
    finally:
        service.close()
    assert result.errors == []
    assert result.groups[group].lag_sum == 10 - consumed


def _lag_config(section: dict[str, Any], group: str) -> LagConfig:
    return LagConfig.model_validate(
        {
            "kafka": section,
            "collector": {"include": [f"^{group}$"]},
            "metrics": {"enabled": False},
            "publish": {"samples": False, "findings": False},
            "cold_read": {"enabled": False},
        }
    )


def test_the_probes_window_measures_the_broker(section: dict[str, Any], secured: ClusterState) -> None:
    cfg = ProbeConfig.model_validate(
        {
            "kafka": section,
            "window_s": 2,
            "interval_ms": 50,
            "publish_samples": False,
            "metrics": {"enabled": False},
            "topic": {"name": f"sec-probe-{uuid.uuid4().hex[:6]}"},
        }
    )
    service = ProbeService(cfg)
    stop, windows = threading.Event(), []

    def on_window(_start: int, ws: dict) -> None:
        windows.append(ws)
        if len(windows) >= 3:  # the first is partial (connection set-up)
            stop.set()

    runner = threading.Thread(target=service.run, args=(stop, on_window), daemon=True)
    runner.start()
    runner.join(40)
    stop.set()
    runner.join(10)
    service.close()
    assert len(windows) >= 3
    assert windows[-1][secured.nodes[0].node_id].ok > 0  # probes produced and read back over SASL_SSL


def test_a_wrong_password_is_one_line_naming_authentication(section: dict[str, Any], tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-" + PASSWORD)
    with pytest.raises(KafkaConnectError) as e:
        LagService(_lag_config({**section, "sasl_password_file": str(wrong)}, "any"))
    message = str(e.value)
    assert message.startswith(
        f"cannot use Kafka at {section['bootstrap_servers']} (SASL_SSL, SCRAM-SHA-512 as {USER}): "
    )
    assert "authentication failed (SaslAuthenticationFailedError" in message
    assert PASSWORD not in message and "\n" not in message
