"""``linkwatch agent --config`` as a real subprocess: serves /metrics, follows the log, stops on SIGTERM."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from agent.config import AgentConfig
from testbed.agents import start_agent_process
from tests.agent.conftest import free_port
from tests.agent.test_parse import GOOD


def test_agent_subprocess_follows_the_log_and_stops_cleanly(tmp_path: Path) -> None:
    log = tmp_path / "kafka-request.log"
    log.write_bytes(b"")
    port = free_port()
    cfg = AgentConfig.model_validate(
        {
            "cluster": "t",
            "broker_id": 7,
            "poll_interval_s": 0.1,
            "request_log": {"path": str(log), "position_file": str(tmp_path / "pos.json")},
            "prometheus": {"port": port},
            "host": {"enabled": False},
        }
    )
    proc = start_agent_process(cfg, tmp_path / "agent.yaml", tmp_path / "agent.log")
    try:
        text = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(log, "ab") as f:
                    f.write(GOOD + b"\n")
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                if (
                    'linkwatch_agent_lines_read_total{broker="7",cluster="t"} 0.0' not in text
                    and "lines_read_total" in text
                ):
                    break
            except OSError:
                pass
            time.sleep(0.3)
        assert 'linkwatch_agent_source_up{broker="7",cluster="t",source="request_log"} 1.0' in text
        assert "linkwatch_agent_lines_read_total" in text
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    assert (tmp_path / "pos.json").exists()
