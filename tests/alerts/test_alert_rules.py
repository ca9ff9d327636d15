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
    """The harness itself: a wrong expected stage must make promtool fail. A small file (about
    1.5 s) whose expected stages are both a label (LinkwatchDegradedBroker) and an annotation
    computed from the recording rules (LinkwatchSlowBroker's)."""
    src = ROOT / "alerts" / "tests" / "queue_behind_disk_test.yml"
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


def test_slow_node_alerts_fire_within_30s_on_the_shipped_configs() -> None:
    """The budget of docs/alerts.md "How fast", from the shipped files: a fault's first window
    closes (10 s windows: 5 s after the onset on average), the agent publishes it (grace, poll),
    Prometheus scrapes it and evaluates the recording rules and then the alerts, `for:` holds,
    Alertmanager's group_wait. Also what the ranges must hold: every 15 s range at least one
    window's step (its samples span >= 12 s) and one window never held for `for:`."""
    from agent.config import AgentConfig, RequestLogConfig

    window_s = RequestLogConfig().window_s
    grace_s = RequestLogConfig().grace_s
    poll_s = AgentConfig.model_fields["poll_interval_s"].default
    prom = yaml.safe_load((ROOT / "config" / "prometheus.example.yml").read_text())
    scrape_s = _seconds(
        next(j for j in prom["scrape_configs"] if j["job_name"] == "linkwatch-agent")["scrape_interval"]
    )
    groups = {g["name"]: g for f in RULES for g in yaml.safe_load(f.read_text())["groups"]}
    rec, alerts = groups["linkwatch-recording-slow-nodes"], groups["linkwatch-slow-nodes"]
    eval_s = max(_seconds(rec["interval"]), _seconds(alerts["interval"]))
    # the counters' rates (Rule 12's baseline reads minutes of a recorded rate: not a window's range)
    ranges = {
        _seconds(r)
        for rule in rec["rules"]
        for r in re.findall(r"\brate\([^\[\]]*\[(\d+[smh])\]", rule["expr"])
    }
    assert len(ranges) == 1
    range_s = ranges.pop()
    latency = {
        "LinkwatchSlowBroker",
        "LinkwatchSlowClient",
        "LinkwatchDegradedBroker",
        "LinkwatchClusterSlowdown",
    }
    # the agent-side ones (the analyzer's findings have scored the windows: `for: 0s` below)
    fors = {
        _seconds(r["for"])
        for r in alerts["rules"]
        if r.get("alert") in latency and r["labels"].get("source") != "analyzer"
    }
    assert len(fors) == 1
    for_s = fors.pop()
    found = groups["linkwatch-findings"]
    assert {r["labels"].get("source") for r in found["rules"]} == {"analyzer"}
    findings = {_seconds(r["for"]) for r in found["rules"]}
    assert findings == {0.0}, findings
    # the analyzer's findings, scraped and evaluated every second
    analyzer_scrape_s = _seconds(
        next(j for j in prom["scrape_configs"] if j["job_name"] == "linkwatch-analyzer")["scrape_interval"]
    )
    assert analyzer_scrape_s / 2 + _seconds(found["interval"]) / 2 <= 1.0
    am = yaml.safe_load((ROOT / "alerts" / "alertmanager.example.yml").read_text())
    route = next(r for r in am["route"]["routes"] if "LinkwatchSlowBroker" in r["matchers"][0])
    # every slow-node alert (the analyzer's findings too) takes this route's short waits
    routed = re.fullmatch(r'alertname=~"(.*)"', route["matchers"][0])
    assert routed
    slow_nodes = {r["alert"] for g in (alerts, found) for r in g["rules"] if "alert" in r}
    assert {n for n in slow_nodes if not re.fullmatch(routed[1], n)} == set()
    assert latency < slow_nodes
    group_wait_s = _seconds(route["group_wait"])

    # a 15 s range always holds the newest window's step: its samples span >= window + a scrape
    span_s = (range_s // scrape_s) * scrape_s - scrape_s
    assert span_s >= window_s + scrape_s
    # one window's step is in the range for range - scrape (closed range: + one evaluation at most)
    assert for_s > range_s - scrape_s
    average = (
        window_s / 2 + grace_s + poll_s / 2 + scrape_s / 2 + eval_s / 2 + eval_s / 2 + for_s + group_wait_s
    )
    assert average <= 30, average
    # clearing: the last slow window leaves the range, the alert resolves, the next group flush
    clear = (
        window_s / 2
        + grace_s
        + poll_s / 2
        + scrape_s / 2
        + range_s
        + eval_s
        + _seconds(route["group_interval"])
    )
    assert clear <= 60, clear
