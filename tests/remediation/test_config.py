"""Bad config stops start-up with a message naming the key; every declared remediation loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from linkwatch.errors import ConfigError
from remediation.base import Remediation
from remediation.config import load_remediation_config
from remediation.registry import available, load_class


def test_every_declared_entry_point_loads() -> None:
    names = set(available())
    assert {"noop", "demote_leadership", "rebalance_disks", "cancel_long_tail", "throttle"} <= names
    for name in names:
        cls = load_class(name)
        assert issubclass(cls, Remediation)
        assert name == cls.NAME


def test_defaults_are_dry_run_with_caps(tmp_path: Path) -> None:
    cfg = load_remediation_config(None)
    assert cfg.execute is False
    assert cfg.caps.any()
    assert cfg.remediations == {"noop": None} or "noop" in cfg.remediations


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("remediations: {no_such: {}}\nrules: {}", "unknown remediation 'no_such'"),
        ("remediations: {no_such: {}}\nrules: {}", "linkwatch.remediations"),
        (
            "execute: true\nbootstrap_servers: x:1\nremediations: {noop: {}}\nrules: {}\n"
            "caps: {max_concurrent_actions: null, max_demoted_brokers: null, max_demoted_share: null}",
            "execute: true needs at least one cap",
        ),
        (
            "remediations: {rebalance_disks: {window: -1}}\nrules: {}",
            "remediations.rebalance_disks: window=-1",
        ),
        (
            "remediations: {rebalance_disks: {high_ratio: 0.5, target_ratio: 0.9}}\nrules: {}",
            "target_ratio=0.9",
        ),
        ("cooldown_s: -5", "cooldown_s=-5"),
        ("caps: {max_demoted_share: 1.5}", "caps.max_demoted_share=1.5"),
        ("rules: {slow_broker: demote_leadership}\nremediations: {noop: null}", "rules name remediations"),
        ("execute: true\nremediations: {noop: null}\nrules: {}", "bootstrap_servers is required"),
        ("on_restart: maybe", "on_restart='maybe'"),
        ("bogus_key: 1", "bogus_key: unknown key"),
        ("circuit_breaker: {max_bad_brokers: -1}", "circuit_breaker.max_bad_brokers=-1"),
    ],
)
def test_bad_config(tmp_path: Path, yaml_text: str, expected: str) -> None:
    path = tmp_path / "remediation.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_remediation_config(path)
    assert expected in str(err.value)
    assert str(path) in str(err.value)


def test_sample_config_loads() -> None:
    sample = Path(__file__).parents[2] / "config" / "remediation.sample.yaml"
    cfg = load_remediation_config(sample)
    assert cfg.execute is False
    assert set(cfg.rules.values()) <= set(cfg.remediations)


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        ("execute: 'true'", "execute='true'"),
        ("execute: 1", "execute=1"),
        ("caps: {max_concurrent_actions: '1'}", "caps.max_concurrent_actions='1'"),
        ("caps: {max_demoted_brokers: true}", "caps.max_demoted_brokers=True"),
        ("caps: {max_demoted_share: '0.34'}", "caps.max_demoted_share='0.34'"),
        ("circuit_breaker: {max_bad_share: 'half'}", "circuit_breaker.max_bad_share='half'"),
        ("cooldown_s: '600'", "cooldown_s='600'"),
        ("lease: {enabled: 'yes'}", "lease.enabled='yes'"),
        ("failures: {max_failures: 0}", "failures.max_failures=0"),
        ("impact: {settle_s: '60'}", "impact.settle_s='60'"),
        ("intake: {max_age_s: -1}", "intake.max_age_s=-1"),
    ],
)
def test_safety_switches_take_only_real_booleans_and_numbers(
    tmp_path: Path, yaml_text: str, expected: str
) -> None:
    path = tmp_path / "remediation.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError) as err:
        load_remediation_config(path)
    assert expected in str(err.value)


def test_numbers_written_as_numbers_are_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "remediation.yaml"
    path.write_text("caps: {max_demoted_share: 1}\ncooldown_s: 5\nexecute: false\n")
    cfg = load_remediation_config(path)
    assert cfg.caps.max_demoted_share == 1.0 and cfg.cooldown_s == 5.0
    monkeypatch.setenv("LINKWATCH_REMEDIATION_EXECUTE", "true")  # the environment: a YAML scalar
    monkeypatch.setenv("LINKWATCH_REMEDIATION_BOOTSTRAP_SERVERS", "x:1")
    assert load_remediation_config(path).execute is True
