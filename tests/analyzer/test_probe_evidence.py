"""The probe's verdict on a suspected broker: a table of scenarios (corroborates by latency or
availability, contradicts, no data, low-latency noise), and the slow-broker finding citing it."""

from __future__ import annotations

import dataclasses

import pytest

from analyzer.probe_evidence import CONTRADICTS, CORROBORATES, NO_DATA, probe_evidence
from analyzer.slow_broker import SlowBrokerConfig, SlowBrokerDetector
from linkwatch.aggregates import Aggregates, ProbeBrokerWindow
from tests.analyzer.test_slow_broker import jitter, now_after, scenario, slow_in, waiting, window

WINDOWS = [window(i) for i in range(3, 8)]


def probe_row(
    broker: int,
    i: int,
    e2e_p99: float = 12.0,
    ok: int = 10,
    decided: int = 10,
    commit_p99: float | None = None,
) -> ProbeBrokerWindow:
    return ProbeBrokerWindow(
        broker=broker,
        window_start_ms=window(i),
        sent=decided,
        ok=ok,
        decided=decided,
        availability=ok / decided if decided else None,
        produce_p50_ms=3.0,
        produce_p99_ms=e2e_p99 / 2,
        end_to_end_p50_ms=e2e_p99 / 3,
        end_to_end_p99_ms=e2e_p99,
        commit_p99_ms=commit_p99,
    )


def rows(
    special: dict[int, dict] | None = None, brokers=(0, 1, 2), windows=range(8)
) -> list[ProbeBrokerWindow]:
    special = special or {}
    return [probe_row(b, i, **special.get(b, {})) for b in brokers for i in windows]


# (id, probe rows, expected verdict, expected reason fragment)
CASES = [
    ("slow end to end", rows({2: {"e2e_p99": 900.0}}), CORROBORATES, "end-to-end p99 above"),
    ("unavailable", rows({2: {"ok": 6}}), CORROBORATES, "availability below"),
    ("both", rows({2: {"e2e_p99": 900.0, "ok": 2}}), CORROBORATES, "p99 above its peers' and availability"),
    ("in line with peers", rows(), CONTRADICTS, "in line with its peers"),
    ("above peers but under the floor (noise)", rows({2: {"e2e_p99": 60.0}}), CONTRADICTS, "in line"),
    ("the whole cluster is slow", rows({b: {"e2e_p99": 900.0} for b in (0, 1, 2)}), CONTRADICTS, "in line"),
    ("no probe rows at all", [], NO_DATA, "no probe sample for broker 2"),
    ("only outside the windows", rows({2: {"e2e_p99": 900.0}}, windows=range(3)), NO_DATA, "no probe sample"),
    ("no peer probed", rows({2: {"e2e_p99": 900.0}}, brokers=(2,)), NO_DATA, "no probe sample of any peer"),
    ("nothing decided, fast", rows({2: {"ok": 0, "decided": 0}}), CONTRADICTS, "in line"),
]


@pytest.mark.parametrize(("probes", "verdict", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_probe_verdict(probes: list[ProbeBrokerWindow], verdict: str, reason: str) -> None:
    data = Aggregates(cluster="c1", window_s=10, probes=probes)
    ev = probe_evidence(data, 2, WINDOWS)
    assert (ev["verdict"], reason in ev["reason"]) == (verdict, True)


# (id, probe rows, expected verdict, own commit p99, peers' median commit p99, reason fragment or
# None when the reason must not mention commits). Commit latency is reported, never judged.
COMMIT_CASES = [
    ("no broker coordinated a commit", rows(), CONTRADICTS, None, None, None),
    (
        "every broker coordinates commits",
        rows({b: {"commit_p99": 10.0 * (b + 1)} for b in (0, 1, 2)}),
        CONTRADICTS,
        30.0,
        15.0,
        "in line with its peers; offset commit p99 30.0 ms (peers' median 15.0 ms)",
    ),
    (
        "slow commits alone do not corroborate",
        rows({2: {"commit_p99": 800.0}, 0: {"commit_p99": 9.0}}),
        CONTRADICTS,
        800.0,
        9.0,
        "offset commit p99 800.0 ms (peers' median 9.0 ms)",
    ),
    (
        "only the suspect coordinates: no peer figure",
        rows({2: {"e2e_p99": 900.0, "commit_p99": 50.0}}),
        CORROBORATES,
        50.0,
        None,
        "end-to-end p99 above its peers'; offset commit p99 50.0 ms",
    ),
    (
        "a peer coordinates, the suspect does not",
        rows({0: {"commit_p99": 20.0}}),
        CONTRADICTS,
        None,
        20.0,
        None,
    ),
    (
        "commits in some windows only: the median of those",
        [*rows(windows=range(5)), *rows({2: {"commit_p99": 70.0}}, windows=range(5, 8))],
        CONTRADICTS,
        70.0,
        None,
        "offset commit p99 70.0 ms",
    ),
]


@pytest.mark.parametrize(
    ("probes", "verdict", "own", "peers", "reason"),
    [c[1:] for c in COMMIT_CASES],
    ids=[c[0] for c in COMMIT_CASES],
)
def test_probe_evidence_reports_commit_p99(
    probes: list[ProbeBrokerWindow], verdict: str, own: float | None, peers: float | None, reason: str | None
) -> None:
    ev = probe_evidence(Aggregates(cluster="c1", window_s=10, probes=probes), 2, WINDOWS)
    assert (ev["verdict"], ev["values"]["commit_p99_ms"], ev["peers"]["median_commit_p99_ms"]) == (
        verdict,
        own,
        peers,
    )
    if reason is None:
        assert "commit" not in ev["reason"]
    else:
        assert ev["reason"].endswith(reason), ev["reason"]


def test_slow_broker_finding_cites_the_probe() -> None:
    stages = scenario(8, 3, {2: slow_in(range(3, 8))})
    detector = SlowBrokerDetector(SlowBrokerConfig())
    for probes, verdict in [
        (rows({2: {"e2e_p99": 900.0, "ok": 5}}), CORROBORATES),
        (rows(), CONTRADICTS),
        ([], NO_DATA),
    ]:
        data = dataclasses.replace(stages, probes=probes)
        (finding,) = detector.detect(data, now_after(8))
        assert finding.subject == "broker:2"
        assert finding.evidence["probe"]["verdict"] == verdict
    assert finding.evidence["probe"]["windows"] == finding.evidence["windows"]


@pytest.mark.parametrize(("probe_ratio", "verdict"), [(3.0, CONTRADICTS), (2.0, CORROBORATES)])
def test_the_findings_probe_verdict_reads_the_models_probe_line(probe_ratio: float, verdict: str) -> None:
    # Broker 2's end-to-end p99 at 2.5x its peers' and over the floor: by the model's default
    # probe_ratio (3) the probe does not find it slow, and the finding must not say it does.
    stages = scenario(8, 3, {2: slow_in(range(3, 8))})
    probes = rows({0: {"e2e_p99": 100.0}, 1: {"e2e_p99": 100.0}, 2: {"e2e_p99": 250.0}})
    cfg = SlowBrokerConfig(probe_ratio=probe_ratio)
    (finding,) = SlowBrokerDetector(cfg).detect(dataclasses.replace(stages, probes=probes), now_after(8))
    assert finding.evidence["probe"]["verdict"] == verdict
    assert finding.evidence["probe"]["baseline"]["peer_ratio"] == probe_ratio


def test_slow_broker_finding_cites_the_probes_commit_p99() -> None:
    stages = scenario(8, 3, {2: slow_in(range(3, 8))})
    probes = rows({2: {"e2e_p99": 900.0, "commit_p99": 420.0}, 1: {"commit_p99": 12.0}})
    (finding,) = SlowBrokerDetector(SlowBrokerConfig()).detect(
        dataclasses.replace(stages, probes=probes), now_after(8)
    )
    probe = finding.evidence["probe"]
    assert (probe["verdict"], probe["values"]["commit_p99_ms"], probe["peers"]["median_commit_p99_ms"]) == (
        CORROBORATES,
        420.0,
        12.0,
    )
    assert "offset commit p99 420.0 ms (peers' median 12.0 ms)" in probe["reason"]


def _probe(broker: int, i: int, produce_p99: float, e2e_p99: float) -> ProbeBrokerWindow:
    return dataclasses.replace(probe_row(broker, i, e2e_p99=e2e_p99), produce_p99_ms=produce_p99)


@pytest.mark.parametrize(
    ("brokers", "leader_produce_ms", "expected"),
    [
        # Its produce is fine: its end-to-end holds the wait on broker 2 (a record is read back
        # once replicated); broker 2 explains both leaders' waits, and leader 0 is not named.
        (3, 20.0, {"broker:2"}),
        # Its produce alone is slow too (acks=1: no replication in it): it stalls itself.
        (5, 400.0, {"broker:0", "broker:2"}),
        # The same on three brokers is two of three stalled for their clients: the cluster's
        # (step 5 counts the probe's blame as any other), no broker finding.
        (3, 400.0, set()),
    ],
)
def test_a_waiting_leader_slow_to_the_probe_only_end_to_end_is_no_stall_of_its_own(
    brokers: int, leader_produce_ms: float, expected: set[str]
) -> None:
    # A heap-dump storm on follower 2 (run 4's d29): leaders 0 and 1 wait ~1 s on it in remote;
    # its own timers see nothing (its clock starts when it reads a request). Leader 0 served a
    # little less (its producers block on the wait) and the probe reads it back late.
    fault = range(8, 12)
    special: dict[int, dict[int, dict]] = {
        b: {i: {**jitter(b, i), "count": 100} for i in range(8)} for b in range(brokers)
    }
    for i in fault:
        special[0][i] = {**waiting(1000.0), "count": 55}
        special[1][i] = waiting(1000.0)
        for b in range(2, brokers):
            special[b][i] = {**jitter(b, i), "count": 100}
    stages = scenario(12, brokers, special)
    in_fault = {0: (leader_produce_ms, 400.0), 1: (5.0, 100.0), 2: (950.0, 1000.0)}  # produce, e2e
    probes = [
        _probe(b, i, *(in_fault.get(b, (5.0, 12.0)) if i in fault else (5.0, 12.0)))
        for b in range(brokers)
        for i in range(12)
    ]
    findings = SlowBrokerDetector(SlowBrokerConfig()).detect(
        dataclasses.replace(stages, probes=probes), now_after(12)
    )
    slow = {f.subject: f.evidence["stage"] for f in findings if f.rule == "slow_broker"}
    assert set(slow) == expected, slow
    if expected:
        assert slow["broker:2"] in ("remote", "unseen")
    else:
        assert "cluster_slow" in {f.rule for f in findings}, [f.rule for f in findings]


@pytest.mark.parametrize(
    ("leader_produce_ms", "stage"),
    [
        # A slow path to broker 2 (a congested link, recovery bench d04 of seed 2027): its acks=1
        # probes are late (no replication in them), and as a leader it waits on followers that
        # no other leader waits on: their fetch responses travel the same path. Its own.
        (600.0, "unseen"),
        # The same wait with its acks=1 probes in line (read back late only): the wait is on a
        # follower the model cannot name, not the leader's own.
        (5.0, "remote"),
    ],
)
def test_a_leader_whose_acks1_probes_are_late_keeps_its_unexplained_wait_as_its_own_path(
    leader_produce_ms: float, stage: str
) -> None:
    fault = range(8, 12)
    special: dict[int, dict[int, dict]] = {
        b: {i: {**jitter(b, i), "count": 100} for i in range(12)} for b in range(3)
    }
    for i in fault:
        special[2][i] = {**waiting(700.0), "count": 100}
    stages = scenario(12, 3, special)
    probes = [
        _probe(b, i, *((leader_produce_ms, 900.0) if b == 2 and i in fault else (5.0, 12.0)))
        for b in range(3)
        for i in range(12)
    ]
    findings = SlowBrokerDetector(SlowBrokerConfig()).detect(
        dataclasses.replace(stages, probes=probes), now_after(12)
    )
    slow = {f.subject: f.evidence["stage"] for f in findings if f.rule == "slow_broker"}
    assert slow == {"broker:2": stage}, [(f.rule, f.subject, f.evidence.get("families")) for f in findings]


def _tail_row(broker: int, i: int, p90: float, p99: float) -> ProbeBrokerWindow:
    """A probe row whose produce and end-to-end p90 and p99 are as given (40 probes decided)."""
    return dataclasses.replace(
        probe_row(broker, i, e2e_p99=p99, ok=40, decided=40),
        produce_p99_ms=p99,
        produce_p90_ms=p90,
        end_to_end_p90_ms=p90,
    )


# (id, {broker: (p90, p99)} in one window, the brokers the probe blames)
TAIL_CASES = [
    ("a stalled leader delays a share of its probes", {0: (30, 60), 1: (25, 50), 2: (600, 900)}, {2}),
    # Its one or two slowest probes were late (the probe's process descheduled on a busy host):
    # its p99 is out of line, its p90 with its peers'.
    ("one or two late probes are no stall", {0: (30, 60), 1: (25, 50), 2: (45, 900)}, set()),
    # Two of three stalled: the median peer is a stalled one; the fastest shows what a probe costs.
    ("two stalled, against the fastest", {0: (500, 800), 1: (25, 50), 2: (450, 700)}, {0, 2}),
    ("in line", {0: (30, 60), 1: (25, 50), 2: (35, 70)}, set()),
]


@pytest.mark.parametrize(
    ("rows_by_broker", "blamed"), [c[1:] for c in TAIL_CASES], ids=[c[0] for c in TAIL_CASES]
)
def test_the_probe_blames_a_leader_when_several_of_its_probes_are_late(rows_by_broker, blamed) -> None:
    from analyzer.blame import Rows, probe_signals

    probes = [_tail_row(b, 3, p90, p99) for b, (p90, p99) in rows_by_broker.items()]
    assert set(probe_signals(Rows([], probes), window(3), SlowBrokerConfig())) == blamed
    # Rows aggregated before the p90 was carried are judged on their p99 alone.
    legacy = [dataclasses.replace(p, produce_p90_ms=None, end_to_end_p90_ms=None) for p in probes]
    on_p99 = {b for b, (_p90, p99) in rows_by_broker.items() if p99 >= 700}
    assert set(probe_signals(Rows([], legacy), window(3), SlowBrokerConfig())) == on_p99


@pytest.mark.parametrize("probed", [True, False], ids=["answers its probes in line", "no probe rows"])
def test_a_broker_leading_less_after_its_stall_clears_when_it_answers_its_probes_in_line(
    probed: bool,
) -> None:
    # Broker 2 was slow in its own stages (windows 4-9), was fenced meanwhile and lost most of its
    # leadership: after the fault it serves half its usual requests, fast, until the next
    # preferred-leader election. Serving few with nobody waiting says nothing by itself (a stopped
    # JVM serves few too); answering its probes as its peers do says it is serving its clients.
    cfg = SlowBrokerConfig()
    fault = range(4, 10)
    after = range(10, 16)
    stages = scenario(16, 3, {2: slow_in(fault) | {i: {"count": 45} for i in after}})
    probes = [_tail_row(b, i, 30.0, 60.0) for b in range(3) for i in after] if probed else []
    active = SlowBrokerDetector(cfg).detect(
        dataclasses.replace(stages, probes=probes), now_after(10 + cfg.clear_windows + 1)
    )
    assert {f.subject for f in active if f.rule in ("slow_broker", "degraded_broker")} == (
        set() if probed else {"broker:2"}
    )


def test_the_probe_verdicts_defaults_are_the_models_defaults() -> None:
    from analyzer.probe_evidence import ProbeThresholds
    from analyzer.slow_broker import probe_thresholds

    assert ProbeThresholds() == probe_thresholds(SlowBrokerConfig())


def _probe_tails(
    broker: int, i: int, produce: tuple[float, float], e2e: tuple[float, float]
) -> ProbeBrokerWindow:
    """A probe row with its acks=1 produce and its end-to-end (p90, p99) as given, 40 decided."""
    return dataclasses.replace(
        _tail_row(broker, i, *e2e), produce_p90_ms=produce[0], produce_p99_ms=produce[1]
    )


FAST, STALLED, READ_BACK_LATE = (6.0, 10.0), (260.0, 330.0), (300.0, 470.0)

# (id, leaders 0 and 1 wait on replication in the fault, each leader's probe (produce, e2e) in the
# fault, the slow-broker subjects found at the end, whether the cluster is found)
IN_PHASE_CASES = [
    # Every broker paused in phase (run 9's d01, d14): leaders 0 and 1 wait out their own pauses
    # in remote, and broker 2, leading no acks=all partition, waits on nobody and serves a little
    # less: it looks like the follower they wait on. But each leader's acks=1 produce left its
    # own usual level (no replication in it: their own stalls), so the waits are no follower's.
    (
        "all paused in phase",
        True,
        {0: (STALLED, STALLED), 1: (STALLED, STALLED), 2: (STALLED, STALLED)},
        set(),
        True,
    ),
    # A follower paused (its whole JVM): the leaders waiting on it keep their acks=1 produce fast
    # (read back late: the record waits to be replicated); it is the follower's.
    (
        "a follower paused",
        True,
        {0: (FAST, READ_BACK_LATE), 1: (FAST, READ_BACK_LATE), 2: (STALLED, STALLED)},
        {"broker:2"},
        False,
    ),
    # Every leader's probe slow with nobody waiting (a short stall of the whole host, seen before a
    # soak): no wait to explain, nothing named by this alone.
    (
        "every probe slow, nobody waiting",
        False,
        {0: (STALLED, STALLED), 1: (STALLED, STALLED), 2: (STALLED, STALLED)},
        set(),
        False,
    ),
]


@pytest.mark.parametrize(
    ("waits", "in_fault", "slow", "cluster"),
    [c[1:] for c in IN_PHASE_CASES],
    ids=[c[0] for c in IN_PHASE_CASES],
)
def test_leaders_that_stall_themselves_wait_on_no_follower(waits, in_fault, slow, cluster) -> None:
    cfg = SlowBrokerConfig()
    fault = range(10, 15)  # after usual_min_windows (9) windows that give each leader its level
    special: dict[int, dict[int, dict]] = {
        b: {i: {**jitter(b, i), "count": 100} for i in range(15)} for b in range(3)
    }
    for i in fault:
        if waits:
            special[0][i] = waiting(470.0)
            special[1][i] = waiting(470.0)
            special[2][i] = {**jitter(2, i), "count": 55}
    probes = [
        _probe_tails(b, i, *(in_fault[b] if i in fault else (FAST, FAST)))
        for b in range(3)
        for i in range(15)
    ]
    findings = SlowBrokerDetector(cfg).detect(
        dataclasses.replace(scenario(15, 3, special), probes=probes), now_after(15)
    )
    assert {f.subject for f in findings if f.rule in ("slow_broker", "degraded_broker")} == slow
    assert ("cluster_slow" in {f.rule for f in findings}) == cluster, [(f.rule, f.subject) for f in findings]
