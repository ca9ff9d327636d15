"""Runs detectors, applies the policy, tracks which findings are active, and feeds sinks.

This is the only place in the analyzer with side effects. Detector and sink failures are
isolated: logged, counted in :attr:`Engine.errors`, and the others go on. The policy is the one
findings policy (:mod:`findings.policy`), the tracker the one findings tracker
(:mod:`findings.tracker`) in its evaluation mode: a finding absent from an evaluation clears,
and a provisional one is not raised new.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

from analyzer.base import Detector, FindingSink, GaugeValues
from findings.policy import Action, FindingPolicyConfig, SeverityPolicyConfig, decide
from findings.tracker import Changes, FindingTracker
from linkwatch.aggregates import Aggregates
from linkwatch.records import Finding

log = logging.getLogger(__name__)


class Engine:
    """detect → decide → act, once per :meth:`evaluate` call."""

    def __init__(
        self,
        detectors: Sequence[Detector],
        sinks: Sequence[FindingSink] = (),
        policy: FindingPolicyConfig | None = None,
    ) -> None:
        self.detectors = list(detectors)
        self.sinks = list(sinks)
        self.policy = policy if policy is not None else SeverityPolicyConfig().as_policy()
        self.tracker = FindingTracker(hold_provisional=True)
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
        """The findings to act on (notify); CHECK_LATER ones are kept in :attr:`check_later`.
        The engine remediates nothing (``can_remediate=False``: REMEDIATE is told as NOTIFY)."""
        alerts, later = [], []
        for f in findings:
            try:
                verdict = decide(f, self.policy, can_remediate=False)
            except Exception:  # a broken policy must not hide findings
                self.errors["policy"] += 1
                log.exception("policy failed on %s %s; alerting", f.rule, f.subject)
                alerts.append(f)
                continue
            if verdict.action is Action.NOTIFY:
                alerts.append(f)
            elif verdict.action is Action.CHECK_LATER:
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
