"""Sampled capture (agent.capture, ``capture.policy: sampled``): the stride from the CPU budget and
the request rate, where slices fall, counts scaled without moving quantiles, config errors that
name the key, failed switches, and on the real cluster: lines only inside the planned slices, the
agent's windows scaled and marked, the broker left at the idle level."""

from __future__ import annotations

import contextlib
import itertools
import math
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agent.capture import BrokerLoggerSwitch, CaptureScheduler, capture_stride, plan_window
from agent.config import AgentConfig
from agent.requestlog.follow import FileFollower
from agent.requestlog.parse import Drop, LineParser
from agent.requestlog.window import ClosedWindow, WindowAggregator
from linkwatch.sketch import LatencySketch, key_to_value
from testbed.agents import config_for_node
from testbed.cluster import ClusterState
from tests.agent.traffic import create_topic, run_traffic

pytestmark = pytest.mark.minutes(1)

FIXTURE = Path(__file__).parent / "fixtures" / "kafka-request-kraft.log"

# (name, rate req/s, budget %, full cost %, max lines/s, max stride, stride)
STRIDES = [
    ("budget alone: 20 % cost in a 5 % budget", None, 5, 20, 5000, 10, 4),
    ("budget not a divisor rounds up", None, 5, 15.4, 5000, 10, 4),
    ("budget covers full capture", 700, 20, 15, 5000, 10, 1),
    ("quiet broker: the budget decides", 700, 5, 20, 5000, 10, 4),
    ("busy broker: the line cap decides", 50_000, 5, 20, 5000, 10, 10),
    ("busy broker: capped at the shortest slice", 500_000, 5, 20, 5000, 10, 10),
    ("cap of 0 means no cap", 500_000, 5, 20, 0, 10, 4),
    ("rate just over the cap", 20_001, 5, 20, 5000, 10, 5),
    ("no rate seen yet", None, 5, 20, 5000, 2, 2),
]


@pytest.mark.parametrize(
    ("name", "rate", "budget", "cost", "cap", "max_stride", "want"), STRIDES, ids=[s[0] for s in STRIDES]
)
def test_capture_stride(name, rate, budget, cost, cap, max_stride, want) -> None:
    got = capture_stride(
        rate, cpu_budget_pct=budget, full_capture_cost_pct=cost, max_lines_per_s=cap, max_stride=max_stride
    )
    assert got == want


@settings(max_examples=300, deadline=None)
@given(
    window_s=st.integers(1, 300),
    stride=st.integers(1, 20),
    slices=st.integers(1, 10),
    min_slice_ms=st.sampled_from([0, 100, 500, 1000]),
    seed=st.integers(0, 2**32),
    start=st.integers(0, 10**13).map(lambda v: v - v % 1000),
)
def test_slices_lie_in_the_window_in_order_and_add_up(window_s, stride, slices, min_slice_ms, seed, start):
    plan = plan_window(start, window_s, stride, random.Random(seed), slices=slices, min_slice_ms=min_slice_ms)
    window_ms = window_s * 1000
    if stride == 1:
        assert [(sl.on_ms, sl.off_ms) for sl in plan] == [(start, start + window_ms)]
        return
    assert 1 <= len(plan) <= slices + 1  # one slice may wrap to the window's start
    assert all(sl.stride == stride and sl.window_start_ms == start for sl in plan)
    assert all(start <= sl.on_ms < sl.off_ms <= start + window_ms - 50 for sl in plan)
    assert all(a.off_ms <= b.on_ms for a, b in itertools.pairwise(plan))  # in order, apart
    usable = window_ms - 50
    total = sum(sl.off_ms - sl.on_ms for sl in plan)
    assert usable // stride - slices - 1 <= total <= usable // stride  # 1/stride of the window


@pytest.mark.parametrize("slices", [1, 4])
def test_every_moment_of_the_window_is_captured_alike(slices: int) -> None:
    """Random phase, even spacing, wrap-around: a periodic fault cannot hide between slices, and
    periodic work at a fixed phase in the window is sampled as often as the rest. Every
    100 ms of the window (but the last, where the switch back must land) is captured in a
    quarter of the plans at stride 4."""
    rng = random.Random(7)
    plans = [plan_window(0, 10, 4, rng, slices=slices) for _ in range(3000)]
    for ms in range(50, 9900, 100):
        share = sum(1 for plan in plans if any(sl.on_ms <= ms < sl.off_ms for sl in plan)) / len(plans)
        assert 0.21 <= share <= 0.29, (ms, share)


def _windows(lines: list[bytes]) -> list[ClosedWindow]:
    parser, agg = LineParser(), WindowAggregator(cluster="t", broker=1, window_s=10, clock=lambda: 4e9)
    for line in lines:
        with contextlib.suppress(Drop):
            agg.add(parser.parse(line))
    return agg.close_all()


def _at_rank(d: dict, rank: int) -> float:
    seen = d["zero"]
    if rank < seen:
        return 0.0
    for key in sorted(d["buckets"], key=int):
        seen += d["buckets"][key]
        if seen > rank:
            return key_to_value(int(key))
    raise AssertionError("rank beyond the count")


@pytest.mark.parametrize("factor", [1, 2, 4, 7])
def test_scaled_window_multiplies_counts_and_quantiles_stay_the_logged_requests(factor: int) -> None:
    wins = _windows(FIXTURE.read_bytes().splitlines())
    assert wins
    for win in wins:
        scaled = win.scaled(factor)
        assert scaled.requests_seen == factor * win.requests_seen
        assert len(scaled.sketches) == len(win.sketches)
        for raw, s in zip(win.sketches, scaled.sketches, strict=True):
            assert s.capture_ratio == pytest.approx(1 / factor)
            assert s.sketch["count"] == factor * raw.sketch["count"]
            assert s.sketch["sum"] == pytest.approx(factor * raw.sketch["sum"])
            b = LatencySketch.from_dict(s.sketch)
            n = raw.sketch["count"]
            for q in (0.5, 0.9, 0.99, 1.0):
                # each logged request stands for `factor`: the logged requests' own quantile,
                # at the same rank (floor(q (n-1))) or the next one
                rank = math.floor(q * (n - 1))
                assert b.quantile(q) in (
                    _at_rank(raw.sketch, rank),
                    _at_rank(raw.sketch, min(rank + 1, n - 1)),
                )
        for key, (hist, total) in win.histograms.items():
            assert scaled.histograms[key][0] == [c * factor for c in hist]
            assert scaled.histograms[key][1] == pytest.approx(total * factor)
        assert scaled.slow_requests == win.slow_requests


def _cfg(**capture) -> dict:
    return {"broker_id": 1, "capture": capture}


BAD = [
    ("sampled without a listener", _cfg(policy="sampled"), "capture.kafka.bootstrap_servers"),
    ("unknown policy", _cfg(policy="sometimes"), "capture.policy"),
    (
        "zero budget",
        _cfg(policy="sampled", bootstrap_servers="b:9092", cpu_budget_pct=0),
        "capture.cpu_budget_pct",
    ),
    (
        "budget needs slices shorter than min_slice_s",
        _cfg(
            policy="sampled",
            bootstrap_servers="b:9092",
            cpu_budget_pct=1,
            full_capture_cost_pct=20,
            min_slice_s=1,
        ),
        "capture.min_slice_s",
    ),
    (
        "slice longer than the window",
        {
            **_cfg(policy="sampled", bootstrap_servers="b:9092", min_slice_s=20),
            "request_log": {"window_s": 10},
        },
        "request_log.window_s",
    ),
    (
        "idle level that logs requests",
        _cfg(policy="sampled", bootstrap_servers="b:9092", idle_level="DEBUG"),
        "capture.idle_level",
    ),
]


@pytest.mark.parametrize(("name", "data", "names"), BAD, ids=[b[0] for b in BAD])
def test_bad_capture_config_names_the_key(name, data, names) -> None:
    with pytest.raises(ValidationError) as e:
        AgentConfig.model_validate(data)
    assert names.split(".")[-1] in str(e.value)


def test_capture_defaults_change_nothing_on_the_broker() -> None:
    cfg = AgentConfig.model_validate({"broker_id": 1})
    assert cfg.capture.policy == "broker"


def test_an_unreachable_capture_listener_fails_the_switch_in_seconds_naming_the_key(tmp_path: Path) -> None:
    """Not a 30 s bootstrap and the client's retry chatter: one line, through on_error."""
    import socket

    from agent.runner import Agent
    from linkwatch.errors import UnreachableError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends
    cfg = AgentConfig.model_validate(
        {
            **_cfg(policy="sampled", bootstrap_servers=f"127.0.0.1:{port}"),
            "request_log": {"path": str(tmp_path / "r.log"), "position_file": str(tmp_path / "pos")},
        }
    )
    capture = Agent(cfg).capture
    assert capture is not None
    started = time.monotonic()
    with pytest.raises(UnreachableError) as e:
        capture.switch.set_level("DEBUG")
    assert time.monotonic() - started < 5
    assert str(e.value).startswith(
        f"cannot reach Kafka at capture.kafka.bootstrap_servers 127.0.0.1:{port}: connection refused"
    )


class FakeSwitch:
    """A stand-in for BrokerLoggerSwitch where no broker is wanted: it records the levels it was
    asked for and can fail on demand (the real switch is tested on the cluster below)."""

    def __init__(self, fail: bool = False) -> None:
        self.idle_level = "WARN"
        self.dry_run = False
        self.fail = fail
        self.levels: list[str] = []

    def close(self) -> None:
        pass

    def set_level(self, level: str) -> None:
        self.levels.append(level)
        if self.fail:
            raise ConnectionError("broker unreachable")


def test_failed_switches_are_reported_and_no_window_is_scaled() -> None:
    errors: list[str] = []
    switch = FakeSwitch(fail=True)
    sched = CaptureScheduler(
        switch,
        window_s=1,
        cpu_budget_pct=50,
        full_capture_cost_pct=100,
        max_lines_per_s=0,
        min_slice_s=0.2,
        on_error=errors.append,
    ).start()
    time.sleep(2.6)
    sched.stop()
    assert errors and all("ConnectionError" in e for e in errors)
    assert sched.switch_errors == len(errors)
    assert switch.levels[0] == "WARN" and switch.levels[-1] == "WARN"
    now_s = int(time.time())
    assert all(sched.factor(s * 1000) is None for s in range(now_s - 5, now_s + 1))
    # Such windows are kept at the stride they were planned at (a stalled broker's own admin API
    # fails exactly while its windows show it): the planned one where planned, now's otherwise.
    planned = sched.captured()
    assert planned and all(sched.planned_stride(c.window_start_ms) == c.stride for c in planned)
    assert sched.planned_stride(0) == sched.stride == 2


def test_a_window_kept_inexact_is_marked_and_scaled_at_its_planned_stride() -> None:
    for win in _windows(FIXTURE.read_bytes().splitlines()):
        kept = win.scaled(3, exact=False)
        assert kept.requests_seen == 3 * win.requests_seen
        assert {s.capture_exact for s in kept.sketches} == {False}
        assert all(s.capture_ratio == pytest.approx(1 / 3) for s in kept.sketches)
        assert {s.capture_exact for s in win.scaled(3).sketches} == {True}
        # unscaled but inexact: still marked (a full-capture window whose switch went wrong)
        assert {s.capture_exact for s in win.scaled(1, exact=False).sketches} == {False}


def test_dry_run_leaves_the_windows_unscaled() -> None:
    """In a dry run nothing is switched, so the broker logs what its own config says (every
    request, at DEBUG): scaling those windows by the stride would multiply every count."""
    switch = FakeSwitch()
    switch.dry_run = True
    sched = CaptureScheduler(
        switch, window_s=1, cpu_budget_pct=5, full_capture_cost_pct=30, max_lines_per_s=0, min_slice_s=0.1
    )
    assert sched.stride == 6
    assert sched.factor(0) == 1 and sched.factor(123_000) == 1
    switch.dry_run = False
    assert sched.factor(0) is None  # a window it did not plan


def test_stopped_within_a_slice_the_span_covers_it_and_the_window_is_not_scaled() -> None:
    switch = FakeSwitch()
    sched = CaptureScheduler(
        switch, window_s=1, cpu_budget_pct=50, full_capture_cost_pct=100, max_lines_per_s=0, min_slice_s=0.4
    ).start()
    deadline = time.monotonic() + 5
    while switch.levels[-1:] != ["DEBUG"] and time.monotonic() < deadline:
        time.sleep(0.005)
    assert switch.levels[-1:] == ["DEBUG"], switch.levels  # within a slice now
    stopped_ms = int(time.time() * 1000)
    sched.stop()
    last = sched.captured()[-1]
    # The thread switched back itself, before its span ended; stop() switched again.
    assert switch.levels[-2:] == ["WARN", "WARN"]
    on, off = last.spans[-1]
    assert on <= stopped_ms <= off
    assert last.error and sched.factor(last.window_start_ms) is None


def test_full_capture_stride_keeps_debug_on_across_windows() -> None:
    switch = FakeSwitch()
    sched = CaptureScheduler(
        switch, window_s=1, cpu_budget_pct=100, full_capture_cost_pct=50, max_lines_per_s=0, min_slice_s=0.2
    ).start()
    time.sleep(3.5)
    sched.stop()
    assert switch.levels.count("DEBUG") == 1  # switched on once, never off between windows
    done = sched.captured()[:-1]  # the last one was cut short by stop()
    assert len(done) >= 2
    assert [sched.factor(c.window_start_ms) for c in done] == [1] * len(done)


# -- on the real cluster --------------------------------------------------------------------


# The one broker these tests load and whose request logger they switch (not broker 1, the first
# choice of most other real-cluster tests); the fixture below puts its logger back to DEBUG, which
# the session cluster's other tests read.
SWITCHED = 3


@pytest.fixture
def broker3_logger(cluster3: ClusterState, admin) -> Iterator[int]:
    """Broker 3's ``kafka.request.logger``, put back to DEBUG (the session cluster's normal
    state, see ``cluster3``) at teardown whatever the test left it at or raised."""
    assert SWITCHED in {n.node_id for n in cluster3.nodes}
    yield SWITCHED
    BrokerLoggerSwitch(admin, [SWITCHED]).set_level("DEBUG")


def _leader_with_traffic(admin, topic: str, leader: int) -> int:
    create_topic(admin, topic, partitions=1, rf=3, leaders=[leader])
    return leader


# Switch latencies on a shared 2-core machine decide whether a window's slices landed in time.
@pytest.mark.cluster
@pytest.mark.timing
def test_real_broker_logs_only_inside_the_planned_slices(
    cluster3: ClusterState, admin, topic_name: str, broker3_logger: int
) -> None:
    leader = _leader_with_traffic(admin, topic_name, broker3_logger)
    switch = BrokerLoggerSwitch(admin, [leader], idle_level="WARN")
    switch.set_level("WARN")  # the session cluster logs at DEBUG: lines before this are not ours
    time.sleep(0.5)
    follower = FileFollower(cluster3.node(leader).request_log, start_at_end=True)
    follower.read_lines()
    sched = CaptureScheduler(
        switch,
        window_s=2,
        cpu_budget_pct=25,
        full_capture_cost_pct=100,
        max_lines_per_s=0,
        min_slice_s=0.2,
        slices_per_window=2,
    )
    try:
        sched.start()
        run_traffic(cluster3.bootstrap, topic_name, seconds=12, rate=200, group=False)
        sched.stop()
        time.sleep(0.5)
        lines = follower.read_lines(max_bytes=1 << 30)
        windows = sched.captured()
        spans = [span for c in windows for span in c.spans]
        planned = [c for c in windows if sched.factor(c.window_start_ms) == 4]
        assert len(planned) >= 3, windows
        assert all(
            len(c.spans) in (2, 3) for c in planned
        )  # two slices of 0.24 s per 2 s window (one may wrap)
        parser = LineParser()
        stamps = [parser.parse(line).ts_ms for line in lines]
        assert stamps
        outside = [t for t in stamps if not any(on - 1 <= t <= off + 1 for on, off in spans)]
        # On failure: each stray line beside the recorded spans around it, and the last window's
        # planned slices with its spans (a slice cut short by stop() records no span).
        near = [(t, [sp for sp in spans if abs(sp[0] - t) < 1500]) for t in outside]
        last = windows[-1] if windows else None
        assert outside == [], (near, last and [(sl.on_ms, sl.off_ms) for sl in last.slices], last)
        per_window = [
            sum(1 for t in stamps for on, off in c.spans if on - 1 <= t <= off + 1) for c in planned
        ]
        assert all(n > 0 for n in per_window), per_window
        # stopped: the broker is left at the idle level
        run_traffic(cluster3.bootstrap, topic_name, seconds=1.5, rate=100, consume=False)
        time.sleep(0.5)
        assert follower.read_lines(max_bytes=1 << 30) == []
    finally:
        sched.stop()
        follower.close()


@pytest.mark.cluster
@pytest.mark.timing
def test_agent_sampled_windows_are_scaled_marked_and_exported(
    cluster3: ClusterState, admin, topic_name: str, broker3_logger: int
) -> None:
    from agent.runner import Agent

    leader = _leader_with_traffic(admin, topic_name, broker3_logger)
    node = cluster3.node(leader)
    cfg = config_for_node(
        node,
        request_log={"window_s": 2, "grace_s": 0.5},
        capture={
            "policy": "sampled",
            "bootstrap_servers": node.bootstrap,
            "cpu_budget_pct": 25,
            "full_capture_cost_pct": 100,
            "min_slice_s": 0.2,
            "slices_per_window": 2,
        },
        jmx={"jolokia_url": None},
        log_dirs={"paths": []},
    )
    agent = Agent(cfg).start()
    seen: list[ClosedWindow] = []
    agent.listeners.append(seen.append)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        run_traffic(cluster3.bootstrap, topic_name, seconds=10, rate=200, group=False)
        time.sleep(3)
        import urllib.request

        body = (
            urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=5)
            .read()
            .decode()
        )
    finally:
        agent.stop()
        thread.join(10)
    assert len(seen) >= 3
    for win in seen:
        assert win.sketches
        for s in win.sketches:
            assert s.capture_ratio == 0.25
            assert s.sketch["count"] % 4 == 0
    assert agent.health.capture_ratio == 0.25
    assert f'linkwatch_agent_capture_ratio{{broker="{leader}",cluster="default"}} 0.25' in body
    assert agent.health.dropped.get("capture_switch_error", 0) == 0
