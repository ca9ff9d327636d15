"""Prometheus + Alertmanager + ``linkwatch alerts serve`` as plain processes on loopback.

For the integration test and the demo: :class:`AlertStack` writes the configs into its own
work dir (Prometheus scraping the given targets with the shipped rules; Alertmanager from the
shipped ``alerts/alertmanager.example.yml`` pointed at the receiver), starts the three, and
stops them (SIGTERM, then SIGKILL) — it never leaves a process behind. By default the rules,
their ``for:`` and Alertmanager's waits are the shipped ones, scraped every
:data:`SHIPPED_SCRAPE_S` (the shipped ``config/prometheus.example.yml`` for the agents; the
analyzer every :data:`SHIPPED_JOB_SCRAPE_S`): the *Finding alerts fire within about a second
of the analyzer's finding.
``fast=True`` also sets every ``for:`` to ``for_s`` and shortens the minute ranges (the
dashboards' 5m, the disk and balance rules) and Alertmanager's grouping waits, for tests that
need any alert within seconds; the rule logic is otherwise the shipped one.
:class:`testbed.demo.alerting.AlertingDemoComponent` wraps it for ``linkwatch demo``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alerts.audit import AuditLog
from alerts.rules_check import ALERTMANAGER_EXAMPLE, rule_files
from linkwatch.errors import ConfigError, SetupError

# Fast mode: shipped window -> test window (the :5m names stay; only the ranges shrink).
FAST_WINDOWS = {"10m": "40s", "5m": "30s", "2m": "20s"}
# How often the shipped config/prometheus.example.yml scrapes the agents (its global interval):
# who is slow is the analyzer's finding; the agents' histograms feed the safety nets' 2 minute
# ranges and the dashboards (docs/alerts.md; a test checks the two agree).
SHIPPED_SCRAPE_S = 15.0
# Jobs the shipped config scrapes more often: the analyzer every 1 s, so that its findings reach
# the *Finding alerts (group linkwatch-findings, evaluated every 1 s) within about a second.
SHIPPED_JOB_SCRAPE_S = {"linkwatch-analyzer": 1.0}
# The shipped global evaluation_interval (the findings group sets its own 1 s).
SHIPPED_EVAL_S = 15.0


@dataclass(frozen=True)
class ScrapeTarget:
    """One /metrics endpoint: its job (linkwatch-agent, linkwatch-lag, linkwatch-analyzer),
    ``host:port`` and target labels (agents: ``cluster`` and ``broker``)."""

    job: str
    address: str
    labels: dict[str, str] = field(default_factory=dict)


def parse_scrape_target(spec: str) -> ScrapeTarget:
    """``JOB=HOST:PORT[,label=value...]`` -> :class:`ScrapeTarget`."""
    head, *rest = spec.split(",")
    job, sep, address = head.partition("=")
    labels = dict(item.split("=", 1) for item in rest if "=" in item)
    if not sep or ":" not in address or len(labels) != len(rest):
        raise ConfigError("--scrape", [f"{spec!r}: expected JOB=HOST:PORT[,label=value...]"])
    return ScrapeTarget(job=job, address=address, labels=labels)


def agent_targets(metrics_ports: dict[int, int], cluster: str) -> list[ScrapeTarget]:
    """Scrape targets for in-process agents, from ``{broker_id: metrics port}`` (e.g.
    ``testbed.demo.agents.AgentsComponent.metrics_ports()``)."""
    return [
        ScrapeTarget("linkwatch-agent", f"127.0.0.1:{port}", {"cluster": cluster, "broker": str(broker)})
        for broker, port in sorted(metrics_ports.items())
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None)
        if found:
            return found
    raise SetupError(
        f"{names[0]} not found: install the Debian packages prometheus and prometheus-alertmanager"
    )


def fast_rules(dst: Path, for_s: int = 10) -> list[Path]:
    """Copies of the shipped rule files with every ``for:`` set to ``for_s`` seconds and the
    range windows shortened (:data:`FAST_WINDOWS`)."""
    dst.mkdir(parents=True, exist_ok=True)
    out = []
    for src in rule_files():
        doc = yaml.safe_load(src.read_text())
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule["expr"] = re.sub(
                    r"\[(\d+m)\]", lambda m: f"[{FAST_WINDOWS.get(m[1], m[1])}]", rule["expr"]
                )
                if "for" in rule:
                    rule["for"] = f"{for_s}s"
        path = dst / src.name
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        out.append(path)
    return out


def prometheus_config(
    targets: list[ScrapeTarget],
    rules: list[Path],
    alertmanager: str,
    scrape_s: float,
    eval_s: float,
    job_scrape_s: dict[str, float] | None = None,
) -> dict[str, Any]:
    """``job_scrape_s``: jobs scraped more often than ``scrape_s`` (never less often)."""
    jobs: dict[str, list[dict[str, Any]]] = {}
    for t in targets:
        jobs.setdefault(t.job, []).append({"targets": [t.address], "labels": dict(t.labels)})
    return {
        "global": {
            "scrape_interval": _ms(scrape_s),
            "evaluation_interval": _ms(eval_s),
            "scrape_timeout": _ms(scrape_s),
        },
        "rule_files": [str(p) for p in rules],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        # honor_labels: the exporters' own cluster/broker labels win over the target labels.
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "static_configs": sc,
                **_job_scrape(job_scrape_s, job, scrape_s),
            }
            for job, sc in jobs.items()
        ],
    }


def _job_scrape(job_scrape_s: dict[str, float] | None, job: str, scrape_s: float) -> dict[str, str]:
    own = (job_scrape_s or {}).get(job)
    if own is None or own >= scrape_s:
        return {}
    return {"scrape_interval": _ms(own), "scrape_timeout": _ms(own)}


def _ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


def alertmanager_config(receiver_url: str, token_file: Path, fast: bool) -> dict[str, Any]:
    """The shipped example, pointed at ``receiver_url`` (and with short waits when ``fast``)."""
    cfg = yaml.safe_load(ALERTMANAGER_EXAMPLE.read_text())
    for receiver in cfg["receivers"]:
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = receiver_url
            hook["http_config"]["authorization"]["credentials_file"] = str(token_file)
    if fast:
        routes = [cfg["route"], *cfg["route"].get("routes", [])]
        for route in routes:
            route.update({"group_wait": "1s", "group_interval": "2s", "repeat_interval": "1h"})
        cfg["global"]["resolve_timeout"] = "10s"
    return cfg


class Process:
    """A child process with its output in a log file; ``stop`` always reaps it."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("ab")
        self.proc = subprocess.Popen(
            argv, stdout=self._log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_http(self, url: str, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SetupError(f"{self.name} exited ({self.proc.returncode}); see {self.log_path}")
            with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
            time.sleep(0.2)
        raise SetupError(f"{self.name} not ready at {url} after {timeout_s}s; see {self.log_path}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._log.close()


def posted_alert(
    name: str, ends_in_s: float = 3600, annotations: dict[str, str] | None = None, **labels: str
) -> dict:
    """An alert as Prometheus posts it to Alertmanager (API v2, :meth:`AlertStack.post_alerts`):
    started a minute ago, ending ``ends_in_s`` from now; summary ``"<name> test"`` unless
    ``annotations`` set one."""

    def at(offset_s: float) -> str:
        return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset_s)).isoformat().replace("+00:00", "Z")

    return {
        "labels": {"alertname": name, **labels},
        "annotations": {"summary": f"{name} test", **(annotations or {})},
        "startsAt": at(-60),
        "endsAt": at(ends_in_s),
    }


def prometheus_api(url: str, path: str, params: dict[str, Any] | list[tuple[str, str]]) -> Any:
    """GET a path of the Prometheus HTTP API at ``url``; the ``data`` of a successful answer."""
    with urllib.request.urlopen(f"{url}{path}?" + urllib.parse.urlencode(params), timeout=10) as r:
        doc = json.loads(r.read())
    if doc.get("status") != "success":
        raise ValueError(f"{path} {params!r} failed: {doc}")
    return doc["data"]


def prometheus_query(url: str, expr: str) -> list[dict[str, Any]]:
    """An instant query to the Prometheus at ``url``; the result vector."""
    return prometheus_api(url, "/api/v1/query", {"query": expr})["result"]


class AlertStack:
    """Receiver, Alertmanager and Prometheus, started in that order, stopped in reverse.
    Each writes under ``workdir/<name>`` (:attr:`COMPONENTS`)."""

    COMPONENTS = ("receiver", "alertmanager", "prometheus")

    def __init__(
        self,
        workdir: Path,
        targets: list[ScrapeTarget],
        fast: bool = False,
        scrape_s: float = SHIPPED_SCRAPE_S,
        eval_s: float = SHIPPED_EVAL_S,
        for_s: int = 10,
    ) -> None:
        self.workdir = Path(workdir)
        self.targets = targets
        self.fast = fast
        self.scrape_s, self.eval_s, self.for_s = scrape_s, eval_s, for_s
        self.token = secrets.token_urlsafe(24)
        self.ports = {name: free_port() for name in self.COMPONENTS}
        self.processes: list[Process] = []
        self.audit = AuditLog(self.workdir / "receiver" / "audit.jsonl")

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['prometheus']}"

    @property
    def alertmanager_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['alertmanager']}"

    @property
    def receiver_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['receiver']}/alerts"

    def start(self) -> AlertStack:
        try:
            self._start_receiver()
            self._start_alertmanager()
            self._start_prometheus()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for p in reversed(self.processes):
            p.stop()
        self.processes.clear()

    def __enter__(self) -> AlertStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _dir(self, name: str) -> Path:
        d = self.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _start_receiver(self) -> None:
        d = self._dir("receiver")
        token_file = d / "token"
        token_file.write_text(self.token)
        token_file.chmod(0o600)
        cfg = {
            "port": self.ports["receiver"],
            "token_file": str(token_file),
            "audit_log": str(self.audit.path),
        }
        (d / "receiver.yml").write_text(yaml.safe_dump(cfg))
        argv = [sys.executable, "-m", "cli.main", "alerts", "serve", "--config", str(d / "receiver.yml")]
        p = Process("linkwatch alerts serve", argv, d / "receiver.log")
        self.processes.append(p)
        p.wait_http(f"http://127.0.0.1:{self.ports['receiver']}/healthz")

    def _start_alertmanager(self) -> None:
        d = self._dir("alertmanager")
        cfg = alertmanager_config(self.receiver_url, self.workdir / "receiver" / "token", self.fast)
        (d / "alertmanager.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        argv = [
            binary("prometheus-alertmanager", "alertmanager"),
            f"--config.file={d / 'alertmanager.yml'}",
            f"--storage.path={d / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.ports['alertmanager']}",
            "--cluster.listen-address=",  # no HA gossip port
        ]
        p = Process("alertmanager", argv, d / "alertmanager.log")
        self.processes.append(p)
        p.wait_http(f"{self.alertmanager_url}/-/ready")

    def _start_prometheus(self) -> None:
        d = self._dir("prometheus")
        rules = fast_rules(d / "rules", self.for_s) if self.fast else rule_files()
        cfg = prometheus_config(
            self.targets,
            rules,
            f"127.0.0.1:{self.ports['alertmanager']}",
            self.scrape_s,
            self.eval_s,
            SHIPPED_JOB_SCRAPE_S,
        )
        (d / "prometheus.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        argv = [
            binary("prometheus"),
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={d / 'data'}",
            "--storage.tsdb.retention.time=2h",
            f"--web.listen-address=127.0.0.1:{self.ports['prometheus']}",
        ]
        p = Process("prometheus", argv, d / "prometheus.log")
        self.processes.append(p)
        p.wait_http(f"{self.prometheus_url}/-/ready")

    # --- what tests and the demo look at ----------------------------------------------------
    def _api(self, path: str, params: dict[str, Any] | list[tuple[str, str]]) -> Any:
        return prometheus_api(self.prometheus_url, path, params)

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query through Prometheus's HTTP API; the result vector."""
        return prometheus_query(self.prometheus_url, expr)

    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float = 5.0
    ) -> list[dict[str, Any]]:
        """Range query (what a Grafana time-series panel runs); the result matrix."""
        params = {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
        return self._api("/api/v1/query_range", params)["result"]

    def series(self, selector: str) -> list[dict[str, str]]:
        """Label sets of the series matching ``selector`` (what Grafana's ``label_values`` reads)."""
        return self._api("/api/v1/series", [("match[]", selector)])

    def label_values(self, label: str) -> list[str]:
        """Every value of ``label`` in the TSDB (``__name__``: every metric name)."""
        return self._api(f"/api/v1/label/{label}/values", {})

    def prometheus_alerts(self) -> list[dict[str, Any]]:
        return self._api("/api/v1/alerts", {})["alerts"]

    def alertmanager_alerts(self, *matchers: str) -> list[dict[str, Any]]:
        """Alertmanager's unresolved alerts (API v2), each with ``status.state`` and
        ``status.inhibitedBy``; ``matchers`` like ``'alertname="LinkwatchSlowBroker"'``."""
        query = urllib.parse.urlencode([("filter", m) for m in matchers])
        with urllib.request.urlopen(f"{self.alertmanager_url}/api/v2/alerts?{query}", timeout=10) as r:
            return json.loads(r.read())

    def post_alerts(self, alerts: list[dict[str, Any]]) -> None:
        """Push alerts straight into Alertmanager (API v2), as Prometheus would."""
        req = urllib.request.Request(
            f"{self.alertmanager_url}/api/v2/alerts",
            data=json.dumps(alerts).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            r.read()

    def received(
        self, alertname: str | None = None, status: str | None = None, since: int = 0
    ) -> list[dict[str, Any]]:
        """Alert records in the receiver's audit log (new events only), from the ``since``-th on
        (``len(received())`` taken earlier: only what arrived after that moment)."""
        return [
            r
            for r in self.received_all()[since:]
            if (alertname is None or r["alertname"] == alertname)
            and (status is None or r["status"] == status)
        ]

    def received_all(self) -> list[dict[str, Any]]:
        return [r for r in self.audit.read() if r["event"] == "alert" and not r["duplicate"]]

    def wait_received(
        self,
        cond: Callable[[list[dict[str, Any]]], bool],
        timeout_s: float,
        alertname: str | None = None,
        since: int = 0,
    ) -> list[dict[str, Any]]:
        """``received(alertname, since=since)`` once ``cond`` holds for it, or at the timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            got = self.received(alertname, since=since)
            if cond(got) or time.monotonic() > deadline:
                return got
            time.sleep(1.0)


def format_alert(record: dict[str, Any]) -> str:
    labels = record["labels"]
    where = " ".join(
        f"{k}={labels[k]}" for k in ("cluster", "broker", "request", "group", "topic") if labels.get(k)
    )
    stage = record["annotations"].get("stage", "")
    return f"{record['status']:8} {record['alertname']} {where}" + (f" stage={stage}" if stage else "")
