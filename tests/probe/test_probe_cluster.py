"""The probe on the real 3-broker cluster: it creates its topic with one partition led by every
broker, puts leadership back when it drifts, and — with broker 2 paused in a duty cycle —
sees broker 2's latency rise and its availability drop while brokers 1 and 3 stay fine; both
recover after the fault. The windows it measured feed the analyzer's probe verdict."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer, TopicPartition

from analyzer.probe_evidence import CORROBORATES, probe_evidence
from linkwatch.aggregates import Aggregates, ProbeBrokerWindow
from linkwatch.records import ProbeSample, decode
from probe.commits import OFFSETS_TOPIC, CommitWindow, coordinator_partition
from probe.config import ProbeConfig
from probe.ledger import BrokerWindow
from probe.service import ProbeService
from probe.topic import owners, read_view
from testbed.faults import PauseDutyCycle, restore_preferred_leaders
from testbed.load import ensure_topic
from tests.probe.cluster_config import probe_config

pytestmark = [pytest.mark.minutes(1), pytest.mark.cluster, pytest.mark.timing, pytest.mark.timeout(300)]

WINDOW_S = 2
DEADLINE_MS = 500  # a probe sent early in a 800 ms pause is read back too late
PAUSE_MS, PERIOD_MS = 800, 1000


class Run:
    """The probe service in a thread; windows recorded with the phase they fell in."""

    def __init__(self, cfg: ProbeConfig) -> None:
        self.service = ProbeService(cfg)
        self.phase = "warmup"
        self.windows: list[tuple[str, int, dict[int, BrokerWindow]]] = []
        self.commit_windows: list[list[CommitWindow]] = []  # per probe window
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self.service.run, args=(self.stop, self._on_window), daemon=True
        )

    def _on_window(self, start_ms: int, windows: dict[int, BrokerWindow]) -> None:
        self.windows.append((self.phase, start_ms, windows))
        self.commit_windows.append(list(self.service.last_commits.values()))

    def commits_since(self, first: int) -> list[CommitWindow]:
        return [w for ws in self.commit_windows[first:] for w in ws]

    def wait_windows(self, phase: str, n: int, timeout_s: float = 60) -> None:
        self.phase = phase
        deadline = time.monotonic() + timeout_s
        while sum(p == phase for p, _, _ in self.windows) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sum(p == phase for p, _, _ in self.windows) >= n, f"fewer than {n} windows in {phase}"

    def of(self, phase: str) -> list[dict[int, BrokerWindow]]:
        return [w for p, _, w in self.windows if p == phase][1:]  # the first straddles the change


@pytest.fixture
def probe_run(cluster3, admin) -> Iterator[Run]:
    samples = f"samples-{uuid.uuid4().hex[:8]}"
    ensure_topic(admin, samples, 3, 3)  # the probe publishes there; the cluster creates none on use
    cfg = probe_config(
        cluster3.bootstrap,
        WINDOW_S,
        deadline_ms=DEADLINE_MS,
        forget_after_ms=10_000,
        samples_topic=samples,
    )
    run = Run(cfg)
    run.thread.start()
    try:
        yield run
    finally:
        run.stop.set()
        run.thread.join(30)
        run.service.close()


def quantile(windows: list[dict[int, BrokerWindow]], broker: int, q: float) -> float:
    """Median over windows of the broker's end-to-end ``q`` quantile (ms)."""
    return statistics.median(w[broker].end_to_end.quantile(q) or 0.0 for w in windows if broker in w)


def p99(windows: list[dict[int, BrokerWindow]], broker: int) -> float:
    return quantile(windows, broker, 0.99)


def availability(windows: list[dict[int, BrokerWindow]], broker: int) -> float:
    ok = sum(w[broker].ok for w in windows if broker in w)
    decided = sum(w[broker].decided for w in windows if broker in w)
    return ok / decided if decided else 0.0


def test_probe_isolates_a_paused_broker_and_sees_it_recover(cluster3, admin, probe_run: Run) -> None:
    run = probe_run
    topic = run.service.config.topic.name
    run.wait_windows("baseline", 4)
    assert owners(read_view(admin, topic)) == {1: 0, 2: 1, 3: 2}  # created: one partition per broker
    with PauseDutyCycle(cluster3.node(2).pid, pause_ms=PAUSE_MS, period_ms=PERIOD_MS):
        run.wait_windows("fault", 6)
    run.wait_windows("recovered", 5)

    base, fault, rec = run.of("baseline"), run.of("fault"), run.of("recovered")
    table = {
        phase: {
            b: (round(quantile(ws, b, 0.5)), round(p99(ws, b)), round(availability(ws, b), 3))
            for b in (1, 2, 3)
        }
        for phase, ws in (("baseline", base), ("fault", fault), ("recovered", rec))
    }
    print(f"end-to-end p50 and p99 ms (median of windows), availability: {table}")

    # What the pause does, by its mechanism: a probe to broker 2 sent while it is stopped waits
    # out the rest of the pause, so with an 800 ms pause in every 1,000 ms, 80 % of its probes
    # wait a uniform 0–800 ms: its median rises by ~300 ms, its p99 to ~800 ms, and the 30 % that
    # wait over DEADLINE_MS (500 ms) are unavailable. Nothing of it reaches the probes that
    # brokers 1 and 3 lead. The suite's load stalls this process and the brokers now and then,
    # which delays some probes of every broker alike (loaded runs had the peers' p99 at 424 and
    # 925 ms and their availability at 0.83–0.96 in the fault, while idle runs had 20–30 ms and
    # 1.0). So broker 2 is judged by what it carries above its peers in the same windows: at its
    # median (a stall is a minority of probes, the pause most of them), and in availability.
    def median_excess(ws: list[dict[int, BrokerWindow]], b: int) -> float:
        return quantile(ws, b, 0.5) - max(quantile(ws, peer, 0.5) for peer in (1, 3))

    def unavailable_excess(ws: list[dict[int, BrokerWindow]], b: int) -> float:
        return min(availability(ws, peer) for peer in (1, 3)) - availability(ws, b)

    pause_share = (PAUSE_MS - DEADLINE_MS) / PERIOD_MS  # of broker 2's probes past the deadline
    assert p99(fault, 2) > 300.0, table
    assert median_excess(fault, 2) > PAUSE_MS / 4, table
    assert unavailable_excess(fault, 2) > pause_share / 2, table
    # Broker 2 recovers: it no longer carries the pause.
    assert median_excess(rec, 2) < PAUSE_MS / 8, table
    assert unavailable_excess(rec, 2) < pause_share / 2, table

    # What the analyzer makes of it: the probe corroborates a finding against broker 2.
    rows = [
        ProbeBrokerWindow(
            broker=b,
            window_start_ms=start,
            sent=w.sent,
            ok=w.ok,
            decided=w.decided,
            availability=w.availability,
            produce_p50_ms=w.produce.quantile(0.5),
            produce_p99_ms=w.produce.quantile(0.99),
            end_to_end_p50_ms=w.end_to_end.quantile(0.5),
            end_to_end_p99_ms=w.end_to_end.quantile(0.99),
        )
        for phase, start, ws in run.windows
        for b, w in ws.items()
        if phase == "fault"
    ]
    starts = sorted({r.window_start_ms for r in rows})
    verdict = probe_evidence(Aggregates(cluster="c1", window_s=WINDOW_S, probes=rows), 2, starts)
    assert verdict["verdict"] == CORROBORATES, verdict

    # And the windows reached the samples topic as ProbeSample records for every broker. (The
    # probe still publishes a window every 2 s: read until every broker is seen, bounded.)
    consumer = KafkaConsumer(
        run.service.config.samples_topic, bootstrap_servers=cluster3.bootstrap, auto_offset_reset="earliest"
    )
    brokers: set[int] = set()
    deadline = time.monotonic() + 30
    try:
        while brokers != {1, 2, 3} and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000).values():
                brokers |= {
                    s.broker for s in map(decode, (m.value for m in batch)) if isinstance(s, ProbeSample)
                }
    finally:
        consumer.close()
    assert brokers == {1, 2, 3}


def test_probe_puts_a_moved_partition_back(cluster3, admin, probe_run: Run) -> None:
    """Broker 2's partition moved to broker 3 (as an operator's or a tool's reassignment would
    leave it): broker 2 owns no partition, and broker 3 two; the probe gives one of them to
    broker 2 (by Rule 1 broker 3 keeps the lower-numbered one)."""
    run = probe_run
    topic = run.service.config.topic.name
    run.wait_windows("baseline", 2)
    admin.alter_partition_reassignments({TopicPartition(topic, 1): [3]})

    def settled() -> bool:
        view = read_view(admin, topic)
        own = owners(view)
        return (
            run.service.metrics.topic_actions["reassign"] >= 1
            and set(own) == {1, 2, 3}  # which partition broker 2 gets back is the plan's choice
            and all(view.leaders[p] == b for b, p in own.items())
        )

    deadline = time.monotonic() + 60
    while not settled() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert settled(), (read_view(admin, topic), run.service.metrics.topic_actions)
    run.wait_windows("after", 2)
    assert set(run.of("after")[-1]) == {1, 2, 3}  # every broker probed again


def offsets_leaders(admin) -> dict[int, int]:
    [t] = admin.describe_topics([OFFSETS_TOPIC])
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def test_commit_latency_per_coordinator_broker_follows_leadership(cluster3, admin, probe_run: Run) -> None:
    """One probe group coordinated by every broker, each commit timed into that broker's window;
    when the coordinator of broker 2's group moves to broker 1, broker 2 gets another group."""
    run = probe_run
    service = run.service
    assert service.commits is not None
    deadline = time.monotonic() + 60  # a fresh cluster gets __consumer_offsets from the probe
    while time.monotonic() < deadline and not service.commits.groups:
        time.sleep(0.5)
    # A broker that leads no __consumer_offsets partition coordinates no group (an earlier test
    # that paused or stopped a broker can leave it so until Kafka's 5-min leader rebalance):
    # the probe rightly gives it no group. Balance leadership first, as on a settled cluster.
    restore_preferred_leaders(admin, [OFFSETS_TOPIC])
    while time.monotonic() < deadline + 30 and len(service.commits.groups) < 3:
        time.sleep(0.5)
    groups = dict(service.commits.groups)
    assert set(groups) == {1, 2, 3}
    # A coordinator still loading a just-created __consumer_offsets answers NOT_COORDINATOR for
    # a moment (counted as an error, as it should be): judge the windows after that one.
    run.wait_windows("warm-up", 1)
    first = len(run.commit_windows) + 1  # the window in progress may hold a commit before the pick
    run.wait_windows("commits", 4)
    leaders = offsets_leaders(admin)
    for b, g in groups.items():  # the broker Kafka itself names as coordinator
        assert leaders[coordinator_partition(g, len(leaders))] == b
        committed = admin.list_group_offsets([g])[g]
        assert committed[TopicPartition(service.config.topic.name, 0)].offset >= 1
    settled = run.commits_since(first)
    for b in (1, 2, 3):
        assert sum(w.ok for w in settled if w.broker == b) >= 3, (b, settled)
    assert all(w.latency.count == w.ok for w in settled)
    assert all(not w.errors for w in settled), settled
    assert (
        service.registry.get_sample_value(
            "linkwatch_probe_commit_latency_seconds", {"cluster": "c1", "broker": "2", "quantile": "0.99"}
        )
        > 0
    )

    # Leadership of broker 2's group's __consumer_offsets partition moves to broker 1.
    part = coordinator_partition(groups[2], len(leaders))
    [t] = admin.describe_topics([OFFSETS_TOPIC])
    replicas = next(p["replica_nodes"] for p in t["partitions"] if p["partition_index"] == part)
    tp = TopicPartition(OFFSETS_TOPIC, part)
    try:
        admin.alter_partition_reassignments({tp: [1] + [r for r in replicas if r != 1]})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and offsets_leaders(admin)[part] != 1:
            admin.elect_leaders(0, {OFFSETS_TOPIC: [part]}, raise_errors=False)
            time.sleep(0.5)
        assert offsets_leaders(admin)[part] == 1
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and service.commits.groups.get(2) in (None, groups[2]):
            time.sleep(0.5)
        moved = dict(service.commits.groups)
        assert moved[2] != groups[2] and moved[1] == groups[1] and moved[3] == groups[3]
        first = len(run.commit_windows)
        run.wait_windows("moved", 3)
        assert sum(w.ok for w in run.commits_since(first) if w.broker == 2) >= 3  # broker 2 measured again
    finally:
        admin.alter_partition_reassignments({tp: list(replicas)})
        admin.elect_leaders(0, {OFFSETS_TOPIC: [part]}, raise_errors=False)


def test_unknown_partitions_are_retried_not_fatal(cluster3) -> None:
    """A broker that does not know the probed partitions yet (just after the topic's creation,
    as a full CI run once hit: the probe loop died on UnknownTopicOrPartition) is asked again a
    second later; here the real broker answers for a topic that does not exist."""
    cfg = probe_config(
        cluster3.bootstrap, 2, topic={"name": f"no-such-{uuid.uuid4().hex[:8]}"}, publish_samples=False
    )
    service = ProbeService(cfg)
    try:
        service._ensure_consumer(frozenset({0, 1}))
        assert service.consumer_retries == 1
        assert service._consumer is None
        service._ensure_consumer(frozenset({0, 1}))  # within the retry delay: not asked again
        assert service.consumer_retries == 1
        time.sleep(1.1)
        service._ensure_consumer(frozenset({0, 1}))
        assert service.consumer_retries == 2
    finally:
        service.close()
