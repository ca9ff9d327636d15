"""The request-log source where the machine is not as configured.

* The position file on a disk that cannot take it: the agent keeps publishing its windows,
  counts every save that failed (``linkwatch_agent_position_save_failures_total``) and says so
  once in its log, never losing a window silently.
* A request log that does not exist: said once in the log, naming the key and the path, with the
  source's gauge at 0; read as soon as it appears.

The disk is a real full file system: a tmpfs of 8 KiB mounted for the test and filled (root
only). Without the right to mount, a directory made read-only stands for it (the save fails the
same way, with EACCES instead of ENOSPC); as root without mount the test is skipped, since root
writes through a read-only mode.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from agent.exporters.prometheus import AgentMetrics, make_registry
from agent.health import Health
from agent.requestlog.source import RequestLogSource
from agent.requestlog.window import WindowAggregator

FIXTURE = Path(__file__).parent / "fixtures" / "kafka-request.log"


@pytest.fixture
def full_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory on which no file can be written."""
    d = tmp_path / "full"
    d.mkdir()
    mounted = os.geteuid() == 0 and shutil.which("mount") is not None
    if mounted:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(d)], capture_output=True)
        mounted = done.returncode == 0
    if mounted:
        try:
            with open(d / "filler", "wb") as f:  # written until the disk is full
                while True:
                    f.write(b"\0" * 4096)
                    f.flush()
        except OSError:
            pass
        try:
            yield d
        finally:
            subprocess.run(["umount", str(d)], check=False)
        return
    if os.geteuid() == 0:
        pytest.skip("root without mount: no way to make a directory refuse writes")
    d.chmod(0o555)  # stands for a full disk: the save fails all the same
    try:
        yield d
    finally:
        d.chmod(0o755)


def test_a_position_file_on_a_full_disk_loses_no_window(
    tmp_path: Path, full_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_path = tmp_path / "kafka-request.log"
    # The capture (all at 08:xx), then the same lines an hour later: two reads, each closing
    # windows of its own.
    first_hour = FIXTURE.read_bytes().splitlines(keepends=True)
    later = [line.replace(b"[2026-11-21 08:", b"[2026-11-21 09:", 1) for line in first_hour]
    lines = first_hour + later
    log_path.write_bytes(b"".join(first_hour))
    health = Health()
    agg = WindowAggregator(cluster="c", broker=1, window_s=10, grace_s=1)
    source = RequestLogSource(
        log_path, agg, health, position_file=full_dir / "request-log.position", start_at_end=False
    )
    registry = make_registry(AgentMetrics("c", 1, health))
    far = int(time.time() * 1000) + 3_600_000  # every window of the capture is closed by then
    with caplog.at_level(logging.WARNING, logger="linkwatch.agent"):
        first = source.poll(far)
        with log_path.open("ab") as f:
            f.write(b"".join(later))
        second = source.poll(far)
        third = source.poll(far)
    closed = first + second + third
    assert first and second, "windows closed on both reads"
    # Every request line read is in a published window: none lost with the failed saves.
    assert sum(w.requests_seen for w in closed) == health.lines_read - sum(health.drops().values())
    assert health.lines_read == len([line for line in lines if line.strip()])
    assert health.position_save_failures == 3
    assert not (full_dir / "request-log.position").exists()
    text = generate_latest(registry).decode()
    assert 'linkwatch_agent_position_save_failures_total{broker="1",cluster="c"} 3.0' in text
    said = [r.getMessage() for r in caplog.records if "position_file" in r.getMessage()]
    assert len(said) == 1, said  # once, not once a poll
    assert str(full_dir / "request-log.position") in said[0] and "still published" in said[0]


def test_a_request_log_that_does_not_exist_is_said_once_and_read_when_it_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log_path = tmp_path / "logs" / "kafka-request.log"
    health = Health()
    agg = WindowAggregator(cluster="c", broker=1, window_s=10, grace_s=1)
    source = RequestLogSource(log_path, agg, health, position_file=tmp_path / "pos", start_at_end=True)
    registry = make_registry(AgentMetrics("c", 1, health))
    with caplog.at_level(logging.INFO, logger="linkwatch.agent"):
        for _ in range(5):
            assert source.poll() == []
        gauge = 'linkwatch_agent_source_up{broker="1",cluster="c",source="request_log"}'
        assert f"{gauge} 0.0" in generate_latest(registry).decode()
        said = [r for r in caplog.records if str(log_path) in r.getMessage()]
        assert len(said) == 1 and said[0].levelno == logging.WARNING
        assert "request_log.path" in said[0].getMessage() and "does not exist" in said[0].getMessage()
        log_path.parent.mkdir()
        log_path.write_bytes(FIXTURE.read_bytes())
        source.poll(int(time.time() * 1000) + 3_600_000)
    assert f"{gauge} 1.0" in generate_latest(registry).decode()
    assert health.lines_read > 0  # a log that appears later is new: read from its start
    assert any("is up again" in r.getMessage() for r in caplog.records)
