"""The alert and recording rules, checked and unit-tested by the real ``promtool``.

Each file in ``alerts/tests/`` holds, per alert, series that must fire it and series that must
not (low traffic, one spike, recovery). Also checked: every alert has a test, and every metric
the rules read is in the metric contract ``docs/metrics.md``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = sorted((ROOT / "alerts" / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "alerts" / "tests").glob("*_test.yml"))

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian prometheus) missing"
)


def _promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *map(str, args)], capture_output=True, text=True, timeout=120)


def _rules() -> list[dict]:
    return [r for f in RULES for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]]


def test_rule_files_pass_promtool_check() -> None:
    result = _promtool("check", "rules", *RULES)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("test_file", RULE_TESTS, ids=lambda p: p.name)
def test_promtool_unit_tests(test_file: Path) -> None:
    result = _promtool("test", "rules", test_file)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_unit_test() -> None:
    tested = {
        t["alertname"]
        for f in RULE_TESTS
        for case in yaml.safe_load(f.read_text())["tests"]
        for t in case.get("alert_rule_test", [])
    }
    alerts = {r["alert"] for r in _rules() if "alert" in r}
    assert alerts - tested == set()


def test_rules_read_only_contract_metrics() -> None:
    contract = set(re.findall(r"`(linkwatch_[a-z_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    used = {m for r in _rules() for m in re.findall(r"\blinkwatch_[a-z_]+", r["expr"])}
    unknown = {
        m for m in used if m not in contract and re.sub(r"_(bucket|count|sum)$", "", m) not in contract
    }
    assert unknown == set()


def test_a_broken_expectation_fails(tmp_path: Path) -> None:
    """The harness itself: a wrong expected stage must make promtool fail."""
    src = ROOT / "alerts" / "tests" / "slow_broker_test.yml"
    text = src.read_text().replace("stage: local", "stage: send")
    text = text.replace("../rules/", f"{ROOT / 'alerts' / 'rules'}/")
    bad = tmp_path / "bad_test.yml"
    bad.write_text(text)
    result = _promtool("test", "rules", bad)
    assert result.returncode == 1
    assert "stage=" in result.stdout + result.stderr
