"""``linkwatch analyze`` with and without a ``remediation:`` section (no Spark: the service is
built, not started, and findings enter where the engine acts on them)."""

from __future__ import annotations

from pathlib import Path

from analyzer.service import AnalysisService, AnalyzerConfig, PipelineSink
from findings.policy import Action, decide
from linkwatch.records import Finding


def finding(severity: str = "info", active: bool = True) -> Finding:
    return Finding(
        cluster="c",
        source="test",
        ts_ms=1,
        rule="disk_imbalance",
        subject="broker:1",
        severity=severity,
        summary="s",
        evidence={},
        action="a",
        active=active,
    )


def test_without_section_behaviour_unchanged(tmp_path: Path) -> None:
    cfg = AnalyzerConfig(state_dir=tmp_path, prometheus={"enabled": False})
    service = AnalysisService(cfg, sinks=[])
    assert service.pipeline is None
    assert not any(isinstance(s, PipelineSink) for s in service.engine.sinks)
    assert decide(finding("info"), service.engine.policy, can_remediate=False).action is Action.CHECK_LATER


def test_with_section_every_finding_reaches_the_pipeline(tmp_path: Path) -> None:
    cfg = AnalyzerConfig.model_validate(
        {
            "state_dir": str(tmp_path),
            "prometheus": {"enabled": False},
            "remediation": {"notifiers": [{"type": "memory"}], "policy": {"rules": []}},
        }
    )
    service = AnalysisService(cfg, sinks=[])
    assert service.pipeline is not None
    # The engine passes everything on (info included); the pipeline's policy decides.
    assert decide(finding("info"), service.engine.policy, can_remediate=False).action is Action.NOTIFY
    service.engine.act(finding("warning"))
    service.engine.act(finding("warning", active=False))
    mem = service.pipeline.dispatcher.notifiers[0].hook
    assert [(e.status, e.labels["linkwatch_action"]) for e in mem.events] == [
        ("firing", "notify"),
        ("resolved", "notify"),
    ]
