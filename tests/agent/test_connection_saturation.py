"""Per-connection busy time and saturated connections (agent.requestlog.window), on every path.

A broker reads one request per connection at a time, so a connection it served for at least
SATURATED_SHARE (0.9) of a window was served back to back: its client's next request was already
waiting where no broker timer runs. Each scenario is a request log shaped as the broker writes it
(stamps, the JSON header, the tail ``"connection":…,"totalTimeMs":…``), read by the compiled
scanner, by the pure-Python bulk path and by the general parser line by line; every path must
give the same figures, and those the scenario expects.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.health import Health
from agent.requestlog import ingest as ingest_module
from agent.requestlog import scanner, window
from agent.requestlog.window import ClosedWindow, WindowAggregator
from linkwatch.records import FETCH_CONSUMER, PRODUCE
from tests.agent.test_ingest_fixture import reference
from tests.agent.test_prometheus import run_agent_over, scrape
from tests.agent.test_requestlog_faults import stamp

BASE_MS = 1_700_000_000_000  # a window start (10 s windows)
WINDOW_US = 10_000_000
CLOCK = lambda: 4e9  # noqa: E731  (past every stamp: no line is ahead of the clock)
REQUESTS = {
    PRODUCE: (b"PRODUCE", b'{"acks":1}'),
    FETCH_CONSUMER: (b"FETCH", b'{"replicaId":-1,"maxWaitMs":500}'),
}


def line(at_ms: int, conn: str, total_ms: float, remote_ms: float = 0.0, request: str = PRODUCE) -> bytes:
    """A ``Completed request`` line of ``request`` on ``conn``, completed at ``at_ms``."""
    api, body = REQUESTS[request]
    local = total_ms - remote_ms
    return (
        b"[" + stamp(at_ms) + b"] DEBUG Completed request:"
        b'{"isForwarded":false,"requestHeader":{"requestApiKey":0,"requestApiVersion":9,'
        b'"correlationId":1,"clientId":"c1","requestApiKeyName":"%s"},"request":%s,"response":{},'
        b'"connection":"%s","totalTimeMs":%r,"requestQueueTimeMs":0,"localTimeMs":%r,"remoteTimeMs":%r,'
        b'"throttleTimeMs":0,"responseQueueTimeMs":0,"sendTimeMs":0,"securityProtocol":"PLAINTEXT",'
        b'"principal":"User:ANONYMOUS","listener":"PLAINTEXT",'
        b'"clientInformation":{"softwareName":"x","softwareVersion":"1"}} (kafka.request.logger)'
        % (api, body, conn.encode(), total_ms, local, remote_ms)
    )


def back_to_back(conn: str, n: int, each_ms: float, remote_ms: float = 0.0, request: str = PRODUCE) -> list:
    """``n`` requests of ``each_ms`` served one after the other from the window's start."""
    return [(int((k + 1) * each_ms), conn, each_ms, remote_ms, request) for k in range(n)]


def conn(k: int) -> str:
    return f"127.0.0.1:9092-127.0.0.1:{50000 + k}-{k % 3}"


# (name, requests as (ms into the window, connection, total, remote, type), request type,
#  connections, saturated)
SCENARIOS = [
    (
        "a producer served back to back beside a light one",
        back_to_back(conn(1), 20, 495.0) + back_to_back(conn(2), 5, 100.0),
        PRODUCE,
        2,
        1,
    ),
    ("busy for 0.85 of the window: not saturated", back_to_back(conn(1), 17, 500.0), PRODUCE, 1, 0),
    (
        "thirty light connections whose sum is 1.5 windows: none saturated",
        [r for k in range(30) for r in back_to_back(conn(k), 10, 50.0)],
        PRODUCE,
        30,
        0,
    ),
    ("one request served longer than the window", [(9_000, conn(1), 12_000.0, 0.0, PRODUCE)], PRODUCE, 1, 1),
    (
        "a consumer's long polls wait in purgatory: not saturated",
        back_to_back(conn(1), 20, 495.0, remote_ms=494.0, request=FETCH_CONSUMER),
        FETCH_CONSUMER,
        1,
        0,
    ),
    (
        "a consumer's fetches served slowly back to back",
        back_to_back(conn(1), 20, 480.0, request=FETCH_CONSUMER),
        FETCH_CONSUMER,
        1,
        1,
    ),
    (
        "three saturated producers (a slow disk under pipelining clients)",
        [r for k in range(3) for r in back_to_back(conn(k), 50, 199.5)] + back_to_back(conn(9), 3, 1.5),
        PRODUCE,
        4,
        3,
    ),
]


def lines_of(requests: list) -> list[bytes]:
    ordered = sorted(requests, key=lambda r: r[0])
    return [line(BASE_MS + at, c, total, remote, request) for at, c, total, remote, request in ordered]


def windows(
    lines: list[bytes], path: str, monkeypatch: pytest.MonkeyPatch, block_lines: int
) -> list[ClosedWindow]:
    """``lines`` read by ``path``: "compiled", "python" (the bulk path without the scanner) or
    "general" (the parser line by line)."""
    agg = WindowAggregator(cluster="t", broker=1, clock=CLOCK)
    if path == "general":
        return reference(lines, agg, Health())
    parser, health, closed = ingest_module.LineParser(), Health(), []
    with monkeypatch.context() as m:
        if path == "python":
            m.setattr(ingest_module, "block_scan", lambda: None)
        for i in range(0, len(lines), block_lines):
            block = b"".join(x + b"\n" for x in lines[i : i + block_lines])
            closed += ingest_module.ingest_block(block, parser, agg, health)
    assert health.lines_read == len(lines) and not health.dropped
    return closed + agg.close_all()


def figures(closed: list[ClosedWindow]) -> list[tuple]:
    return [
        (w.start_ms, s.request, s.stage, s.connections, s.saturated_connections, w.busy.get(s.request))
        for w in closed
        for s in w.sketches
    ]


PATHS = [("compiled", 10**6), ("compiled", 7), ("python", 10**6), ("python", 7), ("general", 1)]


@pytest.mark.parametrize(
    ("name", "requests", "request_type", "connections", "saturated"), SCENARIOS, ids=[s[0] for s in SCENARIOS]
)
def test_saturated_connections_on_every_path(
    name: str,
    requests: list,
    request_type: str,
    connections: int,
    saturated: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines = lines_of(requests)
    got = {}
    for path, block_lines in PATHS:
        closed = windows(lines, path, monkeypatch, block_lines)
        got[(path, block_lines)] = figures(closed)
        (only,) = closed
        total = next(s for s in only.sketches if s.stage == "total" and s.request == request_type)
        assert (total.connections, total.saturated_connections) == (connections, saturated), (
            path,
            block_lines,
        )
        others = [s for s in only.sketches if s.stage != "total"]
        assert {(s.connections, s.saturated_connections) for s in others} == {(0, 0)}  # total carries them
    assert len({tuple(f) for f in got.values()}) == 1, got


def test_the_compiled_path_is_the_one_taken() -> None:
    """The scenarios above exercise the compiled scanner, not only the fallback it shares results with."""
    scan = scanner.block_scan()
    if scan is None:
        pytest.skip(f"no compiled scanner ({scanner.STATUS})")
    block = b"".join(x + b"\n" for x in lines_of(SCENARIOS[0][1]))
    n = scan.scan(block, 1 << 20)
    assert scan.group(n, 300.0) is not None
    got = {(scanner.KIND_REQUESTS[kind], us) for kind, _, us in scan.busy(n)}
    assert got == {(PRODUCE, 20 * 495_000), (PRODUCE, 5 * 100_000)}


def test_connections_beyond_the_bound_are_not_timed_but_their_time_is_said(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(window, "MAX_CONNECTIONS", 2)
    lines = lines_of(
        back_to_back(conn(1), 3, 10.0) + back_to_back(conn(2), 3, 20.0) + back_to_back(conn(3), 2, 7.0)
    )
    results = set()
    for path, block_lines in PATHS:
        (only,) = windows(lines, path, monkeypatch, block_lines)
        total = next(s for s in only.sketches if s.stage == "total")
        results.add((total.connections, only.untracked_busy_us, only.busy[PRODUCE]))
    # Which two are timed depends on the order seen (the lines interleave by stamp): 2 of 3,
    # and the busy time of the third said.
    assert len(results) == 1
    ((connections, untracked, busy),) = results
    assert connections == 2 and untracked + sum(busy) == 3 * 10_000 + 3 * 20_000 + 2 * 7_000
    assert untracked in (3 * 10_000, 3 * 20_000, 2 * 7_000)


def test_a_sampled_window_is_judged_on_its_estimate() -> None:
    """Under sampled capture (1 in k logged) each connection's time is k times what was logged."""
    agg = WindowAggregator(cluster="t", broker=1, clock=CLOCK)
    for at, c, total, remote, request in back_to_back(conn(1), 10, 480.0):
        agg.add(ingest_module.LineParser().parse(line(BASE_MS + at, c, total, remote, request)))
    (only,) = agg.close_all()
    total = next(s for s in only.sketches if s.stage == "total")
    assert total.saturated_connections == 0
    scaled = next(s for s in only.scaled(2).sketches if s.stage == "total")
    assert (scaled.connections, scaled.saturated_connections) == (1, 1)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=29_999),  # ms from the first window's start: 3 windows
            st.integers(min_value=0, max_value=4),  # connection
            st.one_of(st.integers(min_value=0, max_value=12_000), st.floats(min_value=0, max_value=12_000)),
            st.floats(min_value=0, max_value=1),  # share of the total in purgatory
            st.sampled_from([PRODUCE, FETCH_CONSUMER]),
        ),
        min_size=1,
        max_size=60,
    ),
    st.integers(min_value=1, max_value=40),
)
def test_busy_time_is_the_sum_over_each_connection_on_every_path(requests: list, block_lines: int) -> None:
    rows = [(at, conn(c), total, float(total) * share, request) for at, c, total, share, request in requests]
    lines = lines_of(rows)
    want: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for at, c, total, remote, request in rows:
        # The value as logged (repr) and read back: what every path reads.
        total_read, remote_read = float(repr(total)), float(repr(remote))
        start = BASE_MS + at - (BASE_MS + at) % 10_000
        want[(start, request)][c] += scanner.busy_us(request, total_read, remote_read)
    with pytest.MonkeyPatch.context() as monkeypatch:
        for path, size in [("compiled", block_lines), ("python", block_lines), ("general", 1)]:
            closed = windows(lines, path, monkeypatch, size)
            got = {(w.start_ms, r): busy for w in closed for r, busy in w.busy.items()}
            assert got == {key: tuple(sorted(v.values())) for key, v in want.items()}, path
            for w in closed:
                for s in w.sketches:
                    if s.stage == "total":
                        served = want[(w.start_ms, s.request)].values()
                        assert s.saturated_connections == sum(us >= 0.9 * WINDOW_US for us in served)


@pytest.mark.parametrize(
    ("bound", "served", "saturated", "untimed_s"), [(None, 4, 3, 0.0), (3, 3, 2, 50 * 0.1995)]
)
def test_the_agent_serves_the_figures_on_its_metrics_endpoint(
    bound: int | None,
    served: int,
    saturated: int,
    untimed_s: float,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A real agent over a log with three producers served back to back and a light one,
    scraped over HTTP; with room for three connections, the last one seen (a saturated one: the
    light one's first request completes first) is left untimed and its time counted."""
    if bound is not None:
        monkeypatch.setattr(window, "MAX_CONNECTIONS", bound)
    agent = run_agent_over(lines_of(SCENARIOS[-1][1]), 1, tmp_path)
    try:
        families = scrape(agent.metrics_port)
    finally:
        agent.stop()
    got_served = {s.labels["request"]: s.value for s in families["linkwatch_broker_connections_served"]}
    got_saturated = {s.labels["request"]: s.value for s in families["linkwatch_broker_connections_saturated"]}
    assert (got_served, got_saturated) == ({PRODUCE: served}, {PRODUCE: saturated})
    (untimed,) = families["linkwatch_agent_untimed_connection_seconds"]
    assert untimed.value == pytest.approx(untimed_s)
