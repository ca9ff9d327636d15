"""Faults of the request-log path (issue 18, items 1-5), one row per case, each the input that
used to crash the agent or lose lines silently. Every row asserts: the bad line is dropped with
its own reason (or nothing is dropped), and every valid line around it is counted in a window."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.config import load_agent_config
from agent.health import Health
from agent.requestlog import follow
from agent.requestlog.follow import MAX_POLL_BYTES, FileFollower
from agent.requestlog.ingest import ingest_lines
from agent.requestlog.parse import LineParser
from agent.requestlog.source import RequestLogSource
from agent.requestlog.window import ClosedWindow, WindowAggregator
from agent.runner import Agent
from linkwatch.errors import ConfigError

TAIL = b" (kafka.request.logger)"


def stamp(epoch_ms: int, zone: ZoneInfo | None = None) -> bytes:
    """log4j2's ``[%d]`` (``yyyy-MM-dd HH:mm:ss,SSS``) in ``zone`` (None: the local zone)."""
    dt = datetime.fromtimestamp(epoch_ms / 1000, tz=zone or UTC)
    if zone is None:
        dt = datetime.fromtimestamp(epoch_ms / 1000)
    return dt.strftime("%Y-%m-%d %H:%M:%S").encode() + b",%03d" % (epoch_ms % 1000)


def request_line(ts: bytes, total: bytes = b"7.5", local: bytes = b"1.0", n: int = 0) -> bytes:
    return (
        b"[" + ts + b"] DEBUG Completed request:"
        b'{"isForwarded":false,"requestHeader":{"requestApiKey":0,"requestApiVersion":9,'
        b'"correlationId":%d,"clientId":"c1","requestApiKeyName":"PRODUCE"},"request":{"acks":-1},'
        b'"response":{},"connection":"127.0.0.1:9092-127.0.0.1:5000-0-1","totalTimeMs":%s,'
        b'"requestQueueTimeMs":0.5,"localTimeMs":%s,"remoteTimeMs":5.0,"throttleTimeMs":0,'
        b'"responseQueueTimeMs":0.5,"sendTimeMs":0.5,"securityProtocol":"PLAINTEXT",'
        b'"principal":"User:ANONYMOUS","listener":"PLAINTEXT",'
        b'"clientInformation":{"softwareName":"x","softwareVersion":"1"}}' % (n, total, local) + TAIL
    )


def counted(windows: list[ClosedWindow]) -> int:
    """Requests counted in ``windows`` (the total-time stage of every request type)."""
    return sum(s.sketch["count"] for w in windows for s in w.sketches if s.stage == "total")


# -- item 1: stage values that are not usable numbers ---------------------------------------
BAD_STAGES = [
    ("sum overflows the window", b"1e308", b"1e308", "stage_too_large"),
    ("negative total", b"-5.0", b"1.0", "stage_negative"),
    ("negative local", b"7.5", b"-0.001", "stage_negative"),
    ("boolean total", b"true", b"1.0", "stage_boolean"),
    ("boolean local", b"7.5", b"false", "stage_boolean"),
]


@pytest.mark.parametrize(("name", "total", "local", "reason"), BAD_STAGES, ids=[c[0] for c in BAD_STAGES])
def test_bad_stage_values_are_dropped_and_the_window_survives(
    name: str, total: bytes, local: bytes, reason: str
) -> None:
    ts = stamp(1_700_000_000_000)
    good = request_line(ts)
    bad = request_line(ts, total=total, local=local)
    # Twice the bad line: one overflowing value alone is finite, two overflow the window's sum.
    lines = [good, bad, good, bad, good]
    health = Health()
    agg = WindowAggregator(cluster="t", broker=1)
    closed = ingest_lines(lines, LineParser(), agg, health)
    closed += agg.close_all()
    assert health.dropped == Counter({reason: 2})
    assert counted(closed) == 3
    # The general path (one line at a time) agrees.
    for line in (bad,):
        parser = LineParser()
        with pytest.raises(Exception) as err:
            parser.parse(line)
        assert getattr(err.value, "reason", None) == reason


# -- item 2: rename and recreate between EOF and the path check ------------------------------
def test_rotation_between_eof_and_path_check_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "kafka-request.log"
    log.write_bytes(b"")
    f = FileFollower(log)
    with open(log, "ab") as w:
        w.write(b"a\n")
    assert f.read_lines() == [b"a"]
    real_stat = os.stat
    rotated = []

    def stat_after_rotation(path: os.PathLike[str] | str, *args: object, **kw: object) -> os.stat_result:
        # The writer acts right after the follower's read returned EOF: it appends the old
        # file's last lines, renames it and starts a new file, before the follower looks.
        if not rotated and Path(path) == log:
            rotated.append(True)
            with open(log, "ab") as w:
                w.write(b"b\nc\n")
            log.rename(tmp_path / "kafka-request.log.1")
            log.write_bytes(b"d\n")
        return real_stat(path, *args, **kw)

    monkeypatch.setattr(follow.os, "stat", stat_after_rotation)
    got = f.read_lines()
    monkeypatch.undo()
    got += f.read_lines()
    assert got == [b"b", b"c", b"d"]
    assert f.rotations == 1


# -- item 3: copy-truncate, then more writes than the old offset -----------------------------
def test_copy_truncate_overwritten_past_the_old_offset_loses_nothing(tmp_path: Path) -> None:
    log = tmp_path / "kafka-request.log"
    log.write_bytes(b"")
    skips: list[str] = []
    f = FileFollower(log, on_skip=lambda reason, detail: skips.append(reason))
    with open(log, "ab") as w:
        w.write(b"old-1\nold-2\n")
    assert f.read_lines() == [b"old-1", b"old-2"]
    with open(log, "ab") as w:
        w.write(b"old-3\n")  # not read before the copy: only the copy holds it
    (tmp_path / "kafka-request.log.1").write_bytes(log.read_bytes())
    with open(log, "r+b") as w:
        w.truncate(0)
    with open(log, "ab") as w:
        w.write(b"new-1\nnew-2\nnew-3\nnew-4\nnew-5\n")  # well past the old offset (12 bytes)
    assert f.read_lines() == [b"old-3", b"new-1", b"new-2", b"new-3", b"new-4", b"new-5"]
    assert f.truncations == 1
    assert skips == []


# -- item 4: one line far in the future -------------------------------------------------------
def test_a_line_far_in_the_future_is_dropped_and_later_windows_close(tmp_path: Path) -> None:
    log = tmp_path / "kafka-request.log"
    log.write_bytes(b"")
    health = Health()
    agg = WindowAggregator(cluster="t", broker=1, window_s=1, grace_s=0.5)
    source = RequestLogSource(log, agg, health)
    now = int(time.time() * 1000)
    first = now - 30_000  # 30 s of log, written up to now
    lines = [request_line(stamp(first + 100 * i), n=i) for i in range(300)]
    lines.insert(10, request_line(stamp(now + 86_400_000), n=-1))
    closed = []
    with open(log, "ab") as w:
        for i in range(0, len(lines), 50):  # a busy log: every poll reads new lines
            w.write(b"\n".join(lines[i : i + 50]) + b"\n")
            w.flush()
            # Polled as the log is written: "now" is just after the last line's time.
            closed += source.poll(first + 100 * min(i + 49, 299))
    assert health.dropped == Counter({"future_timestamp": 1})
    # Every window but the last one or two (not past end + grace yet) closed on time.
    assert counted(closed) >= 300 - 20
    closed += agg.close_all()
    assert counted(closed) == 300


# -- item 5: local time at a daylight-saving fall-back ---------------------------------------
@pytest.fixture
def berlin_local_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[ZoneInfo]:
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield ZoneInfo("Europe/Berlin")
    monkeypatch.undo()
    time.tzset()


def test_dst_fall_back_in_local_time_loses_no_hour(berlin_local_time: ZoneInfo) -> None:
    # 2026-10-25 03:00 CEST -> 02:00 CET: 02:00-02:59 local is written twice.
    start = int(datetime(2026, 10, 24, 23, 30, tzinfo=UTC).timestamp() * 1000)  # 01:30 CEST
    epochs = [start + 20_000 * i for i in range(6 * 60 * 3)]  # every 20 s for 3 h
    lines = [request_line(stamp(ms), n=i) for i, ms in enumerate(epochs)]
    assert len(set(lines)) == len(lines)
    health = Health()
    agg = WindowAggregator(cluster="t", broker=1)
    closed = ingest_lines(lines, LineParser(), agg, health) + agg.close_all()
    assert health.dropped == Counter()
    assert counted(closed) == len(lines)
    assert sorted(w.start_ms for w in closed) == sorted({ms - ms % 10_000 for ms in epochs})


# -- the settings these need -----------------------------------------------------------------
ZONE_CONFIGS = [
    (
        "unknown zone",
        "broker_id: 1\nrequest_log: {timezone: Mars/Base}\n",
        "request_log.timezone='Mars/Base'",
    ),
    (
        "a path, not a zone",
        "broker_id: 1\nrequest_log: {timezone: ../../etc/passwd}\n",
        "is not a known time zone",
    ),
    ("negative max_ahead_s", "broker_id: 1\nrequest_log: {max_ahead_s: -1}\n", "request_log.max_ahead_s=-1"),
]


@pytest.mark.parametrize(("name", "text", "message"), ZONE_CONFIGS, ids=[c[0] for c in ZONE_CONFIGS])
def test_bad_zone_settings_stop_start_up_naming_the_key(
    name: str, text: str, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_agent_config(path)
    assert message in str(err.value)


def test_configured_zone_reaches_the_parser(tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"broker_id: 1\nrequest_log: {{path: {tmp_path / 'r.log'}, timezone: Asia/Kolkata}}\nprometheus: {{enabled: false}}\nhost: {{enabled: false}}\n"
    )
    agent = Agent(load_agent_config(path))
    assert agent.request_log is not None
    assert agent.request_log.parser.ts(b"2026-11-21 05:30:00,000") == int(
        datetime(2026, 11, 21, tzinfo=UTC).timestamp() * 1000
    )


def test_a_log_more_than_one_poll_behind_is_read_on_without_waiting(tmp_path: Path) -> None:
    # More than one poll's budget of real lines: the agent reads them all at once instead of one
    # MAX_POLL_BYTES per poll interval (10 s here, the longest allowed).
    fixture = (Path(__file__).parent / "fixtures" / "kafka-request.log").read_bytes()
    copies = MAX_POLL_BYTES // len(fixture) + 3
    log = tmp_path / "r.log"
    log.write_bytes(fixture * copies)
    lines = fixture.count(b"\n") * copies
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"broker_id: 1\npoll_interval_s: 10\nrequest_log: {{path: {log}, start_at: beginning}}\n"
        "prometheus: {enabled: false}\nhost: {enabled: false}\nlog_dirs: {paths: []}\n"
    )
    agent = Agent(load_agent_config(path))
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 8
        while agent.health.lines_read < lines and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.health.lines_read == lines
    finally:
        agent.stop()
        thread.join(timeout=15)


def test_a_step_that_raises_is_counted_and_the_agent_goes_on(tmp_path: Path) -> None:
    # One failing step (a bug, a source raising) must not end the agent's thread: it would stop
    # every window with no sign but silence.
    fixture = (Path(__file__).parent / "fixtures" / "kafka-request.log").read_bytes()
    log = tmp_path / "r.log"
    log.write_bytes(fixture)
    path = tmp_path / "agent.yaml"
    path.write_text(
        f"broker_id: 1\npoll_interval_s: 0.05\nrequest_log: {{path: {log}, start_at: beginning}}\n"
        "prometheus: {enabled: false}\nhost: {enabled: false}\nlog_dirs: {paths: []}\n"
    )
    agent = Agent(load_agent_config(path))
    real_step, calls = agent.step, []

    def step(now_ms: int | None = None):
        calls.append(now_ms)
        if len(calls) <= 2:
            raise RuntimeError("boom")
        return real_step(now_ms)

    agent.step = step  # type: ignore[method-assign]
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 8
        while agent.health.lines_read < fixture.count(b"\n") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.health.dropped["step_error"] == 2
        assert agent.health.lines_read == fixture.count(b"\n")
        assert thread.is_alive()
    finally:
        agent.stop()
        thread.join(timeout=15)
