"""Bounded de-duplication of alert events (Alertmanager re-sends a group every
``group_interval`` / ``repeat_interval``; a hook should see each state change once)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from alerts.hooks.base import AlertEvent


def event_key(event: AlertEvent) -> tuple[str, str, str]:
    """Same fingerprint, status and start time is the same event."""
    return (event.fingerprint, event.status, event.starts_at)


class DedupCache:
    """LRU set of event keys, at most ``max_entries`` (the oldest are forgotten first)."""

    def __init__(self, max_entries: int = 10000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries={max_entries} must be >= 1")
        self.max_entries = max_entries
        self._keys: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._lock = threading.Lock()

    def first_time(self, event: AlertEvent) -> bool:
        """True the first time this event is seen (and remembers it), False for a repeat."""
        key = event_key(event)
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                return False
            self._keys[key] = None
            if len(self._keys) > self.max_entries:
                self._keys.popitem(last=False)
            return True

    def contains(self, event: AlertEvent) -> bool:
        with self._lock:
            return event_key(event) in self._keys

    def __len__(self) -> int:
        return len(self._keys)
