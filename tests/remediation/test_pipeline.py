"""The findings pipeline: policy table, tracker, dispatcher (no cluster: pure parts and
in-memory notifiers/remediators; the real-cluster run is in test_pipeline_cluster.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from alerts.hooks.base import AlertEvent
from alerts.hooks.findings import HookNotifier, event_from_finding, finding_from_alert
from alerts.hooks.memory import MemoryNotifier
from linkwatch.records import Finding
from remediation.pipeline import Dispatcher, FindingPipeline, PipelineConfig, Tracker
from remediation.policy import Action, FindingPolicyConfig, PolicyRule, decide


def finding(
    rule: str = "slow_broker",
    subject: str = "broker:2",
    severity: str = "warning",
    stage: str | None = "local",
    active: bool = True,
    ts_ms: int = 1000,
    follower: int | None = None,
) -> Finding:
    return Finding(
        cluster="c",
        source="test",
        ts_ms=ts_ms,
        rule=rule,
        subject=subject,
        severity=severity,
        summary=f"{rule} {subject}",
        evidence={"stage": stage} | ({"slow_follower": follower} if follower is not None else {}),
        action="look",
        active=active,
    )


DEFAULT = FindingPolicyConfig()

# (name, finding, can_remediate, active_rules, config, expected action, reason contains)
POLICY_ROWS = [
    (
        "own stage, remediation configured",
        finding(),
        True,
        {"slow_broker"},
        DEFAULT,
        Action.REMEDIATE,
        "row 0",
    ),
    ("own stage requestQueue", finding(stage="requestQueue"), True, (), DEFAULT, Action.REMEDIATE, "row 0"),
    ("no remediation section", finding(), False, (), DEFAULT, Action.NOTIFY, "no remediation"),
    ("slow client (send)", finding(stage="send"), True, (), DEFAULT, Action.NOTIFY, "stage 'send'"),
    (
        "slow client (throttle)",
        finding(stage="throttle"),
        True,
        (),
        DEFAULT,
        Action.NOTIFY,
        "not the broker's own",
    ),
    ("follower's fault (remote)", finding(stage="remote"), True, (), DEFAULT, Action.NOTIFY, "'remote'"),
    (
        "leader waiting on another follower (remote)",
        finding(stage="remote", follower=3),
        True,
        (),
        DEFAULT,
        Action.NOTIFY,
        "'remote'",
    ),
    (
        "the stalled follower itself (remote, slow_follower = subject)",
        finding(stage="remote", follower=2),
        True,
        (),
        DEFAULT,
        Action.REMEDIATE,
        "row 0",
    ),
    ("degraded: info severity", finding(severity="info"), True, (), DEFAULT, Action.NOTIFY, "below"),
    (
        "cluster-wide slowdown",
        finding(),
        True,
        {"cluster_slow", "slow_broker"},
        DEFAULT,
        Action.NOTIFY,
        "cluster-wide",
    ),
    ("unknown rule", finding(rule="mystery", subject="x:1"), True, (), DEFAULT, Action.NOTIFY, "default"),
    (
        "unknown rule, info",
        finding(rule="mystery", severity="info"),
        True,
        (),
        DEFAULT,
        Action.CHECK_LATER,
        "row 1",
    ),
    (
        "configured: allow during cluster slow",
        finding(),
        True,
        {"cluster_slow"},
        FindingPolicyConfig(
            rules=[PolicyRule(rule="slow_broker", action=Action.REMEDIATE, allow_during_cluster_slow=True)]
        ),
        Action.REMEDIATE,
        "row 0",
    ),
    (
        "configured: slow client may remediate",
        finding(stage="send"),
        True,
        (),
        FindingPolicyConfig(
            rules=[PolicyRule(rule="slow_broker", action=Action.REMEDIATE, allow_foreign_stage=True)]
        ),
        Action.REMEDIATE,
        "row 0",
    ),
    (
        "configured: ignore a subject",
        finding(subject="broker:7"),
        True,
        (),
        FindingPolicyConfig(rules=[PolicyRule(subject="broker:7", action=Action.IGNORE)]),
        Action.IGNORE,
        "row 0",
    ),
    (
        "configured: critical only",
        finding(severity="warning"),
        True,
        (),
        FindingPolicyConfig(remediate_min_severity="critical"),
        Action.NOTIFY,
        "below remediate_min_severity critical",
    ),
]


@pytest.mark.parametrize(
    "f,can,active,cfg,expected,why", [r[1:] for r in POLICY_ROWS], ids=[r[0] for r in POLICY_ROWS]
)
def test_policy_table(f, can, active, cfg, expected, why) -> None:
    v = decide(f, cfg, can_remediate=can, active_rules=active)
    assert v.action is expected
    assert why in v.reason


def test_check_later_delay_from_row_or_default() -> None:
    cfg = FindingPolicyConfig(
        rules=[PolicyRule(rule="a", action=Action.CHECK_LATER, delay_s=5)], recheck_after_s=9
    )
    assert decide(finding(rule="a"), cfg, can_remediate=True).delay_s == 5
    cfg2 = FindingPolicyConfig(rules=[PolicyRule(rule="a", action=Action.CHECK_LATER)], recheck_after_s=9)
    assert decide(finding(rule="a"), cfg2, can_remediate=True).delay_s == 9


BAD_CONFIGS = [
    ({"rules": [{"rule": "x", "action": "fix"}]}, "rules.0.action"),
    ({"rules": [{"rule": "x", "action": "notify", "delay_s": 5}]}, "delay_s is only for action check_later"),
    ({"rules": [{"rule": "x", "action": "check_later", "delay_s": -1}]}, "rules.0.delay_s"),
    ({"default": "check_later"}, "default: check_later"),
    ({"remediate_min_severity": "huge"}, "remediate_min_severity"),
    ({"rules": [{"rule": "x", "action": "notify", "colour": "red"}]}, "rules.0.colour"),
]


@pytest.mark.parametrize("raw,names", BAD_CONFIGS, ids=[b[1] for b in BAD_CONFIGS])
def test_bad_policy_config_names_the_key(raw: dict[str, Any], names: str) -> None:
    with pytest.raises(ValidationError) as e:
        PipelineConfig.model_validate({"policy": raw})
    assert names in str(e.value)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    rule=st.sampled_from(["slow_broker", "cluster_slow", "x", "lag_stalled"]),
    severity=st.sampled_from(["info", "warning", "critical", "odd"]),
    stage=st.sampled_from([None, "local", "send", "remote", "throttle", "requestQueue"]),
    can=st.booleans(),
    slow=st.booleans(),
)
def test_safe_defaults_never_remediate_the_excluded(rule, severity, stage, can, slow) -> None:
    """With the default policy, REMEDIATE only for a remediable own-stage slow broker of at least
    warning severity and no cluster-wide slowdown."""
    f = finding(rule=rule, severity=severity, stage=stage)
    v = decide(f, DEFAULT, can_remediate=can, active_rules={"cluster_slow"} if slow else ())
    allowed = (
        can
        and not slow
        and rule == "slow_broker"
        and severity in ("warning", "critical")
        and stage in ("local", "requestQueue", "responseQueue")
    )
    assert (v.action is Action.REMEDIATE) == allowed


# -- tracker ---------------------------------------------------------------------------------


def test_tracker_appeared_ongoing_cleared() -> None:
    t = Tracker()
    assert t.observe(finding()).value == "appeared"
    assert t.observe(finding(ts_ms=2000)).value == "ongoing"
    assert t.observe(finding(active=False)).value == "cleared"
    assert t.observe(finding(active=False)) is None  # a clearing of nothing active
    assert t.observe(finding()).value == "appeared"


def test_tracker_bound_drops_and_counts() -> None:
    t = Tracker(max_tracked=2)
    for i in range(3):
        t.observe(finding(subject=f"broker:{i}"))
    assert t.dropped == 1 and len(t.active) == 2


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


# -- alerts <-> findings ---------------------------------------------------------------------------


def alert(labels: dict[str, str], status: str = "firing") -> AlertEvent:
    return AlertEvent(
        status=status,
        labels={"alertname": "LinkwatchSlowBroker", **labels},
        annotations={"summary": "slow"},
        starts_at="",
        ends_at="",
        fingerprint="fp1",
        received_at=5.0,
    )


ALERT_ROWS = [
    ({"broker": "2", "stage": "local", "severity": "critical"}, "broker:2", "critical", "local", True),
    ({"broker": "1"}, "broker:1", "warning", None, True),
    ({"stage": "send", "severity": "bogus"}, "alert:fp1", "warning", "send", True),
    # LinkwatchSlowClientFinding: the client is the subject, not the broker it was slow on
    ({"broker": "1", "subject": "client:etl-7", "stage": "send"}, "client:etl-7", "warning", "send", True),
    ({"broker": "2", "subject": "topic:orders"}, "broker:2", "warning", None, True),
]


@pytest.mark.parametrize("labels,subject,severity,stage,active", ALERT_ROWS)
def test_alert_with_broker_or_stage_is_a_finding(labels, subject, severity, stage, active) -> None:
    f = finding_from_alert(alert(labels))
    assert f is not None
    assert (f.subject, f.severity, f.evidence["stage"], f.active) == (subject, severity, stage, active)
    assert f.rule == "LinkwatchSlowBroker" and f.ts_ms == 5000


def test_alert_without_broker_or_stage_is_not_a_finding() -> None:
    assert finding_from_alert(alert({"topic": "a"})) is None


def test_resolved_alert_clears() -> None:
    f = finding_from_alert(alert({"broker": "2"}, status="resolved"))
    assert f is not None and not f.active


def test_event_from_finding_labels() -> None:
    e = event_from_finding(finding(), {"action": "notify"})
    assert dict(e.labels) == {
        "alertname": "slow_broker",
        "cluster": "c",
        "subject": "broker:2",
        "severity": "warning",
        "linkwatch_action": "notify",
        "broker": "2",
        "stage": "local",
    }
    assert e.status == "firing" and e.fingerprint == "slow_broker/broker:2"


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


# The analyzer's early warning (degraded_broker, info) and a slow client (slow_client: the
# client's fault, not the broker's) are never remediated by the default policy; a degraded
# broker not even by a row asking to remediate everything (its severity is below warning).
NEVER_REMEDIATED = [
    finding(rule="degraded_broker", severity="info", stage="requestQueue"),
    finding(rule="degraded_broker", severity="info", stage="local"),
    finding(rule="slow_client", subject="client:slow-reader", stage="send"),
    finding(rule="slow_client", subject="client:unknown@broker:1", stage="throttle"),
]
EVERYTHING = FindingPolicyConfig(rules=[PolicyRule(action=Action.REMEDIATE)])


@pytest.mark.parametrize("f", NEVER_REMEDIATED, ids=lambda f: f"{f.rule}-{f.evidence['stage']}")
def test_degraded_and_slow_client_findings_are_never_remediated(f: Finding) -> None:
    assert decide(f, DEFAULT, can_remediate=True).action in (Action.NOTIFY, Action.CHECK_LATER)
    if f.rule == "degraded_broker":  # below remediate_min_severity whatever the row says
        assert decide(f, EVERYTHING, can_remediate=True).action is Action.NOTIFY
