"""Config rendering of the local alert stack: fast rules, scrape targets, Alertmanager config."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from linkwatch.errors import ConfigError
from testbed.alert_stack import (
    SHIPPED_JOB_SCRAPE_S,
    SHIPPED_SCRAPE_S,
    ScrapeTarget,
    alertmanager_config,
    fast_rules,
    parse_scrape_target,
    prometheus_config,
)


def test_fast_rules_shorten_for_and_windows_only(tmp_path: Path) -> None:
    paths = fast_rules(tmp_path, for_s=7)
    rules = [r for p in paths for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"]]
    assert {r["for"] for r in rules if "for" in r} == {"7s"}
    exprs = "\n".join(r["expr"] for r in rules)
    assert "[5m]" not in exprs and "[10m]" not in exprs
    assert "[30s]" in exprs and "[40s]" in exprs
    assert "[20s]" in exprs and "[2m]" not in exprs  # the safety nets' 2 minutes shrink too
    assert "linkwatch:broker_request_p99_seconds:5m" in exprs  # names untouched
    if shutil.which("promtool"):
        done = subprocess.run(
            ["promtool", "check", "rules", *map(str, paths)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            "linkwatch-agent=127.0.0.1:9308,cluster=c1,broker=2",
            ScrapeTarget("linkwatch-agent", "127.0.0.1:9308", {"cluster": "c1", "broker": "2"}),
        ),
        ("linkwatch-lag=127.0.0.1:9309", ScrapeTarget("linkwatch-lag", "127.0.0.1:9309", {})),
    ],
)
def test_parse_scrape_target(spec: str, expected: ScrapeTarget) -> None:
    assert parse_scrape_target(spec) == expected


@pytest.mark.parametrize("spec", ["127.0.0.1:9308", "job=nohostport", "job=127.0.0.1:1,cluster", ""])
def test_parse_scrape_target_rejects(spec: str) -> None:
    with pytest.raises(ConfigError, match="--scrape"):
        parse_scrape_target(spec)


def test_prometheus_config_keeps_target_labels_and_is_valid(tmp_path: Path) -> None:
    targets = [
        ScrapeTarget("linkwatch-agent", f"127.0.0.1:{9300 + b}", {"cluster": "c1", "broker": str(b)})
        for b in (1, 2)
    ]
    cfg = prometheus_config(targets, [], "127.0.0.1:9093", scrape_s=2, eval_s=2.5)
    assert cfg["global"]["evaluation_interval"] == "2500ms"
    (job,) = cfg["scrape_configs"]
    assert job["job_name"] == "linkwatch-agent" and job["honor_labels"] is True
    assert [sc["labels"]["broker"] for sc in job["static_configs"]] == ["1", "2"]
    if shutil.which("promtool"):
        path = tmp_path / "prometheus.yml"
        path.write_text(yaml.safe_dump(cfg))
        done = subprocess.run(["promtool", "check", "config", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_alertmanager_config_points_at_the_receiver_and_keeps_inhibitions(tmp_path: Path) -> None:
    cfg = alertmanager_config("http://127.0.0.1:1234/alerts", tmp_path / "token", fast=True)
    (hook,) = cfg["receivers"][0]["webhook_configs"]
    assert hook["url"] == "http://127.0.0.1:1234/alerts"
    assert hook["http_config"]["authorization"] == {
        "type": "Bearer",
        "credentials_file": str(tmp_path / "token"),
    }
    assert cfg["route"]["group_wait"] == "1s"
    assert len(cfg["inhibit_rules"]) == 4
    if shutil.which("amtool"):
        (tmp_path / "token").write_text("t")
        path = tmp_path / "am.yml"
        path.write_text(yaml.safe_dump(cfg))
        done = subprocess.run(["amtool", "check-config", str(path)], capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr


def test_shipped_scrape_interval_is_the_example_configs() -> None:
    """AlertStack's default scrape (and the fault matrix's shipped mode) is what the shipped
    Prometheus config scrapes the agents and the analyzer with."""
    root = Path(__file__).resolve().parents[2]
    cfg = yaml.safe_load((root / "config" / "prometheus.example.yml").read_text())
    jobs = {
        j["job_name"]: j.get("scrape_interval", cfg["global"]["scrape_interval"])
        for j in cfg["scrape_configs"]
    }
    assert jobs["linkwatch-agent"] == f"{SHIPPED_SCRAPE_S:g}s"
    assert jobs["linkwatch-analyzer"] == f"{SHIPPED_JOB_SCRAPE_S['linkwatch-analyzer']:g}s"


def test_prometheus_config_scrapes_a_job_more_often_never_less() -> None:
    targets = [
        ScrapeTarget("linkwatch-agent", "127.0.0.1:9308", {"cluster": "c1", "broker": "1"}),
        ScrapeTarget("linkwatch-analyzer", "127.0.0.1:9310", {"cluster": "c1"}),
    ]
    own = {"linkwatch-analyzer": 1.0, "linkwatch-agent": 5.0}
    cfg = prometheus_config(targets, [], "127.0.0.1:9093", scrape_s=2, eval_s=2, job_scrape_s=own)
    jobs = {j["job_name"]: j for j in cfg["scrape_configs"]}
    assert (jobs["linkwatch-analyzer"]["scrape_interval"], jobs["linkwatch-analyzer"]["scrape_timeout"]) == (
        "1000ms",
        "1000ms",
    )
    assert "scrape_interval" not in jobs["linkwatch-agent"]  # the global 2 s: never slower than asked
    assert cfg["global"]["scrape_interval"] == "2000ms"
