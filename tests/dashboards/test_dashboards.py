"""The generated dashboards: up to date, load back through the foundation SDK's models, use
only contract metrics, every query accepted by a real Prometheus, and ``push`` against a
loopback HTTP stand-in for Grafana (no Grafana server can run here)."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

from cli.main import main
from dashboards.build import (
    DASHBOARDS,
    FINDINGS_EXPR,
    SHIPPED_DIR,
    annotation_queries,
    panel_queries,
    write_all,
)
from dashboards.push import push_dashboards
from linkwatch.errors import SetupError

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(SHIPPED_DIR.glob("*.json"))
TEST_VARS = {"$cluster": ".*", "$broker": ".*", "$topic": ".*", "$group": ".*", "$__rate_interval": "1m"}


def substitute(expr: str, values: dict[str, str] = TEST_VARS) -> str:
    for var in sorted(values, key=len, reverse=True):
        expr = expr.replace(var, values[var])
    return expr


def test_committed_json_is_what_generate_writes(tmp_path: Path) -> None:
    fresh = {p.name: p.read_text() for p in write_all(tmp_path)}
    committed = {p.name: p.read_text() for p in FILES}
    assert fresh.keys() == committed.keys() == {f"{n}.json" for n in DASHBOARDS}
    assert fresh == committed, "run `linkwatch dashboards generate` and commit"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_json_loads_back_through_sdk_models(path: Path) -> None:
    register_default_plugins()
    raw = json.loads(path.read_text())
    model = DashboardModel.from_json(raw)
    assert model.uid == raw["uid"] == f"linkwatch-{path.stem}"
    assert len(model.panels) == len(raw["panels"])
    exprs = [t.expr for p in model.panels for t in (getattr(p, "targets", None) or [])]
    assert exprs == [e for _, e in panel_queries(raw)]
    names = [v.name for v in model.templating.list_val]
    assert names[:2] == ["datasource", "cluster"]


def test_template_variables_and_panels_required_by_the_issue() -> None:
    dash = {p.stem: json.loads(p.read_text()) for p in FILES}
    variables = {n: {v["name"] for v in d["templating"]["list"]} for n, d in dash.items()}
    assert set().union(*variables.values()) >= {"cluster", "broker", "topic", "group"}
    titles = {n: [t for t, _ in panel_queries(d)] for n, d in dash.items()}
    assert "p99 by request type, whole cluster" in titles["cluster-overview"]
    assert any("Produce: mean time per stage" in t for t in titles["broker-latency"])
    assert "Stage at fault: p99 excess over the peers' median" in titles["slow-nodes"]
    assert "Disk I/O busy per log dir" in titles["skew-balance"]
    assert "Status per group" in titles["consumers"]
    for d in dash.values():
        for panel in d["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_cluster_p99_is_from_buckets_not_averaged_percentiles() -> None:
    rules = yaml.safe_load((ROOT / "alerts/rules/recording.yml").read_text())["groups"][0]["rules"]
    by_name = {r["record"]: r["expr"] for r in rules}
    assert re.search(
        r"histogram_quantile\(0\.99,\s*sum by \(cluster, request, le\)",
        by_name["linkwatch:cluster_request_p99_seconds:5m"],
    )
    for path in FILES:
        for _, expr in panel_queries(json.loads(path.read_text())):
            assert not re.search(r"avg[^(]*\([^)]*p99", expr), expr


def test_panels_read_only_contract_metrics_and_recording_rules() -> None:
    contract = set(re.findall(r"`(linkwatch_[a-z_]+)`", (ROOT / "docs/metrics.md").read_text()))
    recorded = set(re.findall(r"record: (\S+)", (ROOT / "alerts/rules/recording.yml").read_text()))
    for path in FILES:
        for title, expr in panel_queries(json.loads(path.read_text())):
            for name in re.findall(r"\blinkwatch[_:][a-z_:0-9]+", expr):
                base = re.sub(r"_(bucket|count|sum)$", "", name)
                assert {name, base} & contract or name in recorded, f"{path.name} / {title}: {name}"


def _panels(dash: dict) -> list[dict]:
    return [p for p in dash["panels"] if p["type"] != "row"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_panel_says_what_it_shows_and_in_what_unit(path: Path) -> None:
    for panel in _panels(json.loads(path.read_text())):
        assert len(panel.get("description", "")) >= 20, f"{panel['title']}: no description"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']}: no unit"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_findings_are_annotations_on_exactly_the_latency_panels(path: Path) -> None:
    dash = json.loads(path.read_text())
    latency = [
        p["id"]
        for p in _panels(dash)
        if p["type"] == "timeseries" and p["fieldConfig"]["defaults"]["unit"] == "s"
    ]
    annotations = annotation_queries(dash)
    if not latency:
        assert annotations == []
        return
    [(name, expr, ids)] = annotations
    assert (name, expr, ids) == ("Findings", FINDINGS_EXPR, latency)
    [raw] = [a for a in dash["annotations"]["list"] if a["name"] == "Findings"]
    assert raw["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    assert raw["titleFormat"] == "{{rule}} {{subject}}"


def test_the_latency_dashboards_carry_the_findings() -> None:
    dash = {p.stem: json.loads(p.read_text()) for p in FILES}
    for name in ("cluster-overview", "broker-latency", "slow-nodes"):
        assert annotation_queries(dash[name]), name
    titles = {p["id"]: p["title"] for p in dash["broker-latency"]["panels"]}
    [(_, _, ids)] = annotation_queries(dash["broker-latency"])
    assert "p99 per broker" in {titles[i] for i in ids}


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian prometheus missing")
def test_every_panel_query_is_valid_promql_on_a_real_prometheus(tmp_path: Path) -> None:
    from testbed.alert_stack import AlertStack

    with AlertStack(tmp_path, targets=[], fast=True) as stack:
        for path in FILES:
            dash = json.loads(path.read_text())
            exprs = [*panel_queries(dash), *((name, expr) for name, expr, _ in annotation_queries(dash))]
            for title, expr in exprs:
                assert isinstance(stack.query(substitute(expr)), list), f"{path.name} / {title}"


class GrafanaStandIn(BaseHTTPRequestHandler):
    """A stand-in for Grafana's HTTP API (a Grafana server cannot run here): the two endpoints
    a push calls, recording every request."""

    requests: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        self._record(None)
        if self.path == "/api/frontend/settings":
            self._json(200, {"buildInfo": {"version": "11.6.0", "edition": "Open Source"}})
        else:
            self._json(404, {"message": "Not found"})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._record(body)
        if self.path == "/api/dashboards/db":
            uid = body["dashboard"]["uid"]
            self._json(200, {"id": 1, "uid": uid, "status": "success", "url": f"/d/{uid}/x", "version": 1})
        else:
            self._json(404, {"message": "Not found"})

    def _record(self, body: Any) -> None:
        type(self).requests.append(
            {
                "method": self.command,
                "path": self.path,
                "auth": self.headers.get("Authorization"),
                "body": body,
            }
        )

    def _json(self, status: int, doc: dict) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def grafana() -> Iterator[tuple[str, type[GrafanaStandIn]]]:
    handler = type("Stand", (GrafanaStandIn,), {"requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_push_command_posts_every_dashboard_with_the_token(grafana, capsys) -> None:
    url, handler = grafana
    assert main(["dashboards", "push", "--url", url, "--token", "glsa_test", "--folder-uid", "kafka"]) == 0
    posts = [r for r in handler.requests if r["method"] == "POST"]
    assert [r["path"] for r in posts] == ["/api/dashboards/db"] * len(FILES)
    assert {r["body"]["dashboard"]["uid"] for r in posts} == {f"linkwatch-{p.stem}" for p in FILES}
    assert all(r["body"]["overwrite"] is True and r["body"]["folderUid"] == "kafka" for r in posts)
    assert all("id" not in r["body"]["dashboard"] for r in posts)
    assert {r["auth"] for r in handler.requests} == {"Bearer glsa_test"}
    assert handler.requests[0]["path"] == "/api/frontend/settings"
    assert capsys.readouterr().out.count("success linkwatch-") == len(FILES)


def test_push_to_something_that_is_not_grafana_fails_clearly(grafana) -> None:
    url, _ = grafana
    with pytest.raises(SetupError, match="did not answer its health check"):
        push_dashboards(FILES, url + "/nothing-here", token="t")
    with pytest.raises(SetupError, match="did not answer its health check"):
        push_dashboards(FILES, "http://127.0.0.1:1", token="t", timeout_s=2)
