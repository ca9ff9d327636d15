"""Registry (entry points), engine (detect → decide → act), tracker (appear/clear)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from analyzer.base import DETECTOR_GROUP, Detector, DetectorGauge, GaugeValues, InMemorySink
from analyzer.engine import Engine
from analyzer.registry import available, load_detectors
from analyzer.sinks import PrometheusSink
from findings.policy import Action, SeverityPolicyConfig, decide
from linkwatch.aggregates import Aggregates
from linkwatch.errors import ConfigError
from linkwatch.records import Finding

ROOT = Path(__file__).resolve().parents[2]


def test_every_declared_entry_point_loads() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][DETECTOR_GROUP]
    assert set(declared) <= set(available())
    detectors = load_detectors(dict.fromkeys(declared))
    assert [d.name for d in detectors] == list(declared)
    for det in detectors:  # each one runs on empty input without firing (cold start)
        assert det.detect(Aggregates(cluster="c", window_s=10), 0) == []


@pytest.mark.parametrize(
    ("selection", "message"),
    [
        ({"no_such_rule": None}, "no entry point 'no_such_rule' in group linkwatch.detectors"),
        ({"slow_broker": {"p99_threshold_ms": -1}}, "p99_threshold_ms=-1"),
        ({"slow_broker": {"p99_treshold_ms": 100}}, "p99_treshold_ms"),
    ],
)
def test_bad_selection_fails_at_start(selection, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_detectors(selection)


class _Fixed(Detector):
    """Returns whatever findings the test hands it (a stand-in for rule output)."""

    name = "fixed"
    rule = "fixed"

    def __init__(self, findings: list[list[tuple[str, str]]]) -> None:
        super().__init__()
        self.rounds = iter(findings)

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        return [
            self.finding(data, now_ms, subject=s, severity=sev, summary="", evidence={}, action="")
            for s, sev in next(self.rounds)
        ]


class _Broken(Detector):
    name = "broken"
    rule = "broken"

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        raise RuntimeError("bug")


class _BrokenSink(InMemorySink):
    def emit(self, finding: Finding) -> None:
        raise OSError("down")


def test_engine_appear_ongoing_clear_and_isolation() -> None:
    rounds = [[("broker:1", "warning"), ("broker:9", "info")], [("broker:1", "warning")], []]
    sink = InMemorySink()
    engine = Engine([_Broken(), _Fixed(rounds)], sinks=[_BrokenSink(), sink])
    data = Aggregates(cluster="c", window_s=10)
    summary, later = [], []
    for now in (1, 2, 3):
        ch = engine.evaluate(data, now)
        summary.append(
            (
                [f.subject for f in ch.appeared],
                [f.subject for f in ch.ongoing],
                [f.subject for f in ch.cleared],
            )
        )
        later.append([f.subject for f in engine.check_later])
    assert summary == [(["broker:1"], [], []), ([], ["broker:1"], []), ([], [], ["broker:1"])]
    assert [(f.subject, f.active, f.ts_ms) for f in sink.emitted] == [
        ("broker:1", True, 1),
        ("broker:1", True, 2),
        ("broker:1", False, 3),
    ]
    assert later == [["broker:9"], [], []]  # the info finding is deferred, not alerted
    assert dict(engine.errors) == {"detector:broken": 3, "sink:_BrokenSink": 3}


class _Scored(Detector):
    name = "scored"
    rule = "scored"
    gauges = (DetectorGauge("test_score", "a score", ("cluster", "subject")),)

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        return []

    def measure(self, data: Aggregates, now_ms: int) -> GaugeValues:
        return {"test_score": {(data.cluster, "a"): float(now_ms)}}


class _BrokenGauges(_Scored):
    name = "broken_gauges"
    gauges = (DetectorGauge("test_broken", "never set", ("cluster",)),)

    def measure(self, data: Aggregates, now_ms: int) -> GaugeValues:
        raise RuntimeError("bug")


def test_detector_gauges_reach_prometheus_and_a_failing_one_is_isolated() -> None:
    detectors = [_BrokenGauges(), _Scored()]
    engine = Engine(detectors)
    sink = PrometheusSink(gauges=[g for d in detectors for g in d.gauges])
    data = Aggregates(cluster="c", window_s=10)
    sink.observe(data, engine.measure(data, 7))
    get = sink.registry.get_sample_value
    assert get("test_score", {"cluster": "c", "subject": "a"}) == 7.0
    assert get("test_broken", {"cluster": "c"}) is None
    assert dict(engine.errors) == {"gauges:broken_gauges": 1}


@pytest.mark.parametrize(
    ("config", "severity", "rule", "action"),
    [
        (SeverityPolicyConfig(), "warning", "slow_broker", Action.NOTIFY),
        (SeverityPolicyConfig(), "info", "hot_keys", Action.CHECK_LATER),
        (SeverityPolicyConfig(by_rule={"hot_keys": Action.IGNORE}), "critical", "hot_keys", Action.IGNORE),
        (SeverityPolicyConfig(by_severity={"warning": Action.IGNORE}), "warning", "x", Action.IGNORE),
        # by_rule wins over by_severity; a severity not listed notifies
        (SeverityPolicyConfig(by_rule={"x": Action.NOTIFY}), "info", "x", Action.NOTIFY),
        (SeverityPolicyConfig(by_severity={}), "info", "x", Action.NOTIFY),
        # a rule name is matched literally, never as a glob
        (SeverityPolicyConfig(by_rule={"h*": Action.IGNORE}), "warning", "hot_keys", Action.NOTIFY),
        (SeverityPolicyConfig(by_rule={"h*": Action.IGNORE}), "warning", "h*", Action.IGNORE),
    ],
)
def test_policy(config, severity, rule, action) -> None:
    f = Finding(
        cluster="c",
        source="a",
        ts_ms=0,
        rule=rule,
        subject="s",
        severity=severity,
        summary="",
        evidence={},
        action="",
    )
    assert decide(f, config.as_policy(), can_remediate=False).action is action
