"""The one findings tracker: events one at a time (the pipeline), evaluations as a whole (the
analyzer's engine, the lag collector), and each option a source chooses."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from findings.tracker import Change, Changes, FindingTracker
from linkwatch.records import Finding
from tests.findings.kit import finding


def f(name: str, ts_ms: int = 0) -> Finding:
    """``"2"`` is broker 2 slow in stage local; ``"2/remote"`` in stage remote; a trailing ``?``
    makes it provisional."""
    provisional = name.endswith("?")
    subject, _, stage = name.rstrip("?").partition("/")
    out = finding(subject=f"broker:{subject}", stage=stage or "local", ts_ms=ts_ms)
    if provisional:
        out = dataclasses.replace(out, evidence={**out.evidence, "provisional": "cluster-wide window"})
    return out


def show(findings: list[Finding]) -> list[str]:
    return [f"{x.subject.removeprefix('broker:')}/{x.evidence['stage']}@{x.ts_ms}" for x in findings]


def by_stage(x: Finding) -> Any:
    return x.evidence["stage"]


# Each row: tracker options; evaluations as (now_ms, findings, complete); per evaluation the
# changes as (appeared, ongoing, cleared), each finding shown as "<broker>/<stage>@<ts_ms>".
UPDATE_CASES = [
    (
        "appears, repeats, clears by absence (re-emitted at the evaluation's time)",
        {},
        [(10, ["2"], True), (20, ["2"], True), (30, [], True)],
        [(["2/local@10"], [], []), ([], ["2/local@20"], []), ([], [], ["2/local@30"])],
    ),
    (
        "cold start: nothing reported, nothing changes",
        {},
        [(10, [], True), (20, [], True)],
        [([], [], []), ([], [], [])],
    ),
    (
        "a provisional finding is not raised new",
        {},
        [(10, ["2?"], True), (20, ["2?"], True)],
        [([], [], []), ([], [], [])],
    ),
    (
        "a provisional finding keeps an active one active (no clear and raise again)",
        {},
        [(10, ["2"], True), (20, ["2?"], True), (30, ["2"], True)],
        [(["2/local@10"], [], []), ([], ["2/local@20"], []), ([], ["2/local@30"], [])],
    ),
    (
        "hold_provisional off: a provisional finding is raised like any other",
        {"hold_provisional": False},
        [(10, ["2?"], True)],
        [(["2/local@10"], [], [])],
    ),
    (
        "an incomplete evaluation clears nothing it missed",
        {},
        [(10, ["1", "2"], True), (20, ["1"], False), (30, [], True)],
        [
            (["1/local@10", "2/local@10"], [], []),
            ([], ["1/local@20"], []),
            ([], [], ["1/local@30", "2/local@30"]),
        ],
    ),
    (
        "a new phase ends the active finding and appears anew",
        {"phase": by_stage},
        [(10, ["2"], True), (20, ["2/remote"], True), (30, ["2/remote"], True)],
        [(["2/local@10"], [], []), (["2/remote@20"], [], ["2/local@20"]), ([], ["2/remote@30"], [])],
    ),
    (
        "without a phase, another stage is the same finding going on",
        {},
        [(10, ["2"], True), (20, ["2/remote"], True)],
        [(["2/local@10"], [], []), ([], ["2/remote@20"], [])],
    ),
    (
        "repeat_after_ms: an ongoing finding is reported again only after the interval",
        {"repeat_after_ms": 60_000},
        [(0, ["2"], True), (30_000, ["2"], True), (61_000, ["2"], True), (90_000, ["2"], True)],
        [(["2/local@0"], [], []), ([], [], []), ([], ["2/local@61000"], []), ([], [], [])],
    ),
    (
        "keep_opened_ts: every report of an episode, its clearing too, carries its opening time",
        {"keep_opened_ts": True, "phase": by_stage},
        [(10, ["2"], True), (20, ["2"], True), (30, ["2/remote"], True), (40, [], True)],
        [
            (["2/local@10"], [], []),
            ([], ["2/local@10"], []),
            (["2/remote@30"], [], ["2/local@10"]),
            ([], [], ["2/remote@30"]),
        ],
    ),
    (
        "bounded: beyond max_tracked new subjects are dropped, active ones go on",
        {"max_tracked": 2},
        [(10, ["1", "2", "3"], True), (20, ["1", "2", "3"], True)],
        [(["1/local@10", "2/local@10"], [], []), ([], ["1/local@20", "2/local@20"], [])],
    ),
]


@pytest.mark.parametrize(
    ("options", "evaluations", "expected"), [c[1:] for c in UPDATE_CASES], ids=[c[0] for c in UPDATE_CASES]
)
def test_evaluations(options: dict[str, Any], evaluations: list, expected: list) -> None:
    tracker = FindingTracker(**options)
    for i, ((now, names, complete), want) in enumerate(zip(evaluations, expected, strict=True)):
        changes = tracker.update([f(n, now) for n in names], now, complete=complete)
        assert (show(changes.appeared), show(changes.ongoing), show(changes.cleared)) == want, (
            f"evaluation {i}"
        )
        assert all(not x.active for x in changes.cleared) and all(x.active for x in changes.appeared)


def test_counts_and_what_is_active() -> None:
    tracker = FindingTracker(max_tracked=1)
    tracker.update([f("1"), f("2"), f("3?")], 10)
    assert (sorted(tracker.active), tracker.dropped, tracker.held) == ([("slow_broker", "broker:1")], 1, 1)
    assert tracker.update([], 20) == Changes(cleared=[dataclasses.replace(f("1"), active=False, ts_ms=20)])
    assert tracker.active == {}


def test_events_appear_repeat_and_clear() -> None:
    t = FindingTracker()
    assert t.observe(finding()) is Change.APPEARED
    assert t.observe(finding(ts_ms=2000)) is Change.ONGOING
    assert t.active[("slow_broker", "broker:2")].ts_ms == 2000  # the latest report is kept
    assert t.observe(finding(active=False)) is Change.CLEARED
    assert t.observe(finding(active=False)) is None  # a clearing of nothing active
    assert t.observe(f("2?")) is None and t.held == 1  # not raised new
    assert t.observe(finding()) is Change.APPEARED
    assert t.observe(f("2?")) is Change.ONGOING


def test_events_bound_drops_and_counts() -> None:
    t = FindingTracker(max_tracked=2)
    for i in range(3):
        t.observe(finding(subject=f"broker:{i}"))
    assert t.dropped == 1 and len(t.active) == 2


def test_a_held_finding_is_due_once_unless_it_cleared() -> None:
    t = FindingTracker()
    t.observe(f("1"))
    t.observe(f("2"))
    t.hold(f("1"), due=100.0)
    t.hold(f("1", ts_ms=5), due=200.0)  # held already: keeps its first due time
    t.hold(f("2"), due=100.0)
    t.observe(dataclasses.replace(f("2"), active=False))
    assert t.due(99.0) == []
    assert show(t.due(100.0)) == ["1/local@0"]  # its latest report, as it is active
    assert t.due(1000.0) == []
