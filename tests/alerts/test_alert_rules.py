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
    src = ROOT / "alerts" / "tests" / "findings_partitions_test.yml"
    text = src.read_text().replace("stage: local", "stage: send")
    text = text.replace("../rules/", f"{ROOT / 'alerts' / 'rules'}/")
    bad = tmp_path / "bad_test.yml"
    bad.write_text(text)
    result = _promtool("test", "rules", bad)
    assert result.returncode == 1
    assert "stage=" in result.stdout + result.stderr


def _seconds(d: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", d)
    assert m, d
    return float(m[1]) * units[m[2]]


def _groups() -> dict[str, dict]:
    return {g["name"]: g for f in RULES for g in yaml.safe_load(f.read_text())["groups"]}


def test_slow_node_alerts_are_the_analyzers_findings_as_fast_as_it_raises_them() -> None:
    """One implementation: every slow-node alert with a subject and a stage reads the analyzer's
    findings (linkwatch_finding_active), `for: 0s`, and takes Alertmanager's short route; what
    else reads request latency is an absolute safety net (no peers, no stage, never a blame)."""
    groups = _groups()
    found = groups["linkwatch-findings"]
    assert {r["labels"].get("source") for r in found["rules"]} == {"analyzer"}
    assert all("linkwatch_finding_active" in r["expr"] for r in found["rules"])
    assert {_seconds(r["for"]) for r in found["rules"]} == {0.0}
    nets = groups["linkwatch-safety-nets"]["rules"]
    assert {r["labels"]["source"] for r in nets} == {"safety-net"}
    assert all("stage" not in r.get("annotations", {}) for r in nets)
    am = yaml.safe_load((ROOT / "alerts" / "alertmanager.example.yml").read_text())
    route = next(r for r in am["route"]["routes"] if "LinkwatchSlowBrokerFinding" in r["matchers"][0])
    routed = re.fullmatch(r'alertname=~"(.*)"', route["matchers"][0])
    assert routed and {r["alert"] for r in found["rules"]} <= set(routed[1].split("|"))
    # No group_wait: a finding is decided when it arrives (docs/alerts.md, "How fast").
    assert _seconds(route["group_wait"]) == 0 and _seconds(route["group_interval"]) <= 5
    # Scraped and evaluated every second: the finding reaches Alertmanager ~1 s after it is raised.
    prom = yaml.safe_load((ROOT / "config" / "prometheus.example.yml").read_text())
    scrape = next(j for j in prom["scrape_configs"] if j["job_name"] == "linkwatch-analyzer")
    assert _seconds(scrape["scrape_interval"]) / 2 + _seconds(found["interval"]) / 2 <= 1.0


def test_safety_nets_share_the_analyzers_line() -> None:
    """The safety nets' 0.3 s is the analyzer's default p99_threshold_ms (edit both together)."""
    from analyzer.slow_broker import SlowBrokerConfig

    line_s = SlowBrokerConfig().p99_threshold_ms / 1000
    for rule in _groups()["linkwatch-safety-nets"]["rules"]:
        assert re.findall(r"\) > (\d+(?:\.\d+)?)\n", rule["expr"]) == [str(line_s)], rule["alert"]


ALERT_OF_RULE = {
    "slow_broker": "LinkwatchSlowBrokerFinding",
    "degraded_broker": "LinkwatchDegradedBrokerFinding",
    "slow_client": "LinkwatchSlowClientFinding",
    "cluster_slow": "LinkwatchClusterSlowdown",
}


def test_the_rule_table_says_the_same_on_both_paths(tmp_path: Path) -> None:
    """Every row of the slow-broker rule table through both paths: the analyzer's findings, and
    the same findings exported by its Prometheus sink, scraped by promtool's rule test and
    alerted on by the shipped rules. Any disagreement in subject or stage fails: the alert's
    labels are checked against the finding's subject and stage, not against the sink's code."""
    from prometheus_client import CollectorRegistry

    from analyzer.sinks import PrometheusSink
    from analyzer.slow_broker import SlowBrokerDetector
    from tests.analyzer.test_slow_broker import CASES, now_after, scenario

    tests = []
    for name, windows, brokers, special, _expected in CASES:
        findings = [
            f
            for f in SlowBrokerDetector().detect(scenario(windows, brokers, special), now_after(windows))
            if not f.evidence.get("provisional")
        ]
        registry = CollectorRegistry()
        sink = PrometheusSink(registry)
        for f in findings:
            sink.emit(f)
        series = [
            {"series": _series(s.name, s.labels), "values": "1x5"}
            for metric in registry.collect()
            for s in metric.samples
            if s.name == "linkwatch_finding_active" and s.value == 1
        ]
        expected = []
        for f in findings:
            kind, _, ident = f.subject.partition(":")
            labels = {"cluster": "c1", "source": "analyzer", "alertname": ALERT_OF_RULE[f.rule]}
            if f.rule == "cluster_slow":
                labels |= {"severity": "critical"}
            elif f.rule == "slow_broker":
                labels |= {"severity": "warning", "broker": ident, "stage": f.evidence["stage"]}
                follower = f.evidence.get("slow_follower")
                labels["follower"] = "" if follower is None else str(follower)
            else:
                broker = ident if kind == "broker" else str(f.evidence["broker"])
                labels |= {"rule": f.rule, "subject": f.subject, "severity": f.severity, "broker": broker}
                labels["stage"] = f.evidence["stage"]
            labels |= {"alertstate": "firing"}
            expected.append({"labels": _series("ALERTS", {k: v for k, v in labels.items() if v}), "value": 1})
        slow_nodes = "|".join(ALERT_OF_RULE.values())
        tests.append(
            {
                "name": name,
                "interval": "1s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": f'ALERTS{{alertname=~"{slow_nodes}"}}',
                        "eval_time": "2s",
                        "exp_samples": expected,
                    }
                ],
            }
        )
    rule_file = ROOT / "alerts" / "rules" / "brokers.yml"
    spec = {"rule_files": [str(rule_file)], "evaluation_interval": "1s", "tests": tests}
    path = tmp_path / "both_paths_test.yml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _promtool("test", "rules", path)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert len(tests) == len(CASES) and sum(1 for t in tests if t["promql_expr_test"][0]["exp_samples"]) >= 50


def _series(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"
