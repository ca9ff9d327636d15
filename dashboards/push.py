"""Push the generated dashboards to a Grafana with grafana-client.

Calls ``GET /api/frontend/settings`` (grafana-client's health check: the build info; fail
fast with a clear message when Grafana is not there) and
``POST /api/dashboards/db`` once per dashboard with ``overwrite: true`` (creates or updates by
uid; optional ``folderUid``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_client import GrafanaApi

from linkwatch.errors import SetupError


@dataclass(frozen=True)
class Pushed:
    path: Path
    uid: str
    status: str
    url: str


def push_dashboards(
    paths: list[Path], url: str, token: str | None, folder_uid: str | None = None, timeout_s: float = 10.0
) -> list[Pushed]:
    api = GrafanaApi.from_url(url, credential=token or None, timeout=timeout_s)
    try:
        health = api.health.check()
    except Exception as e:
        raise SetupError(
            f"Grafana at {url} did not answer its health check ({type(e).__name__}: {e})"
        ) from None
    if not isinstance(health, dict) or not health.get("version"):
        raise SetupError(f"{url} does not look like Grafana (no build info: {health!r})")
    out = []
    for path in paths:
        dash: dict[str, Any] = json.loads(path.read_text())
        dash.pop("id", None)
        body: dict[str, Any] = {"dashboard": dash, "overwrite": True, "message": "linkwatch dashboards push"}
        if folder_uid:
            body["folderUid"] = folder_uid
        answer = api.dashboard.update_dashboard(body)
        out.append(
            Pushed(path, answer.get("uid", dash["uid"]), answer.get("status", ""), answer.get("url", ""))
        )
    return out
