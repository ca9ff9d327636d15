"""Status rules, one row per scenario, including rows that must NOT raise a status."""

from __future__ import annotations

import pytest

from lag.rules import (
    Observation,
    Status,
    Thresholds,
    Verdict,
    evaluate_group,
    evaluate_partition,
)

TH = Thresholds(window_s=60.0, min_evaluations=4, allowed_lag=0)


def series(points: list[tuple[int, int]], step_s: float = 10.0) -> list[Observation]:
    """(committed, end) per evaluation, ``step_s`` apart, starting at t=0."""
    return [Observation(ts_s=i * step_s, committed=c, end=e) for i, (c, e) in enumerate(points)]


def now_after(window: list[Observation], step_s: float = 10.0) -> float:
    return window[-1].ts_s + 0.5


CASES = [
    # id, points (committed, end), members_active, expected status, words expected in reason
    ("idle topic, caught up, no member", [(100, 100)] * 10, False, Status.OK, "caught up"),
    ("caught up with members", [(i * 10, i * 10) for i in range(10)], True, Status.OK, "caught up"),
    (
        "low traffic: one new record after a long idle period",
        [(100, 100)] * 9 + [(100, 101)],
        False,
        Status.OK,
        "unchanged for 10s so far",
    ),
    (
        "low traffic: record arrives and is consumed between evaluations",
        [(100, 100), (100, 101), (101, 101), (101, 102), (102, 102)] * 2,
        True,
        Status.OK,
        "",
    ),
    (
        "one slow evaluation: a lag burst worked off",
        [(0, 10), (10, 20), (20, 80), (70, 90), (90, 100), (100, 110)],
        True,
        Status.OK,
        "progressing",
    ),
    (
        "stopped consumer, producers go on",
        [(100, 100 + 20 * i) for i in range(9)],
        False,
        Status.STOP,
        "no member",
    ),
    (
        "stopped consumer, no new data after it stopped, but lag > 0",
        [(100, 200)] * 9,
        False,
        Status.STOP,
        "100 messages wait",
    ),
    (
        "members hold the same offset",
        [(100, 100 + 5 * i) for i in range(9)],
        True,
        Status.STALL,
        "has members",
    ),
    (
        "stopped but only for less than the window",
        [(10 * i, 10 * i) for i in range(5)] + [(40, 40 + 5 * i) for i in range(1, 5)],
        False,
        Status.OK,
        "progressing",
    ),
    (
        "consumer slower than producer",
        [(10 * i, 20 * i + 5) for i in range(8)],
        True,
        Status.WARN,
        "grew at every one",
    ),
    (
        "lag grows but window not complete yet (cold start)",
        [(0, 5), (10, 25), (20, 45)],
        True,
        Status.OK,
        "",
    ),
    (
        "constant lag is not growing",
        [(10 * i, 10 * i + 50) for i in range(8)],
        True,
        Status.OK,
        "progressing",
    ),
    (
        "offset reset backwards",
        [(500, 600), (550, 600), (100, 600), (150, 600)],
        True,
        Status.REWIND,
        "moved back",
    ),
    (
        "rewind recovered",
        [(500, 600), (100, 600), (400, 600), (600, 600), (620, 650)],
        True,
        Status.OK,
        "",
    ),
]


@pytest.mark.parametrize(("name", "points", "members", "expected", "words"), CASES, ids=[c[0] for c in CASES])
def test_partition_status(name: str, points, members: bool, expected: Status, words: str) -> None:
    window = series(points)
    verdict = evaluate_partition(window, now_after(window), members, TH)
    assert verdict.status is expected, verdict.reason
    assert words in verdict.reason
    if expected is not Status.ERR:
        assert verdict.numbers, "every verdict carries its numbers"


def test_stop_numbers_say_how_long_and_how_much() -> None:
    window = series([(100, 100 + 20 * i) for i in range(9)])
    v = evaluate_partition(window, 80.5, False, TH)
    assert v.status is Status.STOP
    assert v.numbers["lag"] == 160
    assert v.numbers["no_progress_s"] == pytest.approx(80.5)
    assert v.numbers["window_s"] == 60.0


def test_stop_depends_on_now_not_on_the_number_of_evaluations() -> None:
    window = series([(100, 150), (100, 160)])
    assert evaluate_partition(window, 30.0, False, TH).status is Status.OK
    assert evaluate_partition(window, 61.0, False, TH).status is Status.STOP


def test_allowed_lag_counts_as_caught_up() -> None:
    window = series([(100, 102)] * 10)
    assert evaluate_partition(window, 95.0, False, Thresholds(60.0, 4, allowed_lag=2)).status is Status.OK
    assert evaluate_partition(window, 95.0, False, Thresholds(60.0, 4, allowed_lag=1)).status is Status.STOP


def test_error_observation_is_err_with_its_reason() -> None:
    window = [*series([(1, 5)]), Observation(10.0, -1, -1, error="topic deleted")]
    v = evaluate_partition(window, 10.5, True, TH)
    assert (v.status, v.reason) == (Status.ERR, "topic deleted")


def test_errors_in_history_are_skipped() -> None:
    window = series([(10 * i, 10 * i + 50) for i in range(6)])
    window.insert(3, Observation(25.0, -1, -1, error="broker down"))
    assert evaluate_partition(window, 60.0, True, TH).status is Status.OK


GROUP_CASES = [
    ({"t-0": Verdict(Status.OK, "", {}), "t-1": Verdict(Status.OK, "", {})}, Status.OK),
    ({"t-0": Verdict(Status.OK, "", {}), "t-1": Verdict(Status.WARN, "w", {"lag": 3})}, Status.WARN),
    ({"t-0": Verdict(Status.ERR, "gone", {}), "t-1": Verdict(Status.STOP, "s", {"lag": 3})}, Status.STOP),
    ({"t-0": Verdict(Status.ERR, "gone", {}), "t-1": Verdict(Status.OK, "", {})}, Status.ERR),
    ({}, Status.ERR),
]


@pytest.mark.parametrize(("partitions", "expected"), GROUP_CASES)
def test_group_status_is_the_worst_partition(partitions: dict[str, Verdict], expected: Status) -> None:
    g = evaluate_group(partitions, members_active=False)
    assert g.status is expected
    if partitions and expected is not Status.OK:
        assert expected.value in g.reason and "of 2 partitions" in g.reason
