"""Status rules, one row per scenario, including rows that must NOT raise a status."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def obs(i: int, committed: int, end: int, start: int = -1, first: int = -1) -> Observation:
    return Observation(ts_s=i * 10.0, committed=committed, end=end, start=start, first=first)


# Inputs once misread (issue 18): transaction markers, deleted records, partitions without a
# commit, a rewind since passed. id, window, members_active, status, words, numbers expected.
INPUT_CASES = [
    (
        "exactly-once commit at the last transaction marker",
        [obs(i, 16, 17, first=17) for i in range(10)],
        False,
        Status.OK,
        "caught up: committed 16, end 17 (the 1 offsets between hold no message)",
        {"lag": 0},
    ),
    (
        "markers ahead, then real messages: still behind (no false OK)",
        [obs(i, 8, 17, first=11) for i in range(10)],
        False,
        Status.STOP,
        "6 messages wait",
        {"lag": 6},
    ),
    (
        "commit with a readable record at it: lag counted from the commit",
        [obs(i, 8, 17) for i in range(10)],
        False,
        Status.STOP,
        "9 messages wait",
        {"lag": 9},
    ),
    (
        "retention deleted past the commit",
        [obs(i, 20, 100, start=60) for i in range(3)],
        False,
        Status.ERR,
        "committed offset 20 is below the log start 60: 40 messages were deleted unread",
        {"lag": 40, "deleted_unread": 40, "start": 60},
    ),
    (
        "deleted past the commit of a caught-up-looking group",
        [obs(i, 5, 5 + 10 * i, start=5 + 10 * i) for i in range(3)],
        True,
        Status.ERR,
        "20 messages were deleted unread (retention or delete_records); 0 messages remain",
        {"lag": 0, "deleted_unread": 20},
    ),
    (
        "log start below the commit is not an error",
        [obs(i, 70 + i, 100 + i, start=60) for i in range(3)],
        True,
        Status.OK,
        "behind by 30",
        {"lag": 30},
    ),
    (
        "log start at the commit is not an error",
        [obs(i, 60, 60, start=60) for i in range(10)],
        False,
        Status.OK,
        "caught up",
        {"lag": 0},
    ),
    (
        "no commit on a partition holding messages, longer than the window",
        [obs(i, -1, 10, start=0) for i in range(9)],
        False,
        Status.STOP,
        "no committed offset on this partition while 10 messages wait",
        {"lag": 10, "uncommitted": True},
    ),
    (
        "no commit, messages, group has members",
        [obs(i, -1, 10, start=0) for i in range(9)],
        True,
        Status.STALL,
        "none commits here",
        {"lag": 10},
    ),
    (
        "no commit, messages arrived within the window",
        [obs(i, -1, 0, start=0) for i in range(6)] + [obs(i, -1, 4, start=0) for i in range(6, 9)],
        False,
        Status.OK,
        "for 30s so far",
        {"lag": 4},
    ),
    (
        "no commit, empty partition, for a long time",
        [obs(i, -1, 30, start=30) for i in range(20)],
        False,
        Status.OK,
        "holds no message",
        {"lag": 0},
    ),
    (
        "a commit appears after none: evaluated as a committed partition",
        [obs(i, -1, 10, start=0) for i in range(8)] + [obs(8, 10, 10, start=0)],
        False,
        Status.OK,
        "caught up",
        {"lag": 0},
    ),
    (
        "rewind since passed",
        [obs(0, 150, 200), obs(1, 20, 200), obs(2, 120, 200), obs(3, 200, 200)],
        True,
        Status.OK,
        "moved back from 150 to 20 and has since passed 150: 130 messages were reprocessed",
        {"reprocessed": 130, "rewound_from": 150, "rewound_to": 20},
    ),
    (
        "rewind not passed yet is REWIND, without a reprocessing count",
        [obs(0, 150, 200), obs(1, 20, 200), obs(2, 120, 200)],
        True,
        Status.REWIND,
        "has not recovered",
        {"from_offset": 150},
    ),
]


@pytest.mark.parametrize(
    ("name", "window", "members", "expected", "words", "numbers"),
    INPUT_CASES,
    ids=[c[0] for c in INPUT_CASES],
)
def test_partition_status_on_inputs(name, window, members, expected, words, numbers) -> None:
    v = evaluate_partition(window, window[-1].ts_s + 0.5, members, TH)
    assert v.status is expected, v.reason
    assert words in v.reason
    assert numbers.items() <= v.numbers.items(), v.numbers


@pytest.mark.parametrize(
    "points",
    [[(10 * i, 10 * i + 5) for i in range(8)], [(100, 100)] * 8, [(0, 10), (10, 20), (20, 80), (70, 90)]],
    ids=["progressing", "idle", "burst"],
)
def test_no_rewind_no_reprocessing_claim(points) -> None:
    window = series(points)
    v = evaluate_partition(window, now_after(window), True, TH)
    assert "reprocessed" not in v.reason and "reprocessed" not in v.numbers


def test_group_reason_names_uncommitted_partitions_and_reprocessing() -> None:
    g = evaluate_group(
        {
            "t-0": Verdict(Status.OK, "caught up", {"lag": 0, "reprocessed": 130}),
            "t-1": Verdict(Status.OK, "no committed offset", {"lag": 10, "uncommitted": True}),
            "t-2": Verdict(Status.OK, "no committed offset", {"lag": 0, "uncommitted": True}),
        },
        members_active=True,
    )
    assert g.status is Status.OK
    assert "2 without a committed offset" in g.reason
    assert "130 messages reprocessed after a rewind (t-0)" in g.reason
    assert (g.numbers["uncommitted"], g.numbers["reprocessed"]) == (2, 130)


_offsets = st.integers(min_value=-1, max_value=50)


@st.composite
def windows(draw: st.DrawFn) -> list[Observation]:
    n = draw(st.integers(min_value=1, max_value=8))
    out = []
    for i in range(n):
        end = draw(st.integers(min_value=0, max_value=60))
        start = draw(st.integers(min_value=-1, max_value=end))
        first = draw(st.one_of(st.just(-1), st.integers(min_value=0, max_value=end + 2)))
        out.append(obs(i, draw(_offsets), end, start=start, first=first))
    return out


@settings(max_examples=300, deadline=None, derandomize=True)
@given(window=windows(), members=st.booleans())
def test_any_window_gets_a_verdict_with_consistent_numbers(window: list[Observation], members: bool) -> None:
    """Whatever the offsets: a verdict with a reason; lag never negative and never more than
    end − committed; ERR for deleted records exactly when the commit is below the log start."""
    last = window[-1]
    v = evaluate_partition(window, last.ts_s + 0.5, members, TH)
    assert v.reason
    assert 0 <= last.lag <= max(0, last.end - max(last.committed, 0))
    deleted = last.committed >= 0 and last.start > last.committed
    assert ("deleted unread" in v.reason) == deleted, v.reason
    if deleted:
        assert v.status is Status.ERR and v.numbers["deleted_unread"] == last.start - last.committed
    if last.committed < 0:
        assert v.numbers.get("uncommitted") is True
