"""Shipping to a separate 1-node monitoring cluster through the spool, across an outage of it.

The monitoring cluster is stopped (``down(keep_data=True)``) for a full minute while traffic
and the agents go on (2-second windows, so ~30 windows per broker are closed and spooled during
the outage), then started again on the same data: every window must arrive, each exactly once
by record key.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from kafka import KafkaConsumer

from agent.requestlog.window import ClosedWindow
from linkwatch.records import SAMPLES_TOPIC, decode
from linkwatch.testbed.agents import config_for_node, start_agents_in_process
from linkwatch.testbed.cluster import ClusterState
from tests.agent.conftest import Monitoring
from tests.agent.traffic import create_topic, run_traffic

# Real brokers under faults or live traffic: timing-sensitive on a shared machine (one rerun).
pytestmark = [pytest.mark.cluster, pytest.mark.timing]

OUTAGE_S = 60


def consume_keys(bootstrap: str, expected: set[str], timeout_s: float = 180) -> Counter[str]:
    """Every record key on the samples topic, read until all of ``expected`` were seen (the topic
    may also hold records of an earlier attempt of this test: counting keys would stop early)."""
    consumer = KafkaConsumer(
        SAMPLES_TOPIC, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    keys: Counter[str] = Counter()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    record = decode(r.value)
                    assert r.key.decode() == record.dedup_key()
                    keys[r.key.decode()] += 1
            if expected <= keys.keys():
                time.sleep(2)  # late duplicates, if any, would show now
                for records in consumer.poll(timeout_ms=1000).values():
                    keys.update(r.key.decode() for r in records)
                break
    finally:
        consumer.close()
    return keys


# The session cluster may start inside this test, the monitoring cluster starts twice, and the
# spool drains after the outage: on a slow machine that is more than pytest-timeout's 600 s.
@pytest.mark.timeout(1500)
def test_every_window_arrives_exactly_once_across_an_outage(
    cluster3: ClusterState,
    admin,
    topic_name: str,
    monitoring: Monitoring,
    tmp_path: Path,
) -> None:
    mon_cluster, mon_state = monitoring.cluster, monitoring.state
    create_topic(admin, topic_name)
    configs = [
        config_for_node(
            node,
            cluster="test",
            poll_interval_s=0.2,
            request_log={"window_s": 2, "grace_s": 1, "slow_threshold_ms": 100},
            prometheus={"enabled": False},
            jmx={"jolokia_url": None},
            log_dirs={"paths": []},  # only window records, so the expected set is exact
            host={"enabled": False},
            kafka={
                "enabled": True,
                "bootstrap_servers": mon_state.bootstrap,
                "spool_dir": str(tmp_path / f"spool-{node.node_id}"),
                "send_timeout_s": 3,
                "retry_backoff_s": 1,
            },
        )
        for node in cluster3.nodes
    ]
    running = start_agents_in_process(configs)
    expected: Counter[str] = Counter()
    lock = threading.Lock()

    def remember(win: ClosedWindow) -> None:
        with lock:
            expected.update(r.dedup_key() for r in [*win.sketches, *win.slow_requests])

    for agent, _ in running:
        agent.listeners.append(remember)
    traffic = threading.Thread(target=run_traffic, args=(cluster3.bootstrap, topic_name, OUTAGE_S + 12, 100))
    traffic.start()
    try:
        time.sleep(5)
        mon_cluster.down(keep_data=True)
        down_at = time.monotonic()
        time.sleep(OUTAGE_S / 2)
        spooled = sum(len(agent.sink.spool) for agent, _ in running)
        down = [agent.health.source_up.get("kafka_output") for agent, _ in running]
        time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        outage_s = time.monotonic() - down_at
        spooled_at_end = sum(len(agent.sink.spool) for agent, _ in running)
        mon_state = monitoring.state = mon_cluster.start_existing(mon_state)
        traffic.join()
        time.sleep(3)  # the last windows close (grace)
    finally:
        for agent, _ in running:
            agent._stop.set()
        for _, thread in running:
            thread.join(timeout=10)
        drain_started = time.monotonic()
        deadline = drain_started + 240
        while time.monotonic() < deadline and any(len(a.sink.spool) for a, _ in running):
            time.sleep(0.5)
        left = {i + 1: len(agent.sink.spool) for i, (agent, _) in enumerate(running)}  # agent -> records
        print(f"spool drain after the outage: {time.monotonic() - drain_started:.0f} s, left {left}")
        for agent, _ in running:
            agent.stop()
    assert outage_s >= OUTAGE_S
    assert 0 < spooled < spooled_at_end, (
        f"the spool did not grow through the outage: {spooled}, {spooled_at_end}"
    )
    assert down == [False, False, False]
    assert all(v == 1 for v in expected.values())
    assert not any(left.values()), f"the spools did not drain in 240 s after the outage: {left}"
    got = consume_keys(mon_state.bootstrap, set(expected))
    missing = set(expected) - set(got)
    duplicated = {k: got[k] for k in expected if got[k] > 1}
    assert not missing, f"{len(missing)} of {len(expected)} records never arrived, e.g. {sorted(missing)[:3]}"
    assert not duplicated, f"duplicates: {list(duplicated.items())[:3]}"
    dropped = sum(sum(a.health.dropped.values()) for a, _ in running)
    assert dropped == 0
