"""The local cluster is real: traffic flows across 3 brokers, the request log and Jolokia report it."""

from __future__ import annotations

import json
import time
import urllib.request

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer

from testbed.cluster import PROPERTIES_ENV, ClusterState, env_properties
from testbed.faults.configs import broker_config
from testbed.load import brokers_leading, ensure_topic, partition_leaders
from tests.waiting import wait_until

MARKER = "Completed request:"


def _produce_and_consume(cluster: ClusterState, admin, topic: str, n: int = 600) -> list[tuple[int, bytes]]:
    ensure_topic(admin, topic, partitions=6, replication=3)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", client_id="test-producer")
    for i in range(n):
        producer.send(topic, key=f"k{i % 50}".encode(), value=f"v{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=cluster.bootstrap,
        group_id=f"g-{topic}",
        auto_offset_reset="earliest",
        client_id="test-consumer",
    )
    got: list[tuple[int, bytes]] = []
    try:
        # Until the n records are in (not until a long silence after them), then one more poll:
        # a record delivered twice would come right behind.
        deadline = time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            got += _records(consumer.poll(timeout_ms=500))
        got += _records(consumer.poll(timeout_ms=2000))
    finally:
        consumer.close()
    return got


def _records(polled: dict) -> list[tuple[int, bytes]]:
    return [(r.partition, r.value) for records in polled.values() for r in records]


def test_produce_consume_across_three_brokers(cluster3: ClusterState, admin, topic_name: str) -> None:
    got = _produce_and_consume(cluster3, admin, topic_name)
    assert sorted(v for _, v in got) == sorted(f"v{i}".encode() for i in range(600))
    leaders = partition_leaders(admin, topic_name)
    assert set(leaders.values()) == {1, 2, 3}, f"leaders not spread over the brokers: {leaders}"
    assert {p for p, _ in got} == set(range(6))


def _request_lines(cluster: ClusterState, since: float = 0.0) -> dict[int, list[dict]]:
    """Each broker's logged requests: its request log, and the files it rolled over into since
    ``since`` (log4j rolls it at 100 MB; on the session's cluster late in a full run that
    happens mid-test, and the current file then holds only the requests after the roll)."""
    out: dict[int, list[dict]] = {}
    for node in cluster.nodes:
        rolled = [
            p
            for p in node.request_log.parent.glob(node.request_log.name + ".*")
            if p.suffix[1:].isdigit() and p.stat().st_mtime >= since
        ]
        lines = [line for p in (*rolled, node.request_log) for line in p.read_bytes().splitlines()]
        out[node.node_id] = [
            orjson.loads(line.split(MARKER.encode(), 1)[1].rsplit(b" (", 1)[0])
            for line in lines
            if MARKER.encode() in line
        ]
    return out


def _kind(req: dict) -> str:
    name = req["requestHeader"]["requestApiKeyName"]
    if name != "FETCH":
        return name
    body = req["request"]
    if not isinstance(body, dict):  # the broker logs "" when it cannot render a request body
        return "FETCH_UNRENDERED"
    return "FETCH_FOLLOWER" if body.get("replicaId", -1) >= 0 or "replicaState" in body else "FETCH_CONSUMER"


def test_request_log_has_produce_consumer_and_follower_fetch(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    started = time.time() - 1.0  # file times have coarser steps than the clock
    _produce_and_consume(cluster3, admin, topic_name, n=300)
    by_broker = _request_lines(cluster3, since=started)
    kinds_all = set()
    for broker, reqs in by_broker.items():
        kinds = {_kind(r) for r in reqs}
        kinds_all |= kinds
        assert "PRODUCE" in kinds, f"broker {broker} logged no Produce"
        assert "FETCH_FOLLOWER" in kinds, f"broker {broker} logged no follower Fetch"
        for r in reqs[:200]:
            for stage in (
                "totalTimeMs",
                "requestQueueTimeMs",
                "localTimeMs",
                "remoteTimeMs",
                "responseQueueTimeMs",
                "sendTimeMs",
            ):
                assert isinstance(r[stage], int | float) and r[stage] >= 0
    assert "FETCH_CONSUMER" in kinds_all
    # Our own produce requests are there, with the topic name and a records size.
    produced = [
        td
        for reqs in by_broker.values()
        for r in reqs
        if _kind(r) == "PRODUCE" and isinstance(r["request"], dict)
        for td in r["request"]["topicData"]
        if td.get("name") == topic_name
    ]
    assert produced and all(pd["recordsSizeInBytes"] > 0 for td in produced for pd in td["partitionData"])


def test_jolokia_answers_request_metrics(cluster3: ClusterState, admin, topic_name: str) -> None:
    _produce_and_consume(cluster3, admin, topic_name, n=100)
    for node in cluster3.nodes:
        url = f"{node.jolokia_url}/read/kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce"
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = json.load(resp)
        assert body["status"] == 200
        assert body["value"]["Count"] > 0, f"broker {node.node_id} counted no Produce requests"
        assert set(body["value"]) >= {"Count", "Mean", "99thPercentile"}


def test_the_environments_broker_properties_reach_every_running_broker(cluster3: ClusterState, admin) -> None:
    """The session cluster started with the suite's TESTBED_BROKER_PROPERTIES (tests/conftest.py,
    or the caller's): every broker runs with each of them."""
    wanted = env_properties()
    if not wanted:
        pytest.skip(f"{PROPERTIES_ENV} is empty in this run")
    for node in cluster3.nodes:
        got = {key: broker_config(admin, node.node_id, key) for key in wanted}
        assert got == wanted, node.node_id


def test_nodes_have_racks_and_two_log_dirs_in_use(cluster3: ClusterState, admin, topic_name: str) -> None:
    ensure_topic(admin, topic_name, partitions=6, replication=3)
    racks = {b["broker_id"]: b["rack"] for b in admin.describe_cluster()["brokers"]}
    assert racks == {1: "rack-a", 2: "rack-b", 3: "rack-c"}
    deadline = time.monotonic() + 20
    while True:  # followers create their replicas shortly after the leaders are elected
        by_broker = {e["broker"]: e["log_dirs"] for e in admin.describe_log_dirs()}
        holding = {
            b: [d["log_dir"] for d in dirs if any(t["name"] == topic_name for t in d["topics"])]
            for b, dirs in by_broker.items()
        }
        if all(len(h) == 2 for h in holding.values()) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert set(by_broker) == {1, 2, 3}
    for node in cluster3.nodes:
        assert {d["log_dir"] for d in by_broker[node.node_id]} == set(node.log_dirs)
        # Kafka spreads the topic's 6 replicas on this broker over both dirs.
        assert sorted(holding[node.node_id]) == sorted(node.log_dirs), holding


def test_ensure_topic_spread_over_makes_each_broker_preferred_leader_of_a_share(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    ensure_topic(admin, topic_name, partitions=6, replication=3, spread_over=[3, 1, 2])
    # ensure_topic saw the topic led in the metadata of the broker it asked; the next request may
    # go to one that applies the topic a moment later (a whole-suite run described no partitions).
    (meta,) = wait_until(
        lambda: [t for t in admin.describe_topics([topic_name]) if len(t.get("partitions", [])) == 6],
        30,
        f"every partition of {topic_name} in the metadata",
    )
    preferred = [
        p["replica_nodes"][0] for p in sorted(meta["partitions"], key=lambda p: p["partition_index"])
    ]
    assert preferred == [1, 2, 3, 1, 2, 3]
    assert all(len(set(p["replica_nodes"])) == 3 for p in meta["partitions"])
    assert brokers_leading(admin, [topic_name]) == {1, 2, 3}
    assert brokers_leading(admin, [topic_name, f"{topic_name}-missing"]) is None  # not "nobody leads"
    with pytest.raises(ValueError, match="spread_over"):
        ensure_topic(admin, f"{topic_name}-x", partitions=1, replication=3, spread_over=[1, 2])
