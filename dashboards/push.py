"""Push the generated dashboards to a Grafana over its HTTP API (standard library only).

Calls ``GET /api/frontend/settings`` (the build info: fail fast with a clear message when Grafana
is not there) and ``POST /api/dashboards/db`` once per dashboard with ``overwrite: true``
(creates or updates by uid; optional ``folderUid``), with the service-account token as a
bearer token.

Two HTTP calls do not need a client library. grafana-client did the same calls, but its HTTP
stack (niquests → urllib3-future) rewrites the environment's ``urllib3`` package at every
interpreter start and installs a top-level ``test`` package; installing linkwatch must leave
other packages as they are (tests/test_install.py).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from linkwatch.errors import SetupError


@dataclass(frozen=True)
class Pushed:
    path: Path
    uid: str
    status: str
    url: str


class GrafanaHttpError(Exception):
    """Grafana answered with an error status (``status``) or not at all (``status`` 0)."""

    def __init__(self, method: str, url: str, status: int, detail: str) -> None:
        super().__init__(f"{method} {url}: {status or 'no answer'}: {detail[:300]}")
        self.status = status


def _call(method: str, url: str, token: str | None, timeout_s: float, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as e:
        raise GrafanaHttpError(method, url, e.code, e.read().decode(errors="replace")) from None
    except (OSError, urllib.error.URLError) as e:
        raise GrafanaHttpError(method, url, 0, f"{type(e).__name__}: {e}") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise GrafanaHttpError(method, url, 200, f"not JSON: {raw[:100]!r}") from None


def push_dashboards(
    paths: list[Path], url: str, token: str | None, folder_uid: str | None = None, timeout_s: float = 10.0
) -> list[Pushed]:
    base = url.rstrip("/")
    try:
        settings = _call("GET", f"{base}/api/frontend/settings", token, timeout_s)
    except GrafanaHttpError as e:
        raise SetupError(f"Grafana at {url} did not answer its health check ({e})") from None
    build = settings.get("buildInfo") if isinstance(settings, dict) else None
    if not isinstance(build, dict) or not build.get("version"):
        raise SetupError(f"{url} does not look like Grafana (no build info: {settings!r:.200})")
    out = []
    for path in paths:
        dash: dict[str, Any] = json.loads(path.read_text())
        dash.pop("id", None)
        body: dict[str, Any] = {"dashboard": dash, "overwrite": True, "message": "linkwatch dashboards push"}
        if folder_uid:
            body["folderUid"] = folder_uid
        try:
            answer = _call("POST", f"{base}/api/dashboards/db", token, timeout_s, body)
        except GrafanaHttpError as e:
            raise SetupError(f"Grafana at {url} refused dashboard {dash.get('uid')} ({e})") from None
        out.append(
            Pushed(path, answer.get("uid", dash["uid"]), answer.get("status", ""), answer.get("url", ""))
        )
    return out
