"""Transactional SQLite sink: SIGKILL the consumer mid-stream, restart, every record exactly once."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import uuid

import pytest

from tests.consumer.conftest import create_topic, produce

pytestmark = pytest.mark.cluster


def _rows(db) -> int:
    try:
        with sqlite3.connect(db) as conn:
            return conn.execute("SELECT count(*) FROM output").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet
        return 0


def _consume_cmd(bootstrap: str, topic: str, group: str, db, *extra: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", "consume", topic, "--bootstrap", bootstrap,
            "--group", group, "--to-sqlite", str(db), "--idle-exit", "4", *extra]  # fmt: skip


def test_sigkill_mid_stream_then_restart_gives_exactly_once(cluster3, admin, topic_name, tmp_path):
    create_topic(admin, topic_name, partitions=3)
    sent = produce(cluster3.bootstrap, topic_name, partitions=3, per_partition=1000)
    db = tmp_path / "out.db"
    group = f"g-{uuid.uuid4().hex[:6]}"
    # Commit to Kafka rarely, so the group's offsets lag the sink's: a restart from the group's
    # offsets would duplicate, only the sink's offsets give exactly-once. The killed member stays
    # in the group until its session expires and the restart's join waits for that: a 10 s
    # session (the broker's minimum is 6 s) instead of the default 45 s, which only adds waiting.
    env = {
        "LINKWATCH_CONSUMER_COMMIT_INTERVAL_MS": "60000",
        "LINKWATCH_CONSUMER_SESSION_TIMEOUT_MS": "10000",
        "PATH": "/usr/bin:/bin",
    }
    first = subprocess.Popen(
        _consume_cmd(cluster3.bootstrap, topic_name, group, db, "--process-ms", "2"),
        env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / "first.log").open("wb"),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while _rows(db) == 0 and time.monotonic() < deadline:  # the first batch is stored
            time.sleep(0.05)
        time.sleep(0.3)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        first.kill()
    at_kill = _rows(db)
    assert 0 < at_kill < 3000, (tmp_path / "first.log").read_text()[-3000:]  # really mid-stream

    second = subprocess.run(
        _consume_cmd(cluster3.bootstrap, topic_name, group, db), env=env, capture_output=True, timeout=120
    )
    assert second.returncode == 0, second.stderr.decode()[-2000:]
    with sqlite3.connect(db) as conn:
        rows = conn.execute('SELECT partition, "offset", value FROM output').fetchall()
    assert len(rows) == 3000
    got: dict[int, list[bytes]] = {}
    for p, _offset, value in sorted(rows, key=lambda r: (r[0], r[1])):
        got.setdefault(p, []).append(value)
    assert got == sent
