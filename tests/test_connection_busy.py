"""``scripts/connection_busy.py``: the share of each window a broker spent serving a connection,
read from request-log lines shaped like Kafka 4.x's (``kafka.request.logger`` at DEBUG)."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

SCRIPT = Path(__file__).resolve().parents[1] / "scripts/connection_busy.py"
sys.path.insert(0, str(SCRIPT.parent))
import connection_busy as cb  # noqa: E402  (a script's module, as when it runs)

T0_MS = 1_796_331_900_000  # a window boundary for 5 s windows


def line(end_ms: int, api: str, connection: str, client: str, total: float, remote: float = 0.0) -> bytes:
    """A completed-request line as the broker writes it: stamped at the response's completion, in
    local time (as a broker without -Duser.timezone writes it, and the parser reads it)."""
    stamp = dt.datetime.fromtimestamp(end_ms / 1000).strftime("%Y-%m-%d %H:%M:%S,%f")[:-3]
    key = {"PRODUCE": 0, "FETCH": 1}[api]
    body = {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": key,
            "requestApiVersion": 11,
            "correlationId": 7,
            "clientId": client,
            "requestApiKeyName": api,
        },
        "request": {"replicaState": {"replicaId": -1}} if api == "FETCH" else {"acks": 1},
        "response": {"throttleTimeMs": 0},
        "connection": connection,
        "totalTimeMs": total,
        "requestQueueTimeMs": 0.1,
        "localTimeMs": total - remote - 0.3,
        "remoteTimeMs": remote,
        "throttleTimeMs": 0,
        "responseQueueTimeMs": 0.1,
        "sendTimeMs": 0.1,
        "securityProtocol": "PLAINTEXT",
        "principal": "User:ANONYMOUS",
        "listener": "PLAINTEXT",
        "clientInformation": {"softwareName": "librdkafka", "softwareVersion": "2.6.1"},
    }
    text = (
        f"[{stamp}] DEBUG Completed request:{json.dumps(body, separators=(',', ':'))} (kafka.request.logger)"
    )
    return text.encode() + b"\n"


def scenario() -> list[bytes]:
    """10 s: a pipelining producer served back to back (100 ms each), a light one (one 5 ms
    request a second), a consumer long-polling (500 ms in purgatory, 1 ms of work)."""
    out = []
    for i in range(1, 101):
        out.append(line(T0_MS + 100 * i, "PRODUCE", "b1-c1", "saturated", 100.0))
    for i in range(10):
        out.append(line(T0_MS + 1000 * i + 500, "PRODUCE", "b1-c2", "light", 5.0))
    for i in range(1, 21):
        out.append(line(T0_MS + 500 * i, "FETCH", "b1-c3", "consumer", 501.0, remote=500.0))
    return sorted(out, key=lambda b: b[:25])


def test_a_connection_served_back_to_back_is_saturated_and_a_long_poll_is_not() -> None:
    produce = cb.busy_windows(scenario(), "Produce", 5000)
    assert sorted(produce.by_start) == [T0_MS, T0_MS + 5000]
    first = produce.by_start[T0_MS]
    assert (
        abs(first["b1-c1"].share(5000) - 1.0) < 1e-9 and first["b1-c1"].completed == 49
    )  # the 50th ends on the boundary: the next window's
    assert abs(first["b1-c2"].share(5000) - 0.005) < 1e-9
    assert produce.other_requests == 20 and not produce.dropped
    fetch = cb.busy_windows(scenario(), "FetchConsumer", 5000)
    assert all(b.share(5000) < 0.01 for w in fetch.by_start.values() for b in w.values())
    report = cb.report(produce, top=2, saturated=0.9, zero_ms=T0_MS)
    assert report[0].split()[:5] == ["+0.0s", "2", "conns", "1", "saturated"]
    assert "saturated 1.00 (49 req, slowest 100 ms)" in report[0] and "light 0.01" in report[0]


def test_a_request_spanning_windows_is_split_over_them_and_lines_not_requests_are_counted() -> None:
    lines = [
        line(T0_MS + 1000, "PRODUCE", "c", "x", 3000.0),
        b"[2026-12-03 21:00:00,000] INFO not a request\n",
    ]
    got = cb.busy_windows(lines, "Produce", 5000)
    assert {w: round(b["c"].served_ms, 6) for w, b in got.by_start.items()} == {
        T0_MS - 5000: 2000,
        T0_MS: 1000,
    }
    assert got.by_start[T0_MS]["c"].completed == 1 and got.by_start[T0_MS - 5000]["c"].completed == 0
    assert cb.report(got, top=1, saturated=0.3, zero_ms=T0_MS)[0].split()[:7] == [
        "-5.0s",
        "1",
        "conns",
        "1",
        "saturated",
        "x",
        "0.40",
    ]  # the client is named in a window its request spans without completing
    assert got.dropped == {"not_a_request_line": 1}


@given(
    end_ms=st.floats(0, 1e7, allow_nan=False),
    served_ms=st.floats(0, 1e5, allow_nan=False),
    window_ms=st.integers(1, 60_000),
)
def test_spread_puts_every_ms_served_in_exactly_one_window(
    end_ms: float, served_ms: float, window_ms: int
) -> None:
    parts = list(cb.spread(end_ms, served_ms, window_ms))
    assert abs(sum(p for _, p in parts) - served_ms) <= 1e-6 * max(1.0, served_ms)
    starts = [w for w, _ in parts]
    assert starts == sorted(set(starts)) and all(w % window_ms == 0 for w in starts)
    assert all(0 < p <= window_ms for _, p in parts)


def test_the_command_prints_windows_and_a_bad_path_is_one_line(tmp_path: Path) -> None:
    log = tmp_path / "kafka-request.log"
    log.write_bytes(b"".join(scenario()))
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(log), "--zero", str(T0_MS / 1000)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[1].split()[:5] == ["+0.0s", "2", "conns", "1", "saturated"]
    missing = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nope.log")], capture_output=True, text=True, timeout=60
    )
    assert missing.returncode == 1 and missing.stderr.strip() == f"no such file: {tmp_path / 'nope.log'}"
