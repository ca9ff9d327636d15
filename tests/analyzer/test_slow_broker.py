"""Slow-broker rule table: one row per scenario, including the no-false-positive rows."""

from __future__ import annotations

import pytest

from analyzer.slow_broker import SlowBrokerConfig, SlowBrokerDetector, broker_scores, walk_score
from linkwatch.aggregates import Aggregates, StageWindow

WINDOW_S = 10
T0 = 1_700_000_000_000
STAGES = ("requestQueue", "local", "remote", "responseQueue", "send", "throttle")


def window(i: int) -> int:
    return T0 + i * WINDOW_S * 1000


def broker_rows(
    broker: int, i: int, p99: float, count: int = 100, stage: str = "local", request: str = "Produce"
) -> list[StageWindow]:
    """A broker's rows for one window: total p99 and stage p99s, the excess on ``stage``."""
    rows = []
    for s in (*STAGES, "total"):
        v = p99 if s == "total" else (max(p99 - 15.0, 3.0) if s == stage else 3.0)
        rows.append(
            StageWindow(
                broker=broker,
                request=request,
                stage=s,
                window_start_ms=window(i),
                count=count,
                p50_ms=v / 4,
                p99_ms=v,
                p999_ms=v * 1.2,
                mean_ms=v / 3,
            )
        )
    return rows


def scenario(n_windows: int, brokers: int, special: dict[int, dict[int, dict]]) -> Aggregates:
    """Every broker at p99 20 ms / 100 requests, except ``special[broker][window]`` kwargs."""
    rows = []
    for i in range(n_windows):
        for b in range(brokers):
            kw = special.get(b, {}).get(i, {})
            if kw.get("absent"):  # the broker logged nothing in this window
                continue
            rows.extend(broker_rows(b, i, **({"p99": 20.0} | kw)))
    return Aggregates(cluster="c1", window_s=WINDOW_S, broker_stages=rows)


SLOW = {"p99": 800.0}


def slow_in(windows, **kw) -> dict[int, dict]:
    return {i: SLOW | kw for i in windows}


def now_after(n_windows: int) -> int:
    return window(n_windows)


CASES = [
    # (id, windows, brokers, special, expected {(rule, subject): stage or None})
    ("healthy", 8, 3, {}, {}),
    ("slow broker 2, disk", 8, 3, {2: slow_in(range(3, 8))}, {("slow_broker", "broker:2"): "local"}),
    ("low traffic broker", 8, 3, {2: slow_in(range(8), count=5)}, {}),
    ("one noisy window", 8, 3, {2: slow_in([7])}, {}),
    ("two noisy windows apart", 8, 3, {2: slow_in([2, 6])}, {}),
    (
        "cluster-wide slowdown",
        8,
        3,
        {b: slow_in(range(8)) for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    ("cold start", 2, 3, {2: slow_in(range(2))}, {}),
    ("recovered broker", 8, 3, {2: slow_in(range(4))}, {}),
    ("above peers, below 300 ms", 8, 3, {2: {i: {"p99": 200.0} for i in range(8)}}, {}),
    (
        "above 300 ms, not 2x peers",
        8,
        3,
        {
            2: {i: {"p99": 400.0} for i in range(8)},
            0: {i: {"p99": 250.0} for i in range(8)},
            1: {i: {"p99": 250.0} for i in range(8)},
        },
        {},
    ),
    (
        "queue stage",
        8,
        3,
        {1: slow_in(range(8), stage="requestQueue")},
        {("slow_broker", "broker:1"): "requestQueue"},
    ),
    ("send stage", 8, 3, {0: slow_in(range(8), stage="send")}, {("slow_broker", "broker:0"): "send"}),
    (
        "response queue stage",
        8,
        3,
        {0: slow_in(range(8), stage="responseQueue")},
        {("slow_broker", "broker:0"): "responseQueue"},
    ),
    (
        "leader waits on a flagged follower",
        8,
        5,
        {3: slow_in(range(8)), 0: slow_in(range(8), stage="remote")},
        {("slow_broker", "broker:3"): "local"},
    ),
    (
        "stalled follower: two leaders wait in remote, broker 2 looks normal",
        8,
        3,
        {0: slow_in(range(3, 8), stage="remote"), 1: slow_in(range(3, 8), stage="remote")},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "stalled follower serving too few requests to judge (a paused JVM): still the suspect",
        8,
        3,
        {
            0: slow_in(range(3, 8), stage="remote"),
            1: slow_in(range(3, 8), stage="remote"),
            2: {i: {"count": 4, "p99": 450.0} for i in range(3, 8)},
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "stalled follower silent in its windows (a paused JVM logs nothing): still the suspect",
        8,
        3,
        {
            0: slow_in(range(3, 8), stage="remote"),
            1: slow_in(range(3, 8), stage="remote"),
            2: {i: {"absent": True} for i in range(3, 8)},
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "stalled follower, one noisy window",
        8,
        3,
        {0: slow_in([7], stage="remote"), 1: slow_in([7], stage="remote")},
        {},
    ),
    (
        "all three wait in remote: cluster-wide, no follower to blame",
        8,
        3,
        {b: slow_in(range(8), stage="remote") for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        "two leaders slow on disk, not remote: cluster-wide",
        8,
        3,
        {0: slow_in(range(8)), 1: slow_in(range(8))},
        {("cluster_slow", "cluster:c1"): None},
    ),
]


@pytest.mark.parametrize(
    ("windows", "brokers", "special", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_slow_broker_table(windows, brokers, special, expected) -> None:
    data = scenario(windows, brokers, special)
    findings = SlowBrokerDetector().detect(data, now_after(windows))
    assert {(f.rule, f.subject): f.evidence.get("stage") for f in findings} == expected


def test_unfinished_window_is_not_judged() -> None:
    # Windows 5..7 slow, but window 7 is still open at `now`: only two slow windows count.
    data = scenario(8, 3, {2: slow_in([5, 6, 7])})
    assert SlowBrokerDetector().detect(data, now_after(8) - 1) == []
    assert [f.subject for f in SlowBrokerDetector().detect(data, now_after(8))] == ["broker:2"]


def test_remote_stage_names_the_slowest_follower() -> None:
    special = {0: slow_in(range(8), stage="remote"), 1: {i: {"p99": 120.0} for i in range(8)}}
    [finding] = SlowBrokerDetector().detect(scenario(8, 3, special), now_after(8))
    assert (finding.subject, finding.evidence["stage"], finding.evidence["slow_follower"]) == (
        "broker:0",
        "remote",
        1,
    )
    assert "broker 1" in finding.action


def test_folded_leader_is_named_in_the_follower_finding() -> None:
    special = {3: slow_in(range(8)), 0: slow_in(range(8), stage="remote")}
    [finding] = SlowBrokerDetector().detect(scenario(8, 5, special), now_after(8))
    assert finding.evidence["leaders_waiting"] == [0]


def test_evidence_carries_values_baseline_windows() -> None:
    [f] = SlowBrokerDetector().detect(scenario(8, 3, {2: slow_in(range(3, 8))}), now_after(8))
    ev = f.evidence
    assert ev["values"]["p99_ms"] == [20.0] * 3 + [800.0] * 5
    assert ev["baseline"]["peers_median_p99_ms"] == [20.0] * 8
    assert ev["windows"] == [window(i) for i in range(8)]
    assert ev["slow_windows"] == [window(i) for i in range(3, 8)]
    assert (f.severity, ev["score"]) == ("warning", 5)
    assert f.to_json()  # evidence must be JSON-serialisable to travel on linkwatch.findings


def test_score_rises_and_falls_with_consecutive_windows() -> None:
    cfg = SlowBrokerConfig()
    walked = [walk_score([True] * k, cfg) for k in range(1, 8)]
    assert walked == [(1, False), (2, False), (3, True), (4, True), (5, True), (6, True), (6, True)]
    assert walk_score([True] * 6 + [False] * 4, cfg) == (2, True)  # hysteresis: still above clear_score
    assert walk_score([True] * 6 + [False] * 5, cfg) == (1, False)
    assert walk_score([True, False] * 6, cfg) == (0, False)


def test_scores_for_every_broker() -> None:
    scores = broker_scores(scenario(8, 3, {2: slow_in(range(3, 8))}), now_after(8), SlowBrokerConfig())
    assert {k: s.score for k, s in scores.items()} == {
        (0, "Produce"): 0,
        (1, "Produce"): 0,
        (2, "Produce"): 5,
    }


def test_stalled_follower_names_the_waiting_leaders_and_clears() -> None:
    special = {0: slow_in(range(2, 6), stage="remote"), 1: slow_in(range(2, 6), stage="remote")}
    [f] = SlowBrokerDetector().detect(scenario(6, 3, special), now_after(6))
    ev = f.evidence
    assert (f.subject, ev["slow_follower"], ev["leaders_waiting"]) == ("broker:2", 2, [0, 1])
    assert ev["slow_windows"] == [window(i) for i in range(2, 6)]
    assert ev["values"]["own_p99_ms"] == [20.0] * 6 and f.to_json()
    # Fault removed: four normal windows later the score is down to clear_score.
    assert SlowBrokerDetector().detect(scenario(10, 3, special), now_after(10)) == []
