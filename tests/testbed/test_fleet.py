"""The synthetic fleet's records, without a broker: shaped as the agent's and decodable by the
record schema, at the capture's rates, deterministic by seed, faults visible in the records
of their victims only."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from agent.requestlog.window import StageAccumulator, ValueMemo
from linkwatch import records as R
from linkwatch.errors import ConfigError
from linkwatch.sketch import LatencySketch
from testbed.cluster import ClusterState
from testbed.fleet import (
    CAPTURE_PROFILE,
    CAPTURE_SOURCE,
    Capture,
    Fault,
    Fleet,
    FleetSpec,
    WindowStats,
    capture_from_log,
    parse_fault,
    publish,
    record_json,
)

ROOT = Path(__file__).resolve().parents[2]
START_MS = 1_800_000_000_000  # a window start (a multiple of 10 s)
WINDOW_MS = 10_000


def records(fleet: Fleet, start_ms: int = START_MS) -> list[R.Record]:
    return [r for chunk in fleet.window(start_ms) for r in chunk]


def sketches(recs: list[R.Record]) -> dict[tuple[int, str, str], R.StageSketch]:
    return {(r.broker, r.request, r.stage): r for r in recs if isinstance(r, R.StageSketch)}


def p99(rec: R.StageSketch) -> float:
    value = LatencySketch.from_dict(rec.sketch).quantile(0.99)
    assert value is not None
    return value


def test_the_shipped_profile_is_the_repository_capture() -> None:
    derived = capture_from_log(ROOT / CAPTURE_SOURCE, source=CAPTURE_SOURCE)
    assert Capture.load(CAPTURE_PROFILE) == derived, "regenerate testbed/fleet_capture.json"
    assert set(derived.rows) == {R.PRODUCE, R.FETCH_CONSUMER, R.FETCH_FOLLOWER}
    # The start-up seconds (topic creation) are left out: no second-long produce.
    assert max(row[-1] for row in derived.rows[R.PRODUCE]) < 1000


def test_every_record_is_the_agents_shape_and_decodes() -> None:
    fleet = Fleet(FleetSpec(brokers=40, seed=3), faults=(Fault("local", 5, START_MS),))
    recs = records(fleet)
    kinds = Counter(r.KIND for r in recs)
    assert kinds[R.StageSketch.KIND] and kinds[R.SlowRequest.KIND]
    per_broker: dict[int, list[R.StageSketch]] = defaultdict(list)
    for rec in recs:
        raw = record_json(rec)
        assert raw == rec.to_json()
        assert R.decode(raw) == rec
        assert rec.cluster == "fleet" and rec.source == f"broker-{rec.broker}"
        if isinstance(rec, R.StageSketch):
            assert rec.ts_ms == START_MS and rec.window_s == 10
            per_broker[rec.broker].append(rec)
        else:
            assert START_MS <= rec.ts_ms < START_MS + WINDOW_MS
    for broker, mine in per_broker.items():
        # The agent's announcement: every stage of every request type it served.
        assert {r.window_sketches for r in mine} == {len(mine)}, broker
        assert len(mine) == len({r.request for r in mine}) * len(R.STAGES)
    assert len({r.dedup_key() for r in recs}) == len(recs)


def test_sketches_are_what_the_agent_builds_from_the_same_requests() -> None:
    fleet = Fleet(FleetSpec(brokers=30))
    rng = np.random.default_rng(7)
    bi, rows = fleet._draw(rng, rng, R.PRODUCE, 0, 30, [])
    got = sketches(fleet._sketches(START_MS, 0, R.PRODUCE, bi, rows, np.full(30, 21)))
    for (broker, _, stage), rec in got.items():
        acc = StageAccumulator()
        acc.fold(Counter(rows[bi == broker - 1, R.STAGES.index(stage)].tolist()), ValueMemo())
        want = acc.sketch_dict()
        assert {k: v for k, v in rec.sketch.items() if k != "sum"} == {
            k: v for k, v in want.items() if k != "sum"
        }
        assert rec.sketch["sum"] == pytest.approx(want["sum"], rel=1e-12)


def test_rates_follow_the_capture_and_the_leadership_weights() -> None:
    fleet = Fleet(FleetSpec(brokers=200, seed=5))
    capture = fleet.capture
    served: Counter[tuple[int, str]] = Counter()
    windows = 5
    for w in range(windows):
        for rec in records(fleet, START_MS + w * WINDOW_MS):
            if isinstance(rec, R.StageSketch) and rec.stage == "total":
                served[(rec.broker, rec.request)] += rec.sketch["count"]
    weight = fleet.layout.weight
    idle = set((np.nonzero(weight == 0)[0] + 1).tolist())
    assert len(idle) == 4  # 2 % of 200
    assert not {b for b, _ in served} & idle, "an idle broker published stage sketches"
    for request in (R.PRODUCE, R.FETCH_CONSUMER):
        total = sum(n for (_, r), n in served.items() if r == request)
        expected = capture.rate_per_s(request) * 10 * windows * weight.sum()
        assert total == pytest.approx(expected, rel=0.05), request
    # Skewed leaders: the busiest broker serves several times the median broker.
    produce = sorted(n for (_, r), n in served.items() if r == R.PRODUCE)
    assert served[(fleet.busiest(), R.PRODUCE)] == produce[-1]
    assert produce[-1] > 4 * produce[len(produce) // 2]


def test_racks_and_rack_aware_followers() -> None:
    layout = Fleet(FleetSpec(brokers=400)).layout
    assert len(set(layout.rack.tolist())) == 10  # 400 brokers: about 40 a rack
    inner = layout.followers[:-2]  # the last ids wrap around to the first
    leaders_rack = layout.rack[: len(inner)]
    assert (layout.rack[inner - 1] != leaders_rack[:, None]).all()
    assert len({tuple(sorted(layout.rack[row - 1])) for row in inner}) > 1


def test_same_seed_same_bytes_other_seed_other_records() -> None:
    def window_bytes(seed: int) -> list[bytes]:
        return [record_json(r) for r in records(Fleet(FleetSpec(brokers=60, seed=seed, chunk_brokers=25)))]

    assert window_bytes(11) == window_bytes(11)
    assert window_bytes(11) != window_bytes(12)
    # A window does not depend on what was generated before it.
    fleet = Fleet(FleetSpec(brokers=60, seed=11, chunk_brokers=25))
    records(fleet, START_MS - WINDOW_MS)
    assert [record_json(r) for r in records(fleet)] == window_bytes(11)


@pytest.mark.parametrize(
    ("kind", "stage", "request_type"),
    [("local", "local", R.PRODUCE), ("queue", "requestQueue", R.FETCH_CONSUMER)],
)
def test_a_fault_moves_its_victims_stage_and_no_other_broker(
    kind: str, stage: str, request_type: str
) -> None:
    spec = FleetSpec(brokers=60, seed=2)
    healthy = Fleet(spec)
    victim = healthy.busiest()
    faulty = Fleet(spec, faults=(Fault(kind, victim, START_MS + WINDOW_MS, extra_ms=400.0),))
    before, during = sketches(records(faulty)), sketches(records(faulty, START_MS + WINDOW_MS))
    assert before == sketches(records(healthy))  # not yet active
    clean = sketches(records(healthy, START_MS + WINDOW_MS))
    assert p99(during[(victim, request_type, stage)]) > p99(clean[(victim, request_type, stage)]) + 300
    assert p99(during[(victim, request_type, "total")]) > 300
    others = {k: v for k, v in during.items() if k[0] != victim}
    assert others == {k: v for k, v in clean.items() if k[0] != victim}


def test_a_slow_follower_makes_the_leaders_it_follows_wait() -> None:
    spec = FleetSpec(brokers=30, seed=4)
    healthy = Fleet(spec)
    follower = healthy.busiest()
    leaders = set(healthy.layout.leaders_of(follower).tolist())
    assert leaders and follower not in leaders
    during = sketches(records(Fleet(spec, faults=(Fault("follower", follower, START_MS, extra_ms=500.0),))))
    clean = sketches(records(healthy))
    for (broker, request, stage), rec in during.items():
        if request == R.PRODUCE and stage == "remote" and broker in leaders:
            assert p99(rec) > p99(clean[(broker, request, stage)]) + 300
        elif broker not in leaders:
            assert rec == clean[(broker, request, stage)]


def test_the_exemplars_are_the_slow_requests() -> None:
    victim = Fleet(FleetSpec(brokers=20)).busiest()
    recs = records(Fleet(FleetSpec(brokers=20), faults=(Fault("queue", victim, START_MS, extra_ms=800.0),)))
    slow = [r for r in recs if isinstance(r, R.SlowRequest)]
    theirs = [r for r in slow if r.broker == victim]
    assert 0 < len([r for r in theirs if r.request == R.PRODUCE]) <= 20
    for r in slow:
        waited = r.stages_ms["remote"] if r.request != R.PRODUCE else 0.0
        assert r.stages_ms["total"] - waited >= 300


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: FleetSpec(brokers=0), "brokers 0"),
        (lambda: FleetSpec(brokers=10, idle_fraction=1.0), "idle_fraction"),
        (lambda: FleetSpec(brokers=10, racks=2), "racks 2"),
        (lambda: Fault("disk", 1, 0), "kind 'disk'"),
        (lambda: Fleet(FleetSpec(brokers=10), faults=(Fault("local", 11, 0),)), "broker 11"),
        (lambda: parse_fault("local", 0), "KIND:BROKER"),
        (lambda: parse_fault("local:x", 0), "KIND:BROKER"),
    ],
)
def test_bad_settings_are_named(make, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_parse_fault() -> None:
    assert parse_fault("follower:7:250", 10_000) == Fault("follower", 7, 10_000, None, 250.0)
    assert parse_fault("queue:3", 0, 20_000) == Fault("queue", 3, 0, 20_000, 400.0)


class FakeProducer:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock
        self.sent: list[tuple[float, str, bytes, bytes]] = []
        self.closed = False

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.sent.append((self.clock[0], topic, key, value))

    def flush(self) -> None:
        self.clock[0] += 0.5  # a flush takes time

    def close(self, timeout: float) -> None:
        self.closed = True


def test_publish_sends_each_window_after_its_end_and_grace_keyed_as_the_agent() -> None:
    fleet = Fleet(FleetSpec(brokers=12, window_s=10, grace_s=1.0))
    now = [START_MS / 1000 + 3.0]  # 3 s into a window
    producer = FakeProducer(now)
    stats: list[WindowStats] = []

    def sleep(s: float) -> None:
        now[0] += s

    n = publish(
        fleet,
        "unused",
        "t",
        windows=3,
        on_window=stats.append,
        clock=lambda: now[0],
        sleep=sleep,
        producer=producer,
    )
    assert n == 3 and producer.closed
    assert [s.start_ms for s in stats] == [START_MS, START_MS + WINDOW_MS, START_MS + 2 * WINDOW_MS]
    for s in stats:
        window = [
            (t, k, v)
            for t, _, k, v in producer.sent
            if R.decode(v).ts_ms // WINDOW_MS * WINDOW_MS == s.start_ms
        ]
        assert len(window) == s.records and sum(len(v) for _, _, v in window) == s.bytes
        assert min(t for t, _, _ in window) >= (s.start_ms + WINDOW_MS) / 1000 + 1.0
        for _, key, value in window:
            assert key == R.decode(value).dedup_key().encode()
    assert {topic for _, topic, _, _ in producer.sent} == {"t"}


def test_the_command_names_a_bad_setting_before_connecting(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    assert main(["fleet", "--bootstrap", "127.0.0.1:1", "--brokers", "0"]) == 2
    assert "brokers 0" in capsys.readouterr().err
    assert main(["fleet", "--bootstrap", "127.0.0.1:1", "--fault", "disk:1"]) == 2
    assert "kind 'disk'" in capsys.readouterr().err


def test_the_command_names_a_missing_topic_instead_of_waiting_for_it(
    cluster3: ClusterState, capsys: pytest.CaptureFixture[str]
) -> None:
    """The session cluster creates no topic on use (as production's): the command says which topic
    is missing, in one line, rather than a producer waiting a minute for its metadata."""
    from cli.main import main

    argv = ["fleet", "--bootstrap", cluster3.bootstrap, "--topic", "no-such-samples", "--brokers", "3"]
    assert main([*argv, "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("linkwatch: error: topic no-such-samples does not exist")


def test_latency_scale_scales_every_stage_time_and_the_typical_broker_leads() -> None:
    spec = FleetSpec(brokers=50, seed=9)
    half = Fleet(FleetSpec(brokers=50, seed=9, latency_scale=0.5))
    full, scaled = sketches(records(Fleet(spec))), sketches(records(half))
    for k, rec in full.items():
        assert scaled[k].sketch["sum"] == pytest.approx(rec.sketch["sum"] / 2, rel=1e-9)
    typical = half.typical()
    weights = half.layout.weight
    assert 0 < weights[typical - 1] < weights.max()
