"""What is active: the one tracker of findings per (rule, subject), for every finding source.

A finding **appears**, repeats (**ongoing**) while its source still reports it, and **clears**:
told by its source (an event with ``active=False``) or, for a source that reports everything it
sees at each evaluation, by being absent from one. :class:`FindingTracker` turns what a source
reports into these changes, in one of two modes:

* :meth:`FindingTracker.observe` — one event at a time (the findings pipeline, which hears every
  source's events, clearings included, one by one);
* :meth:`FindingTracker.update` — one evaluation's complete set (the analyzer's engine, the lag
  collector's group statuses): an active finding absent from it clears, and is re-emitted with
  ``active=False``.

What differs between the sources is chosen by options, each off unless said:

* ``hold_provisional`` (on by default): a finding whose evidence has the key ``provisional`` (its
  detector is not yet sure, e.g. the slow-broker rule while the latest window reads cluster-wide)
  is not raised new — counted in :attr:`FindingTracker.held` — but keeps an active one active;
* ``repeat_after_ms`` (:meth:`~FindingTracker.update` only): an ongoing finding is reported
  again only once this long has passed since it was last reported (the lag collector repeats an
  open episode every ``finding_refresh_s``); 0 reports it at every evaluation (the analyzer);
* ``phase`` (:meth:`~FindingTracker.update` only): a function naming a finding's phase (the lag
  status); a finding whose phase differs from its active one's is a new episode: the active one
  clears and the new one appears;
* ``keep_opened_ts`` (:meth:`~FindingTracker.update` only): every report of one episode, its
  clearing included, carries the ``ts_ms`` of the event that opened it, so all of them share one
  record key (:meth:`~linkwatch.records.Finding.dedup_key`); otherwise a clearing is stamped with
  the evaluation's time.

Bounded: beyond ``max_tracked`` active findings a new one is dropped and counted in
:attr:`FindingTracker.dropped` (None: one entry per subject, unbounded). The tracker also holds
findings for a later look (a CHECK_LATER verdict: :meth:`~FindingTracker.hold`,
:meth:`~FindingTracker.due`); a finding that clears is no longer held.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from linkwatch.records import Finding

# Beyond it new subjects are dropped and counted, so a flapping rule cannot grow memory without limit.
MAX_TRACKED = 10_000

Ident = tuple[str, str]  # (rule, subject)


def ident(f: Finding) -> Ident:
    return (f.rule, f.subject)


class Change(enum.Enum):
    APPEARED = "appeared"
    ONGOING = "ongoing"
    CLEARED = "cleared"


@dataclass
class Changes:
    """What one evaluation changed; a cleared finding is the active one re-emitted inactive."""

    appeared: list[Finding] = field(default_factory=list)
    cleared: list[Finding] = field(default_factory=list)
    ongoing: list[Finding] = field(default_factory=list)


class FindingTracker:
    """Active findings per (rule, subject) (:attr:`active`: the latest report of each), and
    findings held for a later check (:attr:`later`). Not thread-safe: its owner serialises calls."""

    def __init__(
        self,
        *,
        max_tracked: int | None = MAX_TRACKED,
        hold_provisional: bool = True,
        repeat_after_ms: int = 0,
        phase: Callable[[Finding], Hashable] | None = None,
        keep_opened_ts: bool = False,
    ) -> None:
        self.active: dict[Ident, Finding] = {}
        self.later: dict[Ident, tuple[float, Finding]] = {}  # due (epoch s), finding
        self.max_tracked = max_tracked
        self.hold_provisional = hold_provisional
        self.repeat_after_ms = repeat_after_ms
        self.phase = phase
        self.keep_opened_ts = keep_opened_ts
        self.dropped = 0
        self.held = 0
        self._told_ms: dict[Ident, int] = {}  # when each active finding was last reported

    # -- one event ----------------------------------------------------------------------------

    def observe(self, f: Finding) -> Change | None:
        """The change one event makes; None for a clearing of something not active, a new
        provisional finding (held) or a new subject beyond ``max_tracked`` (dropped)."""
        key = ident(f)
        if not f.active:
            self._forget([key])
            return Change.CLEARED if self.active.pop(key, None) is not None else None
        if key in self.active:
            self.active[key] = f
            return Change.ONGOING
        if not self._admits(f, len(self.active)):
            return None
        self.active[key] = f
        return Change.APPEARED

    # -- one evaluation -----------------------------------------------------------------------

    def update(self, findings: Iterable[Finding], now_ms: int, *, complete: bool = True) -> Changes:
        """The changes of one evaluation at ``now_ms``. ``complete=False`` says the evaluation
        may have missed findings (its source could not read everything): what is absent from
        it stays active instead of clearing."""
        changes = Changes()
        seen: dict[Ident, Finding] = {}
        ended: set[Ident] = set()
        for f in findings:
            key = ident(f)
            old = self.active.get(key)
            if old is not None and self.phase is not None and self.phase(old) != self.phase(f):
                changes.cleared.append(self._cleared(old, now_ms))
                ended.add(key)
                old = None
            if old is None:
                if not self._admits(f, len(self.active) + len(changes.appeared)):
                    continue
                changes.appeared.append(f)
                self._told_ms[key] = now_ms
            else:
                if self.keep_opened_ts:
                    f = dataclasses.replace(f, ts_ms=old.ts_ms)
                if self._repeat_due(key, now_ms):
                    changes.ongoing.append(f)
                    self._told_ms[key] = now_ms
            seen[key] = f
        for key, old in self.active.items():
            if key in seen or key in ended:
                continue
            if complete:
                changes.cleared.append(self._cleared(old, now_ms))
            else:
                seen[key] = old
        self._forget([k for k in self.active if k not in seen])
        self.active = seen
        return changes

    # -- held for a later check ---------------------------------------------------------------

    def active_rules(self) -> set[str]:
        return {rule for rule, _ in self.active}

    def hold(self, f: Finding, due: float) -> None:
        """Keep ``f`` for a check at ``due``; a finding already held keeps its first due time."""
        key = ident(f)
        first = self.later.get(key, (due, f))[0]
        self.later[key] = (first, f)

    def due(self, now: float) -> list[Finding]:
        """Held findings whose time has come (removed from the hold), each as its latest report.
        A finding that cleared meanwhile is no longer held."""
        ready = [key for key, (at, _) in self.later.items() if at <= now]
        return [self.active.get(key, self.later.pop(key)[1]) for key in ready]

    # -- the rules ----------------------------------------------------------------------------

    def _admits(self, f: Finding, tracked: int) -> bool:
        """Whether a finding not active yet may appear, given ``tracked`` active ones."""
        if self.hold_provisional and f.evidence.get("provisional"):
            self.held += 1
            return False
        if self.max_tracked is not None and tracked >= self.max_tracked:
            self.dropped += 1
            return False
        return True

    def _repeat_due(self, key: Ident, now_ms: int) -> bool:
        told = self._told_ms.get(key)
        return self.repeat_after_ms <= 0 or told is None or now_ms - told >= self.repeat_after_ms

    def _cleared(self, old: Finding, now_ms: int) -> Finding:
        if self.keep_opened_ts:
            return dataclasses.replace(old, active=False)
        return dataclasses.replace(old, active=False, ts_ms=now_ms)

    def _forget(self, keys: Iterable[Ident]) -> None:
        for key in keys:
            self._told_ms.pop(key, None)
            self.later.pop(key, None)
