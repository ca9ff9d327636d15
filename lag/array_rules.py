"""The status rules of :mod:`lag.rules`, decided for many (group, partition) windows at once.

:func:`evaluate` takes the observation windows of ``P`` partitions as ``(H, P)`` arrays, each
column one window right-aligned (its newest observation in row ``H − 1``, absent rows before
its oldest), and decides every column's verdict with numpy: which rule applies and the numbers
it needs. Nothing is formatted then; :meth:`Decisions.verdict` builds one column's
:class:`~lag.rules.Verdict` on demand with the same functions :mod:`lag.rules` uses
(``uncommitted_verdict``, ``caught_up_verdict``, …), so the words and numbers cannot drift
apart. :mod:`lag.rules` stays the reference: ``tests/lag/test_lag_array_rules.py`` checks, on
generated windows, that every column's verdict equals ``rules.evaluate_partition`` of the same
window (status, reason and numbers).

Contract of the inputs (what :class:`lag.rules.Observation` holds, one array per field):
``state`` 0 = no observation in that row, 1 = an observation, 2 = an observation that failed
(``Observation.error``; its text is only read for the newest row, from ``errors``); ``lag`` is
``Observation.lag``; ``progress_since`` NaN where the caller keeps no progress time (``None``).
Every column must hold an observation in its newest row.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from lag import rules
from lag.rules import Status, Thresholds, Verdict

ABSENT, OBSERVED, FAILED = 0, 1, 2

# Status <-> small integer codes (the order of Status), and their SEVERITY as an array.
STATUSES: tuple[Status, ...] = tuple(Status)
CODE = {s: i for i, s in enumerate(STATUSES)}
SEVERITY = np.array([rules.SEVERITY[s] for s in STATUSES], dtype=np.int8)

# Which rule decided a column (the function that builds its verdict).
ERROR, UNCOMMITTED_EMPTY, UNCOMMITTED, DELETED, REWIND, CAUGHT_UP, NO_PROGRESS, GROWING, PROGRESSING = range(
    9
)

_I64_MAX = np.iinfo(np.int64).max


@dataclass
class Decisions:
    """What :func:`evaluate` decided, per column. ``status`` holds :data:`CODE` values;
    the rest are what the verdicts' words and numbers are made of."""

    rule: np.ndarray  # uint8: ERROR … PROGRESSING
    status: np.ndarray  # uint8: CODE
    committed: np.ndarray
    end: np.ndarray
    start: np.ndarray
    lag: np.ndarray
    idle_s: np.ndarray  # float64, NaN where no idle time was measured
    evaluations: np.ndarray  # rows the deciding rule looked at
    lag_min: np.ndarray
    lag_max: np.ndarray
    first_ts: np.ndarray  # the growing window's first evaluation (GROWING only)
    first_committed: np.ndarray
    first_end: np.ndarray
    first_lag: np.ndarray
    last_ts: np.ndarray  # and its last (GROWING only)
    last_committed: np.ndarray
    last_end: np.ndarray
    last_lag: np.ndarray
    trace: np.ndarray  # bool: a passed rewind is told (rewind_trace)
    high: np.ndarray  # the rewind's high and low committed offsets (REWIND, trace)
    low: np.ndarray
    errors: Mapping[int, str] | Sequence[str | None]  # the newest observation's error text, by column
    active: np.ndarray  # bool: the column's group has members
    th: Thresholds

    def __len__(self) -> int:
        return len(self.rule)

    @property
    def numbers_lag(self) -> np.ndarray:
        """``verdict.numbers.get("lag", 0)`` of every column (the group's worst-partition key)."""
        return np.where((self.rule == ERROR) | (self.rule == GROWING), 0, self.lag)

    @property
    def uncommitted(self) -> np.ndarray:
        """Columns whose verdict says ``uncommitted`` (judged without a committed offset)."""
        return (self.rule == UNCOMMITTED_EMPTY) | (self.rule == UNCOMMITTED)

    @property
    def reprocessed(self) -> np.ndarray:
        """Messages reprocessed after a passed rewind (0 where none is told)."""
        return np.where(self.trace, self.high - self.low, 0)

    def verdict(self, i: int) -> Verdict:
        """Column ``i``'s verdict, built by :mod:`lag.rules`' own functions."""
        rule = int(self.rule[i])
        c, e, lag = int(self.committed[i]), int(self.end[i]), int(self.lag[i])
        idle = float(self.idle_s[i])
        th, active = self.th, bool(self.active[i])
        if rule == ERROR:
            return Verdict(Status.ERR, str(self.errors[i]), {"committed": c, "end": e})
        if rule in (UNCOMMITTED_EMPTY, UNCOMMITTED):
            return rules.uncommitted_verdict(
                int(self.start[i]), e, lag, th, active, None if rule == UNCOMMITTED_EMPTY else idle
            )
        if rule == REWIND:
            return rules.rewind_verdict(int(self.high[i]), c, lag)
        if rule == DELETED:
            v = rules.deleted_unread_verdict(c, int(self.start[i]), e, lag)
        elif rule == CAUGHT_UP:
            v = rules.caught_up_verdict(c, e, lag)
        elif rule == NO_PROGRESS:
            v = rules.no_progress_verdict(c, e, lag, idle, th, active)
        elif rule == GROWING:
            first = (float(self.first_ts[i]), int(self.first_committed[i]), int(self.first_end[i]))
            last = (float(self.last_ts[i]), int(self.last_committed[i]), int(self.last_end[i]))
            v = rules.growing_verdict(
                (*first, int(self.first_lag[i])), (*last, int(self.last_lag[i])), int(self.evaluations[i])
            )
        else:
            v = rules.progressing_verdict(
                c,
                e,
                lag,
                int(self.evaluations[i]),
                int(self.lag_min[i]),
                int(self.lag_max[i]),
                None if np.isnan(idle) else idle,
                th,
            )
        return rules.rewind_trace(v, int(self.high[i]), int(self.low[i])) if self.trace[i] else v


def evaluate(
    ts: np.ndarray,
    committed: np.ndarray,
    end: np.ndarray,
    lag: np.ndarray,
    state: np.ndarray,
    start: np.ndarray,
    now_s: float,
    active: np.ndarray,
    th: Thresholds,
    progress_since: np.ndarray,
    errors: Mapping[int, str] | Sequence[str | None] = (),
) -> Decisions:
    """Every column's verdict, as ``rules.evaluate_partition(window, now_s, active, th,
    progress_since)`` decides it (see the module contract; ``start`` is the newest
    observation's log start offset, the only one a verdict reads)."""
    p = state.shape[1]
    if p and (state[-1] == ABSENT).any():
        raise ValueError("every column needs an observation in its newest row")
    c1, e1, lag1, ts1 = committed[-1], end[-1], lag[-1], ts[-1]
    d = Decisions(
        rule=np.full(p, PROGRESSING, np.uint8),
        status=np.full(p, CODE[Status.OK], np.uint8),
        committed=c1,
        end=e1,
        start=start,
        lag=lag1,
        idle_s=np.full(p, np.nan),
        evaluations=np.zeros(p, np.int64),
        lag_min=lag1.copy(),
        lag_max=lag1.copy(),
        first_ts=ts1.copy(),
        first_committed=c1.copy(),
        first_end=e1.copy(),
        first_lag=lag1.copy(),
        last_ts=ts1.copy(),
        last_committed=c1.copy(),
        last_end=e1.copy(),
        last_lag=lag1.copy(),
        trace=np.zeros(p, bool),
        high=np.zeros(p, np.int64),
        low=np.zeros(p, np.int64),
        errors=errors,
        active=np.broadcast_to(np.asarray(active, bool), (p,)).copy(),
        th=th,
    )
    failed = state[-1] == FAILED
    _set(d, failed, ERROR, Status.ERR)
    unc = ~failed & (c1 < 0)
    if unc.any():
        _uncommitted(d, unc, ts, committed, lag, state, now_s, th, progress_since)
    com = ~failed & (c1 >= 0)
    if com.any():
        ok = (state == OBSERVED) & (committed >= 0)
        _committed(d, com, _compact(ok, ts, committed, end, lag), now_s, th, progress_since)
    return d


def _set(d: Decisions, mask: np.ndarray, rule: int, status: Status | np.ndarray) -> None:
    d.rule[mask] = rule
    d.status[mask] = CODE[status] if isinstance(status, Status) else status[mask]


def _no_progress_status(active: np.ndarray) -> np.ndarray:
    return np.where(active, CODE[Status.STALL], CODE[Status.STOP]).astype(np.uint8)


@dataclass
class _Window:
    """Columns' windows right-aligned: rows ``h ≥ H − n`` are the ``n`` observations kept."""

    ts: np.ndarray
    committed: np.ndarray
    end: np.ndarray
    lag: np.ndarray
    n: np.ndarray

    def rows(self) -> np.ndarray:
        return np.arange(self.ts.shape[0])[:, None] >= self.ts.shape[0] - self.n[None, :]

    def first(self, a: np.ndarray) -> np.ndarray:
        """``a``'s value at each column's oldest kept row (its newest where none is kept)."""
        h = self.ts.shape[0]
        return np.take_along_axis(a, np.minimum(h - self.n, h - 1)[None, :], 0)[0]


def _compact(mask: np.ndarray, ts, committed, end, lag) -> _Window:
    """The rows of ``mask``, in order, right-aligned per column (the window without the rows
    the rules skip: failed observations, observations without a commit, or old ones)."""
    n = mask.sum(0)
    if (mask == _Window(ts, committed, end, lag, n).rows()).all():  # already a suffix: no copy
        return _Window(ts, committed, end, lag, n)
    order = np.argsort(mask, axis=0, kind="stable")  # the masked rows last, in their order
    take = lambda a: np.take_along_axis(np.broadcast_to(a, mask.shape), order, 0)  # noqa: E731
    return _Window(take(ts), take(committed), take(end), take(lag), n)


def _progress_ts(w: _Window, allowed_lag: int) -> np.ndarray:
    """:func:`lag.rules.progress_ts` of each column's window (NaN for None)."""
    rows = w.rows()
    moved = np.zeros_like(rows)
    moved[1:] = rows[1:] & rows[:-1] & ((w.committed[1:] != w.committed[:-1]) | (w.lag[1:] <= allowed_lag))
    h = rows.shape[0]
    newest = h - 1 - np.argmax(moved[::-1], axis=0)
    at_newest = np.take_along_axis(w.ts, newest[None, :], 0)[0]
    first_ok = w.first(w.lag) <= allowed_lag
    return np.where(moved.any(0), at_newest, np.where(first_ok & (w.n > 0), w.first(w.ts), np.nan))


def _since(w: _Window, allowed_lag: int, progress_since: np.ndarray) -> np.ndarray:
    given = ~np.isnan(progress_since)
    if given.all():
        return progress_since
    return np.where(given, progress_since, _progress_ts(w, allowed_lag))


def _uncommitted(d, cols, ts, committed, lag, state, now_s, th, progress_since) -> None:
    """:func:`lag.rules.rule_uncommitted` on the newest run of observations without a commit."""
    good = (state == OBSERVED) & (committed < 0)
    run = np.cumprod(good[::-1], axis=0)[::-1].astype(bool)  # rows from which all are good
    w = _Window(ts, committed, committed, lag, run.sum(0))
    since = _since(w, th.allowed_lag, progress_since)
    idle = now_s - np.where(np.isnan(since), w.first(w.ts), since)
    empty = cols & (d.lag <= th.allowed_lag)
    waiting = cols & ~empty
    _set(d, empty, UNCOMMITTED_EMPTY, Status.OK)
    d.idle_s[waiting] = idle[waiting]
    over = idle > th.window_s
    _set(d, waiting & ~over, UNCOMMITTED, Status.OK)
    _set(d, waiting & over, UNCOMMITTED, _no_progress_status(d.active))


def _committed(d: Decisions, cols: np.ndarray, w: _Window, now_s, th: Thresholds, progress_since) -> None:
    """Rules 0-6 in order on the observations with a commit (``w``), then the rewind trace."""
    rows = w.rows()
    pair = np.zeros_like(rows)
    pair[1:] = rows[1:] & rows[:-1]
    back = pair.copy()
    back[1:] &= w.committed[1:] < w.committed[:-1]
    has_back = back.any(0)
    prev = np.zeros_like(w.committed)
    prev[1:] = w.committed[:-1]
    high = np.where(back, prev, -1).max(0)
    low = np.where(back, w.committed, _I64_MAX).min(0)
    d.high[cols], d.low[cols] = high[cols], low[cols]
    todo = cols.copy()

    def decide(mask: np.ndarray, rule: int, status: Status | np.ndarray) -> None:
        nonlocal todo
        mask = todo & mask
        _set(d, mask, rule, status)
        todo &= ~mask

    decide(d.start - d.committed > 0, DELETED, Status.ERR)
    decide(has_back & (d.committed < high), REWIND, Status.REWIND)
    decide(d.lag <= th.allowed_lag, CAUGHT_UP, Status.OK)
    since = _since(w, th.allowed_lag, progress_since)
    idle = now_s - np.where(np.isnan(since), w.first(w.ts), since)
    stuck = todo & (idle > th.window_s)
    d.idle_s[stuck] = idle[stuck]
    decide(stuck, NO_PROGRESS, _no_progress_status(d.active))
    if todo.any():
        _growing(d, todo, w, now_s, th)
        todo &= d.rule != GROWING
    if todo.any():
        _progressing(d, todo, w, rows, now_s, since)
    d.trace[cols] = (has_back & (d.committed >= high) & (d.rule != REWIND))[cols]


def _growing(d: Decisions, cols: np.ndarray, w: _Window, now_s: float, th: Thresholds) -> None:
    """Rule 5 on the observations of the last ``window_s`` (in window order)."""
    recent = w.rows() & (w.ts >= now_s - th.window_s)
    g = _compact(recent, w.ts, w.committed, w.end, w.lag)
    rows = g.rows()
    pair = np.zeros_like(rows)
    pair[1:] = rows[1:] & rows[:-1]
    fell = (pair[1:] & (g.lag[1:] < g.lag[:-1])).any(0)
    first_lag = g.first(g.lag)
    lowest = np.where(rows, g.lag, _I64_MAX).min(0)
    grew = (g.n >= th.min_evaluations) & ~fell & (g.lag[-1] > first_lag) & (lowest > th.allowed_lag)
    mask = cols & grew & (g.n > 0)
    _set(d, mask, GROWING, Status.WARN)
    d.evaluations[mask] = g.n[mask]
    d.first_ts[mask] = g.first(g.ts)[mask]
    d.first_committed[mask] = g.first(g.committed)[mask]
    d.first_end[mask] = g.first(g.end)[mask]
    d.first_lag[mask] = first_lag[mask]
    d.last_ts[mask] = g.ts[-1][mask]
    d.last_committed[mask] = g.committed[-1][mask]
    d.last_end[mask] = g.end[-1][mask]
    d.last_lag[mask] = g.lag[-1][mask]


def _progressing(d: Decisions, cols: np.ndarray, w: _Window, rows: np.ndarray, now_s, since) -> None:
    """Rule 6: OK, saying how long the commit has been unchanged (when it has been throughout)."""
    _set(d, cols, PROGRESSING, Status.OK)
    d.evaluations[cols] = w.n[cols]
    d.lag_min[cols] = np.where(rows, w.lag, _I64_MAX).min(0)[cols]
    d.lag_max[cols] = np.where(rows, w.lag, -1).max(0)[cols]
    still = ~(rows & (w.committed != w.committed[-1])).any(0)
    idle = now_s - since
    told = cols & ~np.isnan(since) & still & (idle > 0)
    d.idle_s[told] = idle[told]


@dataclass
class GroupSummary:
    """What :func:`lag.rules.evaluate_group` counts, for many groups at once (index = group id)."""

    partitions: np.ndarray  # columns per group
    counts: np.ndarray  # (groups, len(STATUSES)): columns per status code
    worst: np.ndarray  # the worst column of each group (an index into the inputs; -1: none)
    behind: np.ndarray  # columns with numbers["lag"] > 0
    uncommitted: np.ndarray
    reprocessed: np.ndarray  # indices of the columns that tell a passed rewind

    def verdict(
        self, g: int, worst_name: str, worst: Verdict, reprocessed: dict[str, int], members_active: bool
    ) -> rules.GroupVerdict:
        """Group ``g``'s verdict (``reprocessed``: name → messages, of its columns among
        :attr:`reprocessed`), by :func:`lag.rules.group_verdict`."""
        n = int(self.partitions[g])
        if n == 0:
            return rules.evaluate_group({}, members_active)
        counts = {STATUSES[k].value: int(c) for k, c in enumerate(self.counts[g]) if c}
        return rules.group_verdict(
            n,
            counts,
            worst_name,
            worst,
            int(self.behind[g]),
            int(self.uncommitted[g]),
            reprocessed,
            members_active,
        )


def summarize_groups(
    gid: np.ndarray,
    status: np.ndarray,
    numbers_lag: np.ndarray,
    uncommitted: np.ndarray,
    trace: np.ndarray,
    groups: int,
) -> GroupSummary:
    """Per group: its columns (``gid``, in the order :func:`lag.rules.evaluate_group` iterates
    them), counts per status, and its worst column: the highest SEVERITY, then the largest
    ``numbers["lag"]``, then the first in order (what ``max`` over the dict returns). The other
    arguments are :class:`Decisions`' ``status``, ``numbers_lag``, ``uncommitted`` and
    ``trace`` of the same columns (several topics' decisions concatenated)."""
    status = status.astype(np.int64)
    sev = SEVERITY[status].astype(np.int64)
    lagn = numbers_lag.astype(np.int64)
    order = np.lexsort((np.arange(len(gid)), -lagn, -sev, gid))
    first = np.ones(len(order), bool)
    first[1:] = gid[order][1:] != gid[order][:-1]
    worst = np.full(groups, -1, np.int64)
    worst[gid[order][first]] = order[first]
    counts = np.bincount(gid * len(STATUSES) + status, minlength=groups * len(STATUSES))
    return GroupSummary(
        partitions=np.bincount(gid, minlength=groups),
        counts=counts.reshape(groups, len(STATUSES)),
        worst=worst,
        behind=np.bincount(gid, weights=lagn > 0, minlength=groups).astype(np.int64),
        uncommitted=np.bincount(gid, weights=uncommitted, minlength=groups).astype(np.int64),
        reprocessed=np.flatnonzero(trace),
    )
