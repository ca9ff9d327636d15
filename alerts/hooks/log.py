"""``log`` notifier: one log line per alert event (the default hook)."""

from __future__ import annotations

import logging

from alerts.hooks.base import AlertEvent, HookResult, Notifier

log = logging.getLogger("linkwatch.alerts")


class LogNotifier(Notifier):
    name = "log"

    def handle(self, event: AlertEvent) -> HookResult:
        labels = ",".join(f"{k}={v}" for k, v in sorted(event.labels.items()) if k != "alertname")
        log.warning(
            "alert %s %s {%s} %s", event.status, event.alertname, labels, event.annotations.get("summary", "")
        )
        return HookResult.DONE
