"""The findings pipeline: track → decide → act with in-memory notifiers and remediators (no
cluster; the run with the real remediator on a real cluster is
tests/remediation/test_pipeline_cluster.py)."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from alerts.hooks.findings import HookNotifier
from alerts.hooks.memory import MemoryNotifier
from findings.pipeline import (
    REMEDIATOR,
    REMEDIATOR_GROUP,
    Dispatcher,
    FindingPipeline,
    PipelineConfig,
    build_pipeline,
)
from findings.policy import Action, FindingPolicyConfig, PolicyRule
from linkwatch import plugins
from linkwatch.errors import ConfigError
from linkwatch.records import Finding
from tests.findings.kit import finding

ROOT = Path(__file__).resolve().parents[2]

DEFAULT = FindingPolicyConfig()


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Recorder:
    """An in-memory remediator (records what it was handed)."""

    def __init__(self, fail: bool = False) -> None:
        self.handled: list[Finding] = []
        self.fail = fail

    def handle(self, f: Finding) -> dict[str, Any]:
        self.handled.append(f)
        if self.fail:
            raise RuntimeError("plan exploded")
        return {"event": "dry_run", "key": f.dedup_key()}


def pipeline(remediator: Any = None, policy: FindingPolicyConfig = DEFAULT):
    clock = Clock()
    mem = HookNotifier(MemoryNotifier())
    return FindingPipeline(policy, Dispatcher([mem], remediator), clock=clock), mem.hook, clock


def test_check_later_reevaluated_after_its_delay() -> None:
    p, mem, clock = pipeline()
    p.handle(finding(rule="disk", subject="broker:1", severity="info"))
    assert not mem.events and p.tick() == []
    clock.t += 59
    assert p.tick() == [] and not mem.events
    clock.t += 2
    out = p.tick()
    assert [o["action"] for o in out] == ["notify"] and len(mem.events) == 1
    assert p.tick() == []  # once


def test_check_later_that_cleared_is_not_notified() -> None:
    p, mem, clock = pipeline()
    p.handle(finding(rule="disk", severity="info"))
    p.handle(finding(rule="disk", severity="info", active=False))
    clock.t += 120
    assert p.tick() == []
    assert list(mem.events) == []  # neither fired nor cleared: it never reached anyone
    assert p.counts["clear_not_sent"] == 1


def test_nothing_lost_while_paused() -> None:
    rem = Recorder()
    p, mem, _ = pipeline(rem)
    p.pause()
    p.handle(finding(subject="broker:1"))
    p.handle(finding(rule="x", subject="topic:a"))
    p.handle(finding(rule="y", subject="topic:b"))
    p.handle(finding(rule="y", subject="topic:b", active=False))
    assert not mem.events and not rem.handled
    out = p.resume()
    assert [(o["change"], o["action"]) for o in out] == [
        ("appeared", "remediate"),
        ("appeared", "notify"),
        ("appeared", "notify"),  # appeared and cleared during the pause: both told, in order
        ("cleared", "notify"),
    ]
    assert [f.subject for f in rem.handled] == ["broker:1", "topic:b"]  # the clearing too (restore hold)
    assert len(mem.events) == 4


def test_every_action_goes_to_the_notifiers() -> None:
    rem = Recorder()
    p, mem, _ = pipeline(rem)
    out = p.handle(finding())
    assert out is not None and out["remediation"]["event"] == "dry_run"
    (event,) = mem.events
    assert event.labels["linkwatch_action"] == "remediate" and "dry_run" in event.annotations["outcome"]


def test_ignore_sends_nothing() -> None:
    p, mem, _ = pipeline(policy=FindingPolicyConfig(rules=[PolicyRule(action=Action.IGNORE)]))
    assert p.handle(finding()) is None and not mem.events


# -- dispatcher --------------------------------------------------------------------------------


class Exploding:
    name = "exploding"

    def notify(self, f: Finding, outcome: dict[str, Any]) -> Any:
        raise OSError("webhook down")


class Refusing:
    name = "refusing"

    def notify(self, f: Finding, outcome: dict[str, Any]) -> str:
        return "failed"


def test_failing_plugins_counted_others_run() -> None:
    mem = HookNotifier(MemoryNotifier())
    rem = Recorder(fail=True)
    d = Dispatcher([Exploding(), Refusing(), mem], rem)
    p = FindingPipeline(DEFAULT, d, clock=Clock())
    out = p.handle(finding())
    assert out is not None and out["remediation"]["event"] == "failed"
    assert d.errors == {"notifier:exploding": 1, "notifier:refusing": 1, "remediator": 1}
    assert len(mem.hook.events) == 1
    p.handle(finding(subject="broker:3"))  # the pipeline goes on
    assert len(mem.hook.events) == 2 and d.errors["remediator"] == 2


class Refuser(Recorder):
    """An in-memory remediator whose guardrail refuses the first ``n`` times."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def handle(self, f: Finding) -> dict[str, Any]:
        self.handled.append(f)
        self.n -= 1
        return {"event": "refused" if self.n >= 0 else "dry_run", "reason": "circuit breaker"}


def test_repeats_are_not_sent_again() -> None:
    rem = Recorder()
    p, mem, _ = pipeline(rem)
    p.handle(finding())
    for ts in (2000, 3000, 4000):
        assert p.handle(finding(ts_ms=ts)) is None
    p.handle(finding(rule="x", subject="topic:a"))
    p.handle(finding(rule="x", subject="topic:a", ts_ms=2000))
    assert len(rem.handled) == 1 and len(mem.events) == 2
    assert p.counts["repeat_not_sent"] == 4 and p.counts["ongoing"] == 4
    p.handle(finding(active=False))
    p.handle(finding(ts_ms=9000))  # appears again: acted on and sent again
    assert len(rem.handled) == 3 and [e.status for e in mem.events][-2:] == ["resolved", "firing"]


def test_refused_remediation_is_retried_while_the_finding_repeats() -> None:
    rem = Refuser(2)
    p, mem, _ = pipeline(rem)
    p.handle(finding())
    p.handle(finding(ts_ms=2000))  # refused again: retried, same answer, not sent again
    p.handle(finding(ts_ms=3000))  # the guardrail lifted: dry_run, sent
    p.handle(finding(ts_ms=4000))  # done: neither retried nor sent
    assert len(rem.handled) == 3
    outcomes = [json.loads(e.annotations["outcome"])["remediation"]["event"] for e in mem.events]
    assert outcomes == ["refused", "dry_run"]


class Restorer(Recorder):
    """An in-memory remediator with periodic work: a restore due once, or a tick that raises."""

    def __init__(self, fail_tick: bool = False) -> None:
        super().__init__()
        self.due = [{"status": "done", "subject": "broker:2", "reason": "broker:2 healthy for 31 s"}]
        self.fail_tick = fail_tick

    def tick(self) -> list[dict[str, Any]]:
        if self.fail_tick:
            raise RuntimeError("admin client gone")
        out, self.due = self.due, []
        return out


def test_tick_runs_the_remediators_periodic_work_and_tells_the_notifiers() -> None:
    p, mem, _ = pipeline(Restorer())
    out = p.tick()
    assert [o["outcome"]["subject"] for o in out] == ["broker:2"]
    (event,) = mem.events
    assert (event.labels["alertname"], event.labels["broker"], event.status) == (
        "remediation",
        "2",
        "resolved",
    )
    assert "healthy for 31 s" in event.annotations["summary"]
    assert p.tick() == [] and len(mem.events) == 1  # told once
    paused, mem2, _ = pipeline(Restorer())
    paused.pause()
    assert paused.tick() == [] and not mem2.events  # paused: no action, not even a restore


def test_a_failing_periodic_tick_is_counted_and_findings_go_on() -> None:
    rem = Restorer(fail_tick=True)
    p, mem, _ = pipeline(rem)
    assert p.tick() == []
    assert p.errors["remediator"] == 1
    p.handle(finding())
    assert len(rem.handled) == 1 and len(mem.events) == 1


# -- the remediator, found by name ---------------------------------------------------------------


def test_every_declared_remediator_entry_point_loads() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        REMEDIATOR_GROUP
    ]
    assert REMEDIATOR in declared
    for name in declared:
        factory = plugins.load(REMEDIATOR_GROUP, name, "remediation.config")
        assert callable(factory)
    assert declared[REMEDIATOR] == "remediation.service:from_config_file"


def test_a_missing_remediator_stops_start_up_naming_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("findings.pipeline.REMEDIATOR", "nonesuch")
    with pytest.raises(ConfigError, match=r"no entry point 'nonesuch' in group linkwatch\.remediators"):
        build_pipeline(PipelineConfig(config=tmp_path / "remediation.yaml"), [])


def test_without_a_remediator_config_nothing_is_built_and_nothing_can_act() -> None:
    p = build_pipeline(PipelineConfig(), [HookNotifier(MemoryNotifier())])
    assert p.dispatcher.remediator is None
    out = p.handle(finding())
    assert out is not None and (out["action"], out["reason"]) == (
        "notify",
        "no remediation configured: notify only",
    )
