"""A real slow broker: pausing broker 2 raises broker 2's stage latencies in the agent's output,
and not the other brokers' (stages that do not wait on broker 2)."""

from __future__ import annotations

import threading
import time

import pytest

from agent.health import Health
from agent.requestlog.source import RequestLogSource
from agent.requestlog.window import ClosedWindow, WindowAggregator
from linkwatch.records import FETCH_CONSUMER
from linkwatch.sketch import LatencySketch
from testbed.cluster import ClusterState
from testbed.faults import PauseDutyCycle
from tests.agent.traffic import create_topic, run_traffic

# Real brokers under faults or live traffic: timing-sensitive on a shared machine (one rerun).
pytestmark = [pytest.mark.minutes(1), pytest.mark.cluster, pytest.mark.timing]

# Pauses of 500 ms: much longer ones made the kafka-python consumer give up on the paused broker's
# requests, which then never complete (and are never logged).
# The broker times a request from when it reads it: a request that arrives while the JVM is
# stopped waits in the socket, unseen. What a pause stretches is the requests already inside the
# broker. So the consumer long-polls (fetch.min.bytes above what 200 ms of traffic brings, max
# wait 200 ms): a fetch sits in purgatory almost all the time, on every broker, and the one on
# broker 2 at each pause is stretched by it (remote 500-700 ms instead of ~200), whatever the
# machine's load. Healthy brokers' fetches wait their 200 ms whatever broker 2 does.
# (Produce is not compared: acks=all produce on the healthy leaders rightly waits for follower 2.)
COMPARED = {
    (FETCH_CONSUMER, stage) for stage in ("requestQueue", "local", "remote", "responseQueue", "total")
}
# Each phase spans at least three whole windows (every window holds two pauses of broker 2).
WINDOW_S = 2
PHASE_S = 8


def p99_by_stage(windows: list[ClosedWindow], since_ms: int, until_ms: int) -> dict[str, float]:
    merged: dict[str, LatencySketch] = {}
    for w in windows:
        if not since_ms <= w.start_ms < until_ms:
            continue
        for s in w.sketches:
            if (s.request, s.stage) in COMPARED:
                merged.setdefault(s.stage, LatencySketch()).merge(LatencySketch.from_dict(s.sketch))
    return {stage: sk.quantile(0.99) or 0.0 for stage, sk in merged.items()}


def test_pausing_broker_2_shows_in_broker_2_only(cluster3: ClusterState, admin, topic_name: str) -> None:
    # Independent of what earlier tests did to the shared cluster: each broker leads one partition
    # (preferred leaders elected if leadership moved), and the consumer is assigned every
    # partition rather than joining a group, so it fetches from all three leaders at once.
    create_topic(admin, topic_name, leaders=[1, 2, 3])
    sources = {
        n.node_id: RequestLogSource(
            n.request_log,
            WindowAggregator(cluster="t", broker=n.node_id, window_s=WINDOW_S, grace_s=1),
            Health(),
        )
        for n in cluster3.nodes
    }
    windows: dict[int, list[ClosedWindow]] = {b: [] for b in sources}

    def poll_for(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for b, s in sources.items():
                windows[b] += s.poll()
            time.sleep(0.5)

    def consuming_everywhere() -> bool:
        return all(
            any(s.request == FETCH_CONSUMER for w in ws for s in w.sketches) for ws in windows.values()
        )

    done = threading.Event()
    traffic = threading.Thread(
        target=run_traffic,
        args=(cluster3.bootstrap, topic_name, 180, 200),
        kwargs={"until": done, "group": False, "fetch_max_wait_ms": 200, "fetch_min_bytes": 1 << 20},
    )
    traffic.start()
    try:
        # Warm-up until the consumer fetches from every broker (slow on a loaded machine).
        deadline = time.monotonic() + 120
        while not consuming_everywhere() and time.monotonic() < deadline:
            poll_for(1)
        assert consuming_everywhere(), "the consumer never fetched from every broker"
        t0 = int(time.time() * 1000)
        poll_for(PHASE_S + 1)
        t1 = int(time.time() * 1000)
        with PauseDutyCycle(cluster3.node(2).pid, pause_ms=500, period_ms=1000):
            poll_for(PHASE_S)
        t2 = int(time.time() * 1000)
    finally:
        done.set()
        traffic.join()
    for b, s in sources.items():
        windows[b] += s.poll() + s.aggregator.close_all()
    ms = WINDOW_S * 1000  # whole windows inside each phase
    before = {b: p99_by_stage(w, t0 - t0 % ms + ms, t1 - t1 % ms) for b, w in windows.items()}
    during = {b: p99_by_stage(w, t1 - t1 % ms + ms, t2 - t2 % ms) for b, w in windows.items()}
    worst = {b: max(during[b].values(), default=0.0) for b in windows}
    baseline = {b: max(before[b].values(), default=0.0) for b in windows}
    msg = f"FetchConsumer p99 by stage before={before} during={during}"
    print(msg)
    assert worst[2] >= 250.0, msg
    assert worst[2] >= 1.5 * baseline[2], msg  # raised on broker 2...
    for other in (1, 3):
        assert worst[2] >= 2 * worst[other], msg  # ...well above the healthy brokers...
        assert worst[other] <= 2 * max(baseline[other], 100.0), msg  # ...which did not rise as much
