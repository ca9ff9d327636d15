"""Lag status rules: small pure functions, time and thresholds passed in.

A partition is judged on a sliding window of :class:`Observation` s (one per evaluation pass),
each taken against a *fresh* end offset read in the same pass as the committed offset, so a
consumer that stopped while producers go on always shows lag > 0 and can never look OK.

Rules, in order (the first that matches decides; every verdict carries a reason in words and
the numbers behind it):

0. **ERR** — the latest observation could not be made (offset fetch failed, topic deleted,
   ...; the error text is the reason), or the committed offset is below the log start
   (retention or ``delete_records`` removed messages the group never read; the reason says
   how many).
1. **REWIND** — the committed offset moved back inside the window and has not yet recovered
   to where it was before.
2. **OK** — caught up: lag is at most ``allowed_lag`` now.
3. **STOP** — lag > 0 and the committed offset has not moved for longer than the window, and
   the group has no active member. "Not moved" is measured since the last evaluation at which
   the consumer either advanced or was caught up, so a low-traffic topic whose consumer idles
   at the end of the log is not STOP when one new record arrives (Burrow issues #38, #128).
4. **STALL** — the same, but the group still has members: they are connected and holding
   (committing) the same offset while lag > 0.
5. **WARN** — the last ``window_s`` holds at least ``min_evaluations`` and lag grew between every pair of consecutive
   evaluations (never decreased, ended higher than it started) while the consumer advanced: it
   consumes, but slower than producers write.
6. **OK** — otherwise (consumer progressing; one slow evaluation or a lag burst it is working
   off is not a warning).

A partition of a consumed topic without a committed offset is judged by
:func:`rule_uncommitted` (OK while it holds no message or for less than the window, then STOP
or STALL). A rewind the committed offset has since passed is not a status, but every verdict
of the window that saw it says how many messages were reprocessed (:func:`rewind_passed`).

Lag counts messages that still exist and that the group will read: from the highest of the
committed offset, the log start and the first message at or after the committed offset (what
lies before it is transaction markers, aborted or compacted records: not messages).

A group's status is its worst partition status (:data:`SEVERITY`); its reason names how many
partitions carry it and the worst one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    OK = "OK"
    WARN = "WARN"
    STALL = "STALL"
    STOP = "STOP"
    REWIND = "REWIND"
    ERR = "ERR"


# Worse is higher. A real problem outranks "could not evaluate" (ERR): a group with one deleted
# topic and one stopped partition is reported STOP, with the ERR partitions counted in the reason.
SEVERITY: dict[Status, int] = {
    Status.OK: 0,
    Status.ERR: 1,
    Status.WARN: 2,
    Status.REWIND: 3,
    Status.STALL: 4,
    Status.STOP: 5,
}


@dataclass(frozen=True)
class Observation:
    """One evaluation of one (group, partition): committed and fresh end offset at ``ts_s``.

    ``committed`` is -1 when the group has no committed offset on this partition. ``start`` is
    the log start offset and ``first`` the first message at or after the committed offset
    (-1: not read); offsets below them hold nothing the group will read.
    """

    ts_s: float
    committed: int
    end: int
    error: str | None = None
    start: int = -1
    first: int = -1

    @property
    def lag(self) -> int:
        return max(0, self.end - max(self.committed, self.start, self.first, 0))

    @property
    def deleted_unread(self) -> int:
        """Messages removed from the log (retention, ``delete_records``) before the group read them."""
        return max(0, self.start - self.committed) if self.committed >= 0 else 0


@dataclass(frozen=True)
class Thresholds:
    """``window_s``: how long a consumer may make no progress before STOP/STALL;
    ``min_evaluations``: how many evaluations a window needs before WARN can be judged;
    ``allowed_lag``: lag (messages) that still counts as caught up."""

    window_s: float = 300.0
    min_evaluations: int = 5
    allowed_lag: int = 0


@dataclass(frozen=True)
class Verdict:
    status: Status
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)


def evaluate_partition(
    window: Sequence[Observation],
    now_s: float,
    members_active: bool,
    th: Thresholds,
    progress_since: float | None = None,
) -> Verdict:
    """Status of one partition from its observations (oldest first; the last is the latest).

    ``progress_since``: when the caller keeps fewer observations than the window spans, the
    time it last saw the consumer advance or be caught up (see :func:`progress_ts`).
    """
    if not window:
        return Verdict(Status.ERR, "no observation yet", {})
    last = window[-1]
    if last.error is not None:
        return Verdict(Status.ERR, last.error, {"committed": last.committed, "end": last.end})
    if last.committed < 0:
        run = list(itertools.takewhile(lambda o: o.error is None and o.committed < 0, reversed(window)))[::-1]
        return rule_uncommitted(run, now_s, members_active, th, progress_since)
    ok = [o for o in window if o.error is None and o.committed >= 0]
    verdict = (
        rule_deleted_unread(last)
        or rule_rewind(ok)
        or rule_caught_up(last, th)
        or rule_no_progress(ok, now_s, members_active, th, progress_since)
        or rule_growing([o for o in ok if o.ts_s >= now_s - th.window_s], th)
        or rule_progressing(ok, now_s, th, progress_since)
    )
    return with_rewind_trace(verdict, ok)


def rule_deleted_unread(last: Observation) -> Verdict | None:
    """Rule 0: the committed offset is below the log start: messages were deleted unread."""
    deleted = last.deleted_unread
    if deleted <= 0:
        return None
    return deleted_unread_verdict(last.committed, last.start, last.end, last.lag)


def deleted_unread_verdict(committed: int, start: int, end: int, lag: int) -> Verdict:
    deleted = start - committed
    return Verdict(
        Status.ERR,
        f"committed offset {committed} is below the log start {start}: {deleted} messages "
        f"were deleted unread (retention or delete_records); {lag} messages remain to read",
        {"committed": committed, "start": start, "end": end, "lag": lag, "deleted_unread": deleted},
    )


def rule_uncommitted(
    run: Sequence[Observation],
    now_s: float,
    members_active: bool,
    th: Thresholds,
    progress_since: float | None = None,
) -> Verdict:
    """A partition of a topic the group consumes, without a committed offset of its own.

    ``run``: the latest observations without a commit (oldest first). Its messages (log start
    to end) are read by nobody. Waiting is measured since it was last seen empty, or since the
    run began (``progress_since`` when the caller keeps more history than ``run``): STOP/STALL
    only after a full window, as for committed partitions.
    """
    last = run[-1]
    if last.lag <= th.allowed_lag:
        return uncommitted_verdict(last.start, last.end, last.lag, th, members_active, None)
    since = progress_since if progress_since is not None else progress_ts(run, th.allowed_lag)
    idle_s = now_s - (since if since is not None else run[0].ts_s)
    return uncommitted_verdict(last.start, last.end, last.lag, th, members_active, idle_s)


def uncommitted_verdict(
    start: int, end: int, n: int, th: Thresholds, members_active: bool, idle_s: float | None
) -> Verdict:
    """The words and numbers of :func:`rule_uncommitted` (``idle_s`` None: within the allowed lag)."""
    numbers: dict[str, Any] = {"committed": -1, "start": start, "end": end, "lag": n, "uncommitted": True}
    if idle_s is None:
        what = "holds no message" if n == 0 else f"holds {n} messages (allowed lag {th.allowed_lag})"
        return Verdict(Status.OK, f"no committed offset; the partition {what} (end offset {end})", numbers)
    numbers["no_progress_s"] = round(idle_s, 1)
    words = f"no committed offset on this partition while {n} messages wait (end offset {end})"
    if idle_s <= th.window_s:
        return Verdict(
            Status.OK,
            f"{words}, for {idle_s:.0f}s so far (STOP/STALL after the {th.window_s:.0f}s window)",
            numbers,
        )
    if members_active:
        return Verdict(
            Status.STALL,
            f"{words} for {idle_s:.0f}s (window {th.window_s:.0f}s): the group has members but none "
            "commits here (partition not assigned, or its consumer does not commit)",
            numbers,
        )
    return Verdict(
        Status.STOP,
        f"{words} for {idle_s:.0f}s (window {th.window_s:.0f}s) and the group has no member: nobody reads them",
        numbers,
    )


def rewind_passed(window: Sequence[Observation]) -> tuple[int, int] | None:
    """(from, to) of the rewinds in the window when the committed offset has since passed
    ``from`` again; ``None`` if there was none or it has not recovered (that is REWIND)."""
    backs = [
        (prev.committed, cur.committed)
        for prev, cur in itertools.pairwise(window)
        if cur.committed < prev.committed
    ]
    if not backs:
        return None
    high, low = max(b[0] for b in backs), min(b[1] for b in backs)
    return (high, low) if window[-1].committed >= high else None


def with_rewind_trace(verdict: Verdict, window: Sequence[Observation]) -> Verdict:
    """The verdict, with "messages were reprocessed" when a rewind in the window was passed."""
    passed = rewind_passed(window) if verdict.status is not Status.REWIND else None
    if passed is None:
        return verdict
    return rewind_trace(verdict, *passed)


def rewind_trace(verdict: Verdict, high: int, low: int) -> Verdict:
    return Verdict(
        verdict.status,
        f"{verdict.reason}; the committed offset moved back from {high} to {low} and has since "
        f"passed {high}: {high - low} messages were reprocessed",
        {**verdict.numbers, "reprocessed": high - low, "rewound_from": high, "rewound_to": low},
    )


def rule_rewind(window: Sequence[Observation]) -> Verdict | None:
    """Rule 1: the committed offset went back and is still below its earlier high mark."""
    high = None
    for prev, cur in itertools.pairwise(window):
        if cur.committed < prev.committed:
            high = max(high or 0, prev.committed)
    last = window[-1]
    if high is None or last.committed >= high:
        return None
    return rewind_verdict(high, last.committed, last.lag)


def rewind_verdict(high: int, committed: int, lag: int) -> Verdict:
    return Verdict(
        Status.REWIND,
        f"committed offset moved back from {high} to {committed} and has not recovered",
        {"from_offset": high, "committed": committed, "lag": lag},
    )


def rule_caught_up(last: Observation, th: Thresholds) -> Verdict | None:
    """Rule 2: lag within ``allowed_lag`` against the fresh end offset."""
    if last.lag > th.allowed_lag:
        return None
    return caught_up_verdict(last.committed, last.end, last.lag)


def caught_up_verdict(committed: int, end: int, lag: int) -> Verdict:
    # Offsets between the commit and the end that hold no message: transaction markers (an
    # exactly-once application commits the offset of its transaction's marker) or removed records.
    gap = end - committed - lag
    tail = f" (the {gap} offsets between hold no message)" if gap > 0 and lag == 0 else ""
    return Verdict(
        Status.OK,
        f"caught up: committed {committed}, end {end}{tail}",
        {"committed": committed, "end": end, "lag": lag},
    )


def progress_ts(window: Sequence[Observation], allowed_lag: int) -> float | None:
    """Time of the latest evaluation at which the consumer advanced or was caught up.

    ``None`` if it did neither anywhere in the window (then the window start is the bound).
    """
    for prev, cur in zip(reversed(window[:-1]), reversed(window), strict=False):
        if cur.committed != prev.committed or cur.lag <= allowed_lag:
            return cur.ts_s
    first = window[0]
    return first.ts_s if first.lag <= allowed_lag else None


def rule_no_progress(
    window: Sequence[Observation],
    now_s: float,
    members_active: bool,
    th: Thresholds,
    progress_since: float | None = None,
) -> Verdict | None:
    """Rules 3 and 4: no progress for longer than the window while lag > 0 → STOP or STALL."""
    since = progress_since if progress_since is not None else progress_ts(window, th.allowed_lag)
    bound = since if since is not None else window[0].ts_s
    idle_s = now_s - bound
    # Without progress anywhere in the window we only know it lasted at least the window span;
    # the window must span the full period before we may call it.
    if idle_s <= th.window_s:
        return None
    last = window[-1]
    return no_progress_verdict(last.committed, last.end, last.lag, idle_s, th, members_active)


def no_progress_verdict(
    committed: int, end: int, lag: int, idle_s: float, th: Thresholds, members_active: bool
) -> Verdict:
    numbers = {
        "committed": committed,
        "end": end,
        "lag": lag,
        "no_progress_s": round(idle_s, 1),
        "window_s": th.window_s,
    }
    if members_active:
        return Verdict(
            Status.STALL,
            f"group has members but committed offset {committed} has not moved for "
            f"{idle_s:.0f}s (window {th.window_s:.0f}s) while lag is {lag}",
            numbers,
        )
    return Verdict(
        Status.STOP,
        f"no member and no commit progress for {idle_s:.0f}s (window {th.window_s:.0f}s) while "
        f"{lag} messages wait (end offset {end}, committed {committed})",
        numbers,
    )


def rule_growing(window: Sequence[Observation], th: Thresholds) -> Verdict | None:
    """Rule 5: lag grew across the whole (complete) window while the consumer advanced."""
    if len(window) < th.min_evaluations:
        return None
    lags = [o.lag for o in window]
    if any(b < a for a, b in itertools.pairwise(lags)) or lags[-1] <= lags[0]:
        return None
    if min(lags) <= th.allowed_lag:
        return None
    first, last = window[0], window[-1]
    return growing_verdict(
        (first.ts_s, first.committed, first.end, first.lag),
        (last.ts_s, last.committed, last.end, last.lag),
        len(window),
    )


def growing_verdict(
    first: tuple[float, int, int, int], last: tuple[float, int, int, int], evaluations: int
) -> Verdict:
    """``first`` and ``last``: (ts_s, committed, end, lag) of the window's first and last evaluation."""
    (t0, c0, e0, lag0), (t1, c1, e1, lag1) = first, last
    span = max(t1 - t0, 1e-9)
    return Verdict(
        Status.WARN,
        f"lag grew at every one of the last {evaluations} evaluations, from {lag0} to "
        f"{lag1} in {span:.0f}s: consuming {(c1 - c0) / span:.1f}/s, "
        f"producing {(e1 - e0) / span:.1f}/s",
        {
            "lag_first": lag0,
            "lag_last": lag1,
            "evaluations": evaluations,
            "consume_rate": round((c1 - c0) / span, 2),
            "produce_rate": round((e1 - e0) / span, 2),
        },
    )


def rule_progressing(
    window: Sequence[Observation], now_s: float, th: Thresholds, progress_since: float | None = None
) -> Verdict:
    """Rule 6: behind, but not (yet) long enough without progress to say more."""
    last = window[-1]
    lags = [o.lag for o in window]
    since = progress_since if progress_since is not None else progress_ts(window, th.allowed_lag)
    idle = None
    if since is not None and all(o.committed == last.committed for o in window) and now_s - since > 0:
        idle = now_s - since
    return progressing_verdict(
        last.committed, last.end, last.lag, len(window), min(lags), max(lags), idle, th
    )


def progressing_verdict(
    committed: int,
    end: int,
    lag: int,
    evaluations: int,
    lag_min: int,
    lag_max: int,
    idle_s: float | None,
    th: Thresholds,
) -> Verdict:
    """``idle_s``: how long the committed offset has been unchanged, when it has been throughout
    the window (None: it moved)."""
    numbers = {"committed": committed, "end": end, "lag": lag, "evaluations": evaluations}
    if idle_s is not None:
        return Verdict(
            Status.OK,
            f"behind by {lag}; committed offset unchanged for {idle_s:.0f}s so far "
            f"(STOP/STALL only after the {th.window_s:.0f}s window)",
            {**numbers, "no_progress_s": round(idle_s, 1)},
        )
    trend = "not growing throughout the window" if evaluations > 1 else "first evaluation"
    return Verdict(
        Status.OK,
        f"behind by {lag} but progressing ({trend}; lag over window {lag_min}..{lag_max})",
        numbers,
    )


@dataclass(frozen=True)
class GroupVerdict:
    status: Status
    reason: str
    numbers: dict[str, Any]


def evaluate_group(partitions: dict[str, Verdict], members_active: bool) -> GroupVerdict:
    """Worst partition status, with how many partitions carry it and which is worst."""
    if not partitions:
        return GroupVerdict(Status.ERR, "no committed offsets to evaluate", {"partitions": 0})
    counts: dict[str, int] = {}
    for v in partitions.values():
        counts[v.status.value] = counts.get(v.status.value, 0) + 1
    worst_name, worst = max(
        partitions.items(), key=lambda kv: (SEVERITY[kv[1].status], kv[1].numbers.get("lag", 0))
    )
    behind = sum(1 for v in partitions.values() if v.numbers.get("lag", 0) > 0)
    uncommitted = sum(1 for v in partitions.values() if v.numbers.get("uncommitted"))
    reprocessed = {
        name: v.numbers["reprocessed"] for name, v in partitions.items() if "reprocessed" in v.numbers
    }
    return group_verdict(
        len(partitions), counts, worst_name, worst, behind, uncommitted, reprocessed, members_active
    )


def group_verdict(
    n: int,
    counts: dict[str, int],
    worst_name: str,
    worst: Verdict,
    behind: int,
    uncommitted: int,
    reprocessed: dict[str, int],
    members_active: bool,
) -> GroupVerdict:
    """The words and numbers of :func:`evaluate_group` from what it counts over the partitions:
    ``counts`` per status value, ``behind`` (lag > 0), ``uncommitted`` (without a commit) and
    the messages ``reprocessed`` per partition name after a passed rewind."""
    numbers: dict[str, Any] = {"partitions": n, "by_status": counts, "worst_partition": worst_name}
    notes = _group_notes(uncommitted, reprocessed, numbers)
    if worst.status is Status.OK:
        tail = f" ({behind} behind; worst {worst_name}: {worst.reason})" if behind else ""
        return GroupVerdict(Status.OK, f"all {n} partitions OK{tail}{notes}", numbers)
    members = "has members" if members_active else "has no active member"
    return GroupVerdict(
        worst.status,
        f"{worst.status.value} on {counts[worst.status.value]} of {n} partitions; group {members}; "
        f"worst {worst_name}: {worst.reason}{notes}",
        numbers,
    )


def _group_notes(uncommitted: int, reprocessed: dict[str, int], numbers: dict[str, Any]) -> str:
    """Facts a worst-partition summary would hide: partitions without a commit, reprocessing."""
    notes = []
    if uncommitted:
        numbers["uncommitted"] = uncommitted
        notes.append(f"{uncommitted} without a committed offset")
    if reprocessed:
        numbers["reprocessed"] = sum(reprocessed.values())
        names = ", ".join(sorted(reprocessed)[:5]) + (", ..." if len(reprocessed) > 5 else "")
        notes.append(f"{numbers['reprocessed']} messages reprocessed after a rewind ({names})")
    return "".join(f"; {n}" for n in notes)
