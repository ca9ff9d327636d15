"""``webhook`` notifier: POST the alert event as JSON to a URL, with bounded retries.

Options: ``url`` (http/https, required), ``timeout_s`` (default 5), ``retries`` (0..5, default
2), ``backoff_s`` (default 0.5, doubled per retry), ``headers`` (static mapping). The URL is
fixed by config; nothing from the alert goes into it.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from alerts.hooks.base import AlertEvent, HookResult, Notifier
from linkwatch.config import StrictModel
from linkwatch.errors import ConfigError

MAX_RETRIES = 5


class WebhookOptions(StrictModel):
    url: str
    timeout_s: float = 5.0
    retries: int = 2
    backoff_s: float = Field(0.5, ge=0)
    headers: dict[str, str] = Field(default_factory=dict)


class WebhookNotifier(Notifier):
    name = "webhook"
    Options = WebhookOptions

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        o = self.options
        self.url = str(o.get("url", ""))
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError("hooks[webhook]", [f"options.url={self.url!r}: must be an http(s) URL"])
        self.timeout_s = float(o.get("timeout_s", 5.0))
        self.retries = int(o.get("retries", 2))
        self.backoff_s = float(o.get("backoff_s", 0.5))
        self.headers = {str(k): str(v) for k, v in dict(o.get("headers", {})).items()}
        if not 0 <= self.retries <= MAX_RETRIES:
            raise ConfigError("hooks[webhook]", [f"options.retries={self.retries}: must be 0..{MAX_RETRIES}"])
        if not 0 < self.timeout_s <= 60:
            raise ConfigError("hooks[webhook]", [f"options.timeout_s={self.timeout_s}: must be in (0, 60]"])
        self.attempts = 0  # total POSTs made (for operators' logs and tests)

    def handle(self, event: AlertEvent) -> HookResult:
        body = json.dumps(event.to_dict()).encode()
        delay = self.backoff_s
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(delay)
                delay *= 2
            self.attempts += 1
            if self._post(body):
                return HookResult.DONE
        return HookResult.FAILED

    def _post(self, body: bytes) -> bool:
        req = urllib.request.Request(
            self.url, data=body, method="POST", headers={"Content-Type": "application/json", **self.headers}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return 200 <= resp.status < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False
