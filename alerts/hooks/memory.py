"""``memory`` notifier: keeps the last events in memory (tests, the demo's printout)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping
from typing import Any

from alerts.hooks.base import AlertEvent, HookResult, Notifier
from linkwatch.config import StrictModel
from linkwatch.errors import ConfigError


class MemoryOptions(StrictModel):
    max_events: int = 1000


class MemoryNotifier(Notifier):
    name = "memory"
    Options = MemoryOptions

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        size = self.options.get("max_events", 1000)
        if not isinstance(size, int) or size < 1:
            raise ConfigError("hooks[memory]", [f"max_events={size!r}: must be a positive integer"])
        self.events: deque[AlertEvent] = deque(maxlen=size)
        self._cond = threading.Condition()

    def handle(self, event: AlertEvent) -> HookResult:
        with self._cond:
            self.events.append(event)
            self._cond.notify_all()
        return HookResult.DONE

    def wait_for(self, count: int, timeout_s: float) -> list[AlertEvent]:
        """Wait until at least ``count`` events arrived (or the timeout); returns them all."""
        with self._cond:
            self._cond.wait_for(lambda: len(self.events) >= count, timeout=timeout_s)
            return list(self.events)
