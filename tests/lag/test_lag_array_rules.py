"""The array path (:mod:`lag.array_rules`) decides exactly what the per-pair rules
(:mod:`lag.rules`, the reference) decide: on generated windows, every column's verdict (status,
reason, numbers) and every group's verdict are equal to the reference's; and lag in seconds
of many partitions at once (:func:`lag.timestamps.lag_seconds_array`) equals
:func:`lag.timestamps.lag_seconds` one by one."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lag import array_rules as A
from lag import rules
from lag.rules import Observation, Thresholds
from lag.timestamps import (
    INTERPOLATED,
    LOWER_BOUND,
    METHOD_CODE,
    METHODS,
    UNKNOWN,
    FoundRecord,
    lag_seconds,
    lag_seconds_array,
)

_offsets = st.integers(min_value=-1, max_value=60)


@st.composite
def window(draw: st.DrawFn, newest_ts: float) -> list[Observation]:
    """Up to 10 observations of one (group, partition), the newest at ``newest_ts``, shaped like
    a consumer's: the committed offset mostly holds or climbs (sometimes back: a rewind), the
    end offset climbs, the lag sometimes sits at 0 or at the allowed lag; runs without a commit
    (-1), failed observations (deleted topic, no leader), log starts above the commit (deleted
    unread) and offsets that hold no message (markers). Times are mostly 10 s apart, sometimes
    repeated or out of order (a clock step), on a 2.5 s grid, so that an observation exactly
    ``window_s`` old or an idle time equal to the window happen as often as not."""
    n = draw(st.integers(min_value=1, max_value=10))
    steps = draw(st.lists(st.sampled_from([10.0, 10.0, 10.0, 0.0, -15.0, 2.5, 40.0]), min_size=n, max_size=n))
    times = newest_ts - np.cumsum([0.0, *steps[:-1]])[::-1]
    committed, end = draw(st.integers(0, 20)), draw(st.integers(0, 30))
    out = []
    for t in times:
        committed = max(-1, committed + draw(st.sampled_from([0, 0, 0, 1, 3, 10, -4, -30])))
        end = max(0, end + draw(st.sampled_from([0, 0, 1, 2, 5])))
        if draw(st.integers(0, 5)) == 0:
            end = max(committed, 0) + draw(st.sampled_from([0, 3]))  # caught up, or at the allowed lag
        kind = draw(st.integers(0, 11))
        if kind == 0:
            out.append(
                Observation(float(t), committed, -1, error=draw(st.sampled_from(["gone", "no leader"])))
            )
            continue
        start = draw(st.sampled_from([-1, -1, 0, max(committed, 0) + 1, end]))
        first = draw(st.sampled_from([-1, -1, -1, max(committed, 0) + 1, end + 1]))
        out.append(
            Observation(float(t), -1 if kind == 1 else committed, end, start=min(start, end), first=first)
        )
    return out


@st.composite
def scenario(draw: st.DrawFn, max_columns: int = 12) -> tuple[float, Thresholds, list]:
    """``(now_s, thresholds, columns)``; a column is ``(window, members_active, progress_since)``,
    ``progress_since`` None (the rules find it in the window) or a time, often exactly
    ``window_s`` (or one grid step either side) before now."""
    th = Thresholds(
        window_s=draw(st.sampled_from([5.0, 30.0, 60.0, 1000.0])),
        min_evaluations=draw(st.integers(min_value=1, max_value=6)),
        allowed_lag=draw(st.sampled_from([0, 0, 3])),
    )
    now = 1000.0 + 2.5 * draw(st.integers(0, 40))
    columns = []
    for _ in range(draw(st.integers(1, max_columns))):
        w = draw(window(now - 2.5 * draw(st.integers(0, 30))))
        back = draw(
            st.sampled_from([None, None, th.window_s, th.window_s - 2.5, th.window_s + 2.5, 7.5, 200.0])
        )
        columns.append((w, draw(st.booleans()), None if back is None else now - back))
    return now, th, columns


def arrays(windows: list[list[Observation]]) -> dict[str, np.ndarray]:
    """The windows as (H, P) arrays, right-aligned (the layout :func:`A.evaluate` takes)."""
    h, p = max(len(w) for w in windows), len(windows)
    out = {
        "ts": np.zeros((h, p)),
        "committed": np.zeros((h, p), np.int64),
        "end": np.zeros((h, p), np.int64),
        "lag": np.zeros((h, p), np.int64),
        "state": np.zeros((h, p), np.int8),
    }
    for j, w in enumerate(windows):
        for i, o in enumerate(w):
            row = h - len(w) + i
            out["ts"][row, j] = o.ts_s
            out["committed"][row, j] = o.committed
            out["end"][row, j] = o.end
            out["lag"][row, j] = o.lag
            out["state"][row, j] = A.FAILED if o.error is not None else A.OBSERVED
    return out


def decide(windows, now_s, active, th, since) -> A.Decisions:
    return A.evaluate(
        **arrays(windows),
        start=np.array([w[-1].start for w in windows], np.int64),
        now_s=now_s,
        active=np.array(active, bool),
        th=th,
        progress_since=np.array([math.nan if s is None else s for s in since]),
        errors=[w[-1].error for w in windows],
    )


@settings(max_examples=250, deadline=None, derandomize=True, database=None)
@given(scenario())
def test_every_column_gets_the_reference_verdict(case) -> None:
    now_s, th, cases = case
    d = decide([w for w, _, _ in cases], now_s, [a for _, a, _ in cases], th, [s for _, _, s in cases])
    for j, (w, active, since) in enumerate(cases):
        want = rules.evaluate_partition(w, now_s, active, th, since)
        got = d.verdict(j)
        assert (got.status, got.reason, got.numbers) == (want.status, want.reason, want.numbers), (w, since)
        assert A.STATUSES[d.status[j]] is want.status


@settings(max_examples=120, deadline=None, derandomize=True, database=None)
@given(scenario(max_columns=16), st.lists(st.integers(0, 4), min_size=16, max_size=16))
def test_every_group_gets_the_reference_verdict(case, members) -> None:
    """Columns dealt to up to five groups (some left without any); each group's verdict as
    ``rules.evaluate_group`` over its columns' reference verdicts, in column order."""
    now_s, th, cases = case
    gid = np.array(members[: len(cases)])
    active = [cases[gid.tolist().index(g)][1] if g in gid else False for g in range(5)]
    d = decide([w for w, _, _ in cases], now_s, [active[g] for g in gid], th, [s for _, _, s in cases])
    summary = A.summarize_groups(gid, d.status, d.numbers_lag, d.uncommitted, d.trace, 5)
    for g in range(5):
        mine = [j for j in range(len(cases)) if gid[j] == g]
        verdicts = {
            f"t-{j}": rules.evaluate_partition(cases[j][0], now_s, active[g], th, cases[j][2]) for j in mine
        }
        want = rules.evaluate_group(verdicts, active[g])
        worst = int(summary.worst[g])
        got = summary.verdict(
            g,
            f"t-{worst}",
            d.verdict(worst) if worst >= 0 else rules.Verdict(rules.Status.OK, "", {}),
            {f"t-{j}": int(d.reprocessed[j]) for j in summary.reprocessed if gid[j] == g},
            active[g],
        )
        assert (got.status, got.reason, got.numbers) == (want.status, want.reason, want.numbers)


def _series(points: list[tuple[float, int, int]]) -> list[Observation]:
    return [Observation(t, c, e) for t, c, e in points]


TH = Thresholds(window_s=30.0, min_evaluations=3, allowed_lag=2)
# Windows on the rules' boundaries, where an off-by-one in the array path would show: (name,
# window, now, progress_since), each compared with the reference.
BOUNDARIES = [
    (
        "stuck since the first observation, which was at the allowed lag",
        _series([(0.0, 10, 12), (10.0, 10, 15), (20.0, 10, 18), (30.0, 10, 21)]),
        30.0,
        None,
    ),
    (
        "stuck since the first observation, which was over the allowed lag",
        _series([(0.0, 10, 13), (10.0, 10, 15), (20.0, 10, 18), (30.0, 10, 21)]),
        30.0,
        None,
    ),
    ("idle exactly the window", _series([(0.0, 10, 15), (30.0, 10, 20)]), 30.0, 0.0),
    ("idle just over the window", _series([(0.0, 10, 15), (30.0, 10, 20)]), 30.5, 0.0),
    ("uncommitted, idle exactly the window", _series([(0.0, -1, 15), (30.0, -1, 20)]), 30.0, 0.0),
    ("uncommitted, idle over the window", _series([(0.0, -1, 15), (30.0, -1, 20)]), 31.0, 0.0),
    (
        "growing, the oldest exactly window_s old",
        _series([(0.0, 1, 10), (10.0, 2, 12), (20.0, 3, 14), (30.0, 4, 16)]),
        30.0,
        30.0,
    ),
    (
        "growing, the oldest just out of the window",
        _series([(0.0, 1, 10), (10.0, 2, 12), (20.0, 3, 14), (30.0, 4, 16)]),
        30.5,
        30.5,
    ),
    (
        "growing only counting from the commit's first row",
        _series([(0.0, -1, 10), (10.0, 2, 12), (20.0, 3, 14), (30.0, 4, 16)]),
        30.0,
        30.0,
    ),
    ("lag exactly the allowed lag", _series([(0.0, 10, 12)]), 0.0, 0.0),
    ("a rewind passed exactly", _series([(0.0, 50, 60), (10.0, 20, 60), (20.0, 50, 60)]), 20.0, 20.0),
    ("a rewind one short of passed", _series([(0.0, 50, 60), (10.0, 20, 60), (20.0, 49, 60)]), 20.0, 20.0),
]


@pytest.mark.parametrize(("name", "w", "now", "since"), BOUNDARIES, ids=[b[0] for b in BOUNDARIES])
def test_boundaries_get_the_reference_verdict(name: str, w: list[Observation], now: float, since) -> None:
    d = decide([w], now, [False], TH, [since])
    want = rules.evaluate_partition(w, now, False, TH, since)
    got = d.verdict(0)
    assert (got.status, got.reason, got.numbers) == (want.status, want.reason, want.numbers)


def test_a_column_without_a_newest_observation_is_refused() -> None:
    a = arrays([[Observation(1.0, 1, 2)], [Observation(1.0, 1, 2), Observation(2.0, 1, 2)]])
    a["state"][-1, 0] = A.ABSENT
    with pytest.raises(ValueError, match="newest row"):
        A.evaluate(
            **a,
            start=np.zeros(2, np.int64),
            now_s=3.0,
            active=np.ones(2, bool),
            th=Thresholds(),
            progress_since=np.full(2, math.nan),
        )


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-1, 40),  # the offset the lag in seconds is of
            st.integers(0, 5),  # lag in messages
            st.one_of(  # the record read there, if any
                st.none(),
                st.builds(
                    FoundRecord,
                    st.integers(-1, 45),
                    st.sampled_from([-1, 0, 1_000, 9_000, 10_000, 12_000]),
                    st.booleans(),
                ),
            ),
            st.sampled_from(  # the history's estimate
                [(None, UNKNOWN), (5_000, INTERPOLATED), (5_000, LOWER_BOUND), (11_000, INTERPOLATED)]
            ),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_lag_seconds_of_many_equal_one_by_one(rows) -> None:
    now_ms = 10_000
    at, lag, recs, ests = (list(x) for x in zip(*rows, strict=True))
    found = np.array([r is not None for r in recs])
    field = lambda name, default: np.array([getattr(r, name) if r else default for r in recs])  # noqa: E731
    seconds, method = lag_seconds_array(
        now_ms,
        np.array(at, np.int64),
        np.array(lag, np.int64),
        found,
        field("offset", 0).astype(np.int64),
        field("ts_ms", -1).astype(np.int64),
        field("is_end", False).astype(bool),
        np.array([ts or 0 for ts, _ in ests], np.int64),
        np.array([METHOD_CODE[m] for _, m in ests], np.uint8),
    )
    for i, row in enumerate(rows):
        want = lag_seconds(now_ms, at[i], lag[i], recs[i], ests[i])
        got = (None if np.isnan(seconds[i]) else float(seconds[i]), METHODS[method[i]])
        assert got == want, row
