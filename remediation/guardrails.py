"""Guardrails: small named pure rules; time, state and thresholds come in as arguments.

Each rule returns ``None`` (go on) or the reason it refuses, which the remediator audits. The
order the remediator applies them in: breaker open → duplicate → circuit breaker → cooldown →
caps. They read only findings admitted at the boundary (:mod:`remediation.intake`). Dry run
is not a rule here: it is the remediator's default (nothing is executed unless ``execute``).

:class:`SeenFindings` is the only state: the remediator's own memory of the findings it was
handed — when each active one was last seen, when each subject cleared. It is not the findings
lifecycle (:class:`findings.tracker.FindingTracker`, which says appeared / ongoing / cleared to a
source): the remediator also reads findings straight from the findings topic, outlives the
process (persisted with the execution state) and lets a finding lapse when its source stops
repeating it. Its readers are the circuit breaker (what looks bad now) and restores (since when
a subject is healthy).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from remediation.config import CapsConfig, CircuitBreakerConfig

_BROKER = re.compile(r"broker:(0|[1-9][0-9]{0,9})")


def broker_of(subject: str) -> int | None:
    """``broker:2`` -> 2; anything else (``broker:²``, ``broker:1:/d``, ``topic:t``) -> None."""
    m = _BROKER.fullmatch(subject) if isinstance(subject, str) else None
    return int(m.group(1)) if m else None


@dataclass
class SeenFindings:
    """Active findings: ``"rule|subject"`` -> last seen (epoch s); cleared subjects -> when.
    Plain dicts of strings and numbers, so the execution state stores them as they are."""

    active: dict[str, float] = field(default_factory=dict)
    cleared: dict[str, float] = field(default_factory=dict)

    @classmethod
    def restored(cls, active: Mapping[str, Any], cleared: Mapping[str, Any]) -> SeenFindings:
        """From persisted state, keeping only well-formed entries (``rule|subject`` -> a number):
        a state written before findings were checked at the boundary may hold poison."""

        def ok(k: Any, t: Any) -> bool:
            return isinstance(k, str) and isinstance(t, int | float) and not isinstance(t, bool)

        return cls(
            active={k: float(t) for k, t in active.items() if ok(k, t) and "|" in k and len(k) < 2048},
            cleared={k: float(t) for k, t in cleared.items() if ok(k, t) and len(k) < 2048},
        )

    def observe(self, rule: str, subject: str, active: bool, now: float) -> None:
        key = f"{rule}|{subject}"
        if active:
            self.active[key] = now
            self.cleared.pop(subject, None)
        elif self.active.pop(key, None) is not None or subject not in self.cleared:
            self.cleared[subject] = now

    def current(self, now: float, ttl_s: float) -> dict[str, float]:
        """Active findings seen within ``ttl_s`` (a source that stopped repeating one let it lapse)."""
        return {k: t for k, t in self.active.items() if now - t <= ttl_s}

    def healthy_since(self, subject: str, now: float, ttl_s: float) -> float | None:
        """When ``subject`` stopped having any active finding, or None while it still has one."""
        if any(k.split("|", 1)[1] == subject for k in self.current(now, ttl_s)):
            return None
        lapsed = [t + ttl_s for k, t in self.active.items() if k.split("|", 1)[1] == subject]
        times = [*lapsed, *([self.cleared[subject]] if subject in self.cleared else [])]
        return max(times) if times else None


# Rule 0 — the breaker on failures and harm: open until a person resets it.
def breaker_open(breaker: Mapping[str, Any] | None) -> str | None:
    if not breaker:
        return None
    return (
        f"breaker open since {breaker.get('since', 0):.0f}: {breaker.get('reason')} "
        "(a person resets it: linkwatch remediate reset)"
    )


# Rule 1 — the same finding (same dedup key) is acted on at most once.
def duplicate(key: str, acted: Collection[str]) -> str | None:
    return f"finding {key} was already acted on" if key in acted else None


# Returning brokers: a broker whose demotion was undone less than ``grace_s`` ago is catching up
# (replica sets re-joined, leaders waiting on it, cold caches, or leading again beside the next
# victim); what is found about it meanwhile may be the restore's own wake. The circuit breaker
# does not count it; whether to act on it again is the cooldown's (rule 3).
def returning_brokers(
    actions: Mapping[str, Mapping[str, Any]], grace_s: float, now: float
) -> dict[int, float]:
    """Broker -> seconds since its restore, for the brokers still inside the grace: read from the
    execution state's actions (an undo done less than ``grace_s`` ago, of an action now
    ``undone``, gives back the brokers that action demoted)."""
    back: dict[int, float] = {}
    for a in actions.values():
        undone = actions.get(a.get("undo_of") or "")
        finished = a.get("finished")
        if undone is None or undone.get("status") != "undone" or a.get("status") != "done":
            continue
        if not isinstance(finished, int | float) or now - finished >= grace_s:
            continue
        for b in undone.get("plan", {}).get("demotes", []):
            if isinstance(b, int):
                back[b] = min(now - finished, back.get(b, now - finished))
    return back


# Rule 2 — circuit breaker: stand down during a cluster-wide slowdown or when too many brokers look
# bad. A returning broker is not counted: its findings may be the restore's wake.
def circuit_open(
    active: Mapping[str, float],
    brokers: int,
    cfg: CircuitBreakerConfig,
    returning: Collection[int] = (),
) -> str | None:
    rules = {k.split("|", 1)[0] for k in active}
    stand_down = sorted(rules & set(cfg.stand_down_rules))
    if stand_down:
        return f"circuit breaker: cluster-wide finding active ({', '.join(stand_down)})"
    bad = sorted(
        {
            b
            for k in active
            if k.split("|", 1)[0] in cfg.bad_broker_rules
            and (b := broker_of(k.split("|", 1)[1])) is not None
            and b not in returning
        }
    )
    share = len(bad) / brokers if brokers else 1.0
    if len(bad) > cfg.max_bad_brokers or (bad and share > cfg.max_bad_share):
        return (
            f"circuit breaker: {len(bad)} of {brokers} brokers look bad ({bad}); "
            f"limit {cfg.max_bad_brokers} brokers / {cfg.max_bad_share:.0%}"
        )
    return None


# Rule 3 — cooldown per subject: no new action on a subject acted on less than cooldown_s ago.
def cooling_down(subject: str, last_action: Mapping[str, float], cooldown_s: float, now: float) -> str | None:
    last = last_action.get(subject)
    if last is not None and now - last < cooldown_s:
        return f"cooldown: {subject} was acted on {now - last:.0f} s ago (cooldown {cooldown_s:.0f} s)"
    return None


# Rule 4 — caps on concurrent actions and on brokers demoted at once (count and share).
def over_caps(
    running: int, demoted: Collection[int], demotes: Collection[int], brokers: int, caps: CapsConfig
) -> str | None:
    if caps.max_concurrent_actions is not None and running >= caps.max_concurrent_actions:
        return f"cap: {running} actions running (max_concurrent_actions {caps.max_concurrent_actions})"
    after = set(demoted) | set(demotes)
    if not demotes or after == set(demoted):
        return None
    if caps.max_demoted_brokers is not None and len(after) > caps.max_demoted_brokers:
        return f"cap: demoting {sorted(after)} exceeds max_demoted_brokers {caps.max_demoted_brokers}"
    if caps.max_demoted_share is not None and brokers and len(after) / brokers > caps.max_demoted_share:
        return (
            f"cap: demoting {sorted(after)} is {len(after) / brokers:.0%} of {brokers} brokers "
            f"(max_demoted_share {caps.max_demoted_share:.0%})"
        )
    return None
