"""Runs detectors, applies the policy, tracks which findings are active, and feeds sinks.

This is the only place in the analyzer with side effects. Detector and sink failures are
isolated: logged, counted in :attr:`Engine.errors`, and the others go on.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from analyzer.base import Decision, Detector, FindingSink, GaugeValues, Policy, SeverityPolicy
from linkwatch.aggregates import Aggregates
from linkwatch.records import Finding

log = logging.getLogger(__name__)

# Bound on tracked findings; beyond it new subjects are dropped (and counted) rather than
# letting a flapping rule grow memory without limit.
MAX_ACTIVE = 10_000


@dataclass
class Changes:
    appeared: list[Finding] = field(default_factory=list)
    cleared: list[Finding] = field(default_factory=list)
    ongoing: list[Finding] = field(default_factory=list)


class FindingTracker:
    """Which (rule, subject) pairs are active; turns successive evaluations into changes.

    A finding absent from an evaluation clears: it is re-emitted with ``active=False``. A
    finding whose evidence has the key ``provisional`` (a detector is not yet sure, e.g. the
    slow-broker rule while the latest window reads cluster-wide) is not raised new — it is
    counted in :attr:`held` — but keeps an already active finding active.
    """

    def __init__(self, max_active: int = MAX_ACTIVE) -> None:
        self.active: dict[tuple[str, str], Finding] = {}
        self.max_active = max_active
        self.dropped = 0
        self.held = 0

    def update(self, findings: Sequence[Finding], now_ms: int) -> Changes:
        changes = Changes()
        seen: dict[tuple[str, str], Finding] = {}
        for f in findings:
            ident = (f.rule, f.subject)
            if ident not in self.active and f.evidence.get("provisional"):
                self.held += 1
                continue
            if ident not in self.active and len(self.active) + len(changes.appeared) >= self.max_active:
                self.dropped += 1
                continue
            seen[ident] = f
            (changes.ongoing if ident in self.active else changes.appeared).append(f)
        for ident, old in self.active.items():
            if ident not in seen:
                changes.cleared.append(dataclasses.replace(old, active=False, ts_ms=now_ms))
        self.active = seen
        return changes


class Engine:
    """detect → decide → act, once per :meth:`evaluate` call."""

    def __init__(
        self,
        detectors: Sequence[Detector],
        sinks: Sequence[FindingSink] = (),
        policy: Policy | None = None,
    ) -> None:
        self.detectors = list(detectors)
        self.sinks = list(sinks)
        self.policy = policy or SeverityPolicy()
        self.tracker = FindingTracker()
        self.errors: Counter[str] = Counter()
        self.check_later: list[Finding] = []

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        findings: list[Finding] = []
        for det in self.detectors:
            try:
                findings.extend(det.detect(data, now_ms))
            except Exception:
                self.errors[f"detector:{det.name}"] += 1
                log.exception("detector %s failed; the others go on", det.name)
        return findings

    def measure(self, data: Aggregates, now_ms: int) -> GaugeValues:
        """The detectors' gauge values; a detector whose ``measure`` fails is logged and counted
        (its gauges stay empty this time) and the others go on."""
        values: GaugeValues = {}
        for det in self.detectors:
            if not det.gauges:
                continue
            try:
                values.update(det.measure(data, now_ms))
            except Exception:
                self.errors[f"gauges:{det.name}"] += 1
                log.exception("gauges of detector %s failed; the others go on", det.name)
        return values

    def decide(self, findings: Sequence[Finding]) -> list[Finding]:
        alerts, later = [], []
        for f in findings:
            try:
                verdict = self.policy.decide(f)
            except Exception:
                self.errors["policy"] += 1
                log.exception("policy failed on %s %s; alerting", f.rule, f.subject)
                alerts.append(f)
                continue
            if verdict.decision is Decision.ALERT:
                alerts.append(f)
            elif verdict.decision is Decision.CHECK_LATER:
                later.append(f)
        self.check_later = later
        return alerts

    def evaluate(self, data: Aggregates, now_ms: int) -> Changes:
        changes = self.tracker.update(self.decide(self.detect(data, now_ms)), now_ms)
        for f in [*changes.appeared, *changes.ongoing, *changes.cleared]:
            self.act(f)
        return changes

    def act(self, finding: Finding) -> None:
        for sink in self.sinks:
            try:
                sink.emit(finding)
            except Exception:
                self.errors[f"sink:{type(sink).__name__}"] += 1
                log.exception("sink %s failed on %s %s", type(sink).__name__, finding.rule, finding.subject)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("sink %s failed to close", type(sink).__name__)
