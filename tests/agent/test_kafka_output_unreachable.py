"""The agent's Kafka output with a cluster that does not answer (a closed loopback port): the
records wait in the spool, the source is down with one line naming the key and the address,
said once, within seconds (not a client bootstrap timeout)."""

from __future__ import annotations

import logging
import socket
import time
from pathlib import Path

import pytest

from agent.config import KafkaOutputConfig
from agent.health import Health
from agent.output.kafka import KafkaSink
from linkwatch.records import BrokerGauges


def test_records_wait_in_the_spool_and_the_cause_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = KafkaOutputConfig(
        enabled=True,
        bootstrap_servers=f"127.0.0.1:{port}",
        spool_dir=tmp_path / "spool",
        retry_backoff_s=0.2,
    )
    health = Health()
    records = [
        BrokerGauges(cluster="t", source="test", ts_ms=1_000 * i, broker=1, window_s=1, values={"x": i})
        for i in range(3)
    ]
    with caplog.at_level(logging.INFO, logger="linkwatch.agent"):
        sink = KafkaSink(config, health).start()
        try:
            sink.submit(records)
            started = time.monotonic()
            while KafkaSink.SOURCE not in health.source_up and time.monotonic() - started < 10:
                time.sleep(0.05)
            assert time.monotonic() - started < 5
            time.sleep(1.0)  # a few more attempts
        finally:
            sink.stop(drain_s=0.1)
    assert health.source_up[KafkaSink.SOURCE] is False
    assert len(sink.spool) == 3
    detail = health.source_detail[KafkaSink.SOURCE]
    assert f"kafka.bootstrap_servers 127.0.0.1:{port}: connection refused" in detail
    said = [r.getMessage() for r in caplog.records if f"127.0.0.1:{port}" in r.getMessage()]
    assert len(said) == 1, said
