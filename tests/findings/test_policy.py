"""The one findings policy: the pipeline's rows and their safety rules, the analyzer's short
form, and bad configs naming their key."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from findings.pipeline import PipelineConfig
from findings.policy import Action, FindingPolicyConfig, PolicyRule, SeverityPolicyConfig, decide
from linkwatch.records import Finding
from tests.findings.kit import finding

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
    # Unseen: only the probe sees it (a stall before its timers start, or its network path).
    (
        "unseen, the probe and its own replication wait agree",
        finding(stage="unseen", families=["probe", "waits on an unknown follower"]),
        True,
        (),
        DEFAULT,
        Action.REMEDIATE,
        "row 0",
    ),
    (
        "unseen, the probe and its peers waiting on it agree",
        finding(stage="unseen", families=["peers wait on it", "probe"]),
        True,
        (),
        DEFAULT,
        Action.REMEDIATE,
        "row 0",
    ),
    (
        "unseen, the probe alone",
        finding(stage="unseen", families=["probe"]),
        True,
        (),
        DEFAULT,
        Action.NOTIFY,
        "'unseen'",
    ),
    ("unseen, no families", finding(stage="unseen"), True, (), DEFAULT, Action.NOTIFY, "'unseen'"),
    (
        "unseen, families not a list of words",
        finding(stage="unseen", families=["probe", 3]),
        True,
        (),
        DEFAULT,
        Action.NOTIFY,
        "'unseen'",
    ),
    (
        "unseen without the probe",
        finding(stage="unseen", families=["serves few", "own work"]),
        True,
        (),
        DEFAULT,
        Action.NOTIFY,
        "'unseen'",
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


# -- the analyzer's short form ----------------------------------------------------------------


def test_the_analyzers_alert_is_notify_and_its_configs_still_load() -> None:
    cfg = SeverityPolicyConfig.model_validate(
        {"by_severity": {"info": "check_later", "warning": "alert"}, "by_rule": {"hot_keys": "ignore"}}
    )
    assert cfg.by_severity == {"info": Action.CHECK_LATER, "warning": Action.NOTIFY}
    policy = cfg.as_policy()
    assert decide(finding(severity="warning"), policy, can_remediate=False).action is Action.NOTIFY
    assert decide(finding(rule="hot_keys"), policy, can_remediate=False).action is Action.IGNORE
    later = decide(finding(severity="info"), policy, can_remediate=False)
    assert (later.action, later.delay_s) == (Action.CHECK_LATER, 60.0)


BAD_SEVERITY_CONFIGS = [
    (
        {"by_rule": {"slow_broker": "remediate"}},
        "by_rule.slow_broker: remediate is not an analyzer policy action",
    ),
    ({"by_severity": {"warning": "page"}}, "by_severity.warning"),
    ({"recheck_after_s": 0}, "recheck_after_s"),
]


@pytest.mark.parametrize("raw,names", BAD_SEVERITY_CONFIGS, ids=[b[1] for b in BAD_SEVERITY_CONFIGS])
def test_bad_analyzer_policy_names_the_key(raw: dict[str, Any], names: str) -> None:
    with pytest.raises(ValidationError) as e:
        SeverityPolicyConfig.model_validate(raw)
    assert names in str(e.value)
