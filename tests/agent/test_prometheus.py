"""``/metrics`` over real HTTP on loopback, parsed with prometheus_client's own text parser."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.config import AgentConfig
from agent.runner import Agent
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, STAGES
from tests.agent.conftest import Captured

# Real brokers under faults or live traffic: timing-sensitive on a shared machine (one rerun).
pytestmark = [pytest.mark.cluster, pytest.mark.timing]

DOCUMENTED = Path(__file__).parents[2] / "docs" / "metrics.md"


def scrape(port: int) -> dict[str, list]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def run_agent_over(lines: list[bytes], broker: int, tmp_path: Path) -> Agent:
    log = tmp_path / f"kafka-request-{broker}.log"
    log.write_bytes(b"\n".join([*lines, b"[2026-01-01 00:00:00,000] DEBUG Completed request:{broken", b""]))
    cfg = AgentConfig.model_validate(
        {
            "cluster": "test",
            "broker_id": broker,
            "request_log": {"path": str(log), "start_at": "beginning"},
            "prometheus": {"port": 0},
        }
    )
    agent = Agent(cfg).start()
    for _ in range(20):  # read everything, then let the wall clock close every window
        agent.step(now_ms=4_000_000_000_000)
    return agent


def test_metrics_endpoint_serves_stage_histograms_and_health(captured: Captured, tmp_path: Path) -> None:
    agents = [run_agent_over(lines, b, tmp_path) for b, lines in captured.lines.items()]
    try:
        for agent in agents:
            assert agent.http_server.server_address[0] == "127.0.0.1"
            families = scrape(agent.metrics_port)
            buckets = [
                s for s in families["linkwatch_broker_request_stage_seconds"] if s.name.endswith("_bucket")
            ]
            series = {(s.labels["request"], s.labels["stage"]) for s in buckets}
            assert series == {(r, st) for r in (PRODUCE, FETCH_CONSUMER, FETCH_FOLLOWER) for st in STAGES}
            bounds = sorted(
                {
                    s.labels["le"]
                    for s in buckets
                    if s.labels["request"] == PRODUCE and s.labels["stage"] == "total"
                }
            )
            assert len(bounds) == 19  # 18 fixed log-spaced bounds + Inf, the same on every broker
            count = next(
                s.value
                for s in families["linkwatch_broker_request_stage_seconds"]
                if s.name.endswith("_count")
                and s.labels["request"] == PRODUCE
                and s.labels["stage"] == "total"
            )
            produce_lines = sum(1 for line in captured.lines[agent.config.broker_id] if b'"PRODUCE"' in line)
            assert count == produce_lines
            lines_read = families["linkwatch_agent_lines_read"][0].value
            assert lines_read == len(captured.lines[agent.config.broker_id]) + 1
            dropped = {s.labels["reason"]: s.value for s in families["linkwatch_agent_dropped"]}
            assert dropped == {"truncated": 1.0}
            up = {s.labels["source"]: s.value for s in families["linkwatch_agent_source_up"]}
            assert up == {"request_log": 1.0}
            assert families["process_resident_memory_bytes"][0].value > 0
    finally:
        for agent in agents:
            agent.stop()


def test_every_exported_name_is_in_the_contract(captured: Captured, tmp_path: Path) -> None:
    agent = run_agent_over(captured.lines[1], 1, tmp_path)
    try:
        names = {n for n in scrape(agent.metrics_port) if n.startswith("linkwatch_")}
    finally:
        agent.stop()
    contract = DOCUMENTED.read_text()
    for name in names:
        assert f"`{name}" in contract or f"`{name}_total`" in contract, name
