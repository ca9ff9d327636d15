"""JMX from real brokers: Jolokia bulk reads, the Prometheus JMX exporter, and a source that is down."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from agent.health import Health
from agent.jmx.collector import (
    JMX_STAGES,
    START_TIME,
    ExporterReader,
    JmxCollector,
    JolokiaReader,
    stage_mbean,
)
from agent.requestlog.follow import FileFollower
from agent.requestlog.parse import LineParser
from linkwatch.records import PRODUCE, STAGES, BrokerGauges
from testbed.cluster import ClusterState
from tests.agent.conftest import Monitoring, free_port
from tests.agent.traffic import create_topic

STAGE_INDEX = {stage: i for i, stage in enumerate(STAGES)}


def produce(bootstrap: str, topic: str, n: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=1)
    for i in range(n):
        producer.send(topic, value=b"x" * 100)
        if i % 20 == 0:
            time.sleep(0.02)
    producer.flush()
    producer.close()


def test_jolokia_window_means_agree_with_the_request_log(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    create_topic(admin, topic_name)
    health = Health()
    collectors = {
        n.node_id: JmxCollector(JolokiaReader(n.jolokia_url), cluster="t", broker=n.node_id, health=health)
        for n in cluster3.nodes
    }
    followers = {n.node_id: FileFollower(n.request_log) for n in cluster3.nodes}
    asked_ms = time.time() * 1000
    for c in collectors.values():
        assert isinstance(c.collect(0)[0], BrokerGauges)  # first reading opens the window
    produce(cluster3.bootstrap, topic_name, 600)
    time.sleep(1.5)
    parser = LineParser()
    for broker, c in collectors.items():
        values = c.collect(10_000)[0].values
        produce_lines = [
            r for r in map(parser.parse, followers[broker].read_lines(1 << 30)) if r.request == PRODUCE
        ]
        assert produce_lines, f"broker {broker} saw no Produce"
        assert values[f"TotalTimeMs.{PRODUCE}.count"] == len(produce_lines)
        for jmx_name, stage in JMX_STAGES.items():
            log_mean = sum(r.stages[STAGE_INDEX[stage]] for r in produce_lines) / len(produce_lines)
            jmx_mean = values[f"{jmx_name}.{PRODUCE}.mean"]
            # Kafka feeds its histograms Math.round(stage ms): at most 0.5 ms per request apart.
            assert abs(jmx_mean - log_mean) <= 0.5 + 1e-6, (broker, stage, jmx_mean, log_mean)
        assert 0.0 <= values["RequestHandlerAvgIdlePercent"] <= 1.0
        assert values["PartitionCount"] >= 3
        # The JVM's start: before this test asked, and at most an hour before (a session's cluster).
        assert asked_ms - 3_600_000 < values[START_TIME] < asked_ms, values[START_TIME]
    assert not health.dropped


def test_jmx_exporter_endpoint_gives_the_same_windows_as_jolokia(
    monitoring: Monitoring, topic_name: str
) -> None:
    if monitoring.exporter_url is None:
        pytest.skip("the Prometheus JMX exporter agent could not be fetched from Maven Central")
    node = monitoring.state.nodes[0]
    health = Health()
    jolokia = JmxCollector(JolokiaReader(node.jolokia_url), cluster="m", broker=1, health=health)
    exporter = JmxCollector(
        ExporterReader(monitoring.exporter_url, timeout_s=60), cluster="m", broker=1, health=health
    )
    snap = exporter.reader.read()
    assert (stage_mbean("TotalTimeMs", PRODUCE), "Mean") in snap
    admin = KafkaAdminClient(bootstrap_servers=monitoring.state.bootstrap)
    try:
        create_topic(admin, topic_name, partitions=3, rf=1)  # the cluster creates none on use
    finally:
        admin.close()
    jolokia.collect(0)
    exporter.collect(0)
    produce(monitoring.state.bootstrap, topic_name, 200)
    time.sleep(1.5)
    a = jolokia.collect(10_000)[0].values
    b = exporter.collect(10_000)[0].values
    assert a[f"TotalTimeMs.{PRODUCE}.count"] >= 1
    for name in JMX_STAGES:
        key = f"{name}.{PRODUCE}.mean"
        assert b[key] == pytest.approx(a[key], rel=1e-9, abs=1e-9), key
    assert b["LeaderCount"] == a["LeaderCount"]
    assert b[START_TIME] == a[START_TIME] > 0
    assert not health.dropped


class _Garbage(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<html>not jolokia</html>")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def garbage_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/jolokia"
    server.shutdown()
    server.server_close()


def test_jolokia_down_or_garbage_is_counted_and_collection_goes_on(
    cluster3: ClusterState, garbage_server: str
) -> None:
    health = Health()
    node = cluster3.nodes[0]
    nothing = f"http://127.0.0.1:{free_port()}/jolokia"
    c = JmxCollector(JolokiaReader(nothing, timeout_s=2), cluster="t", broker=1, health=health)
    assert c.collect(0) == []
    assert health.source_up == {"jolokia": False}
    c.reader = JolokiaReader(garbage_server)
    assert c.collect(1) == []
    assert health.dropped == {"jmx_read_failed": 2}
    c.reader = JolokiaReader(node.jolokia_url)
    assert isinstance(c.collect(2)[0], BrokerGauges)
    assert health.source_up == {"jolokia": True}
