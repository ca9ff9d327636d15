"""Rate limit for what retry loops log: :class:`RateLimitFilter`, :func:`limit_retry_logs`.

When the group coordinator's broker dies, kafka-python's coordinator retries in a loop and logs
every turn ("Marking the coordinator dead …" 1,000–2,000 times a second before the consumer
backed off): the log drowns and formatting it costs CPU. The filter lets the first record of a
kind through, drops the repeats for ``interval_s``, and lets the next one after that through
with a summary of what it dropped (``[N more like this in the last 10 s]``). A *kind* is the
logger and the message template (``record.msg`` before its arguments), so the same warning
about another node or group is the same kind. Nothing is dropped uncounted: the summary names
the number, and :attr:`RateLimitFilter.suppressed` keeps the total.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

# kafka-python loggers that log once per retry turn (coordinator lookups, heartbeats,
# connection attempts, metadata requests), as kafka-python 3.0.12 names them. A filter acts
# on the records of its own logger only, so each is listed.
RETRY_LOGGERS = (
    "kafka.coordinator",
    "kafka.coordinator.consumer",
    "kafka.coordinator.heartbeat",
    "kafka.net.connection",
    "kafka.net.manager",
    "kafka.net.selector",
    "kafka.cluster",
    "kafka.consumer.fetcher",
    "kafka.consumer.group",
)


class RateLimitFilter(logging.Filter):
    """Per kind (logger, template): the first record, then at most one per ``interval_s``
    carrying the count of those dropped since. Thread-safe; ``clock`` is for tests."""

    def __init__(self, interval_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._kinds: dict[tuple[str, str], tuple[float, int]] = {}  # kind -> (window start, dropped)
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        kind = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            started, dropped = self._kinds.get(kind, (None, 0))
            if started is not None and now - started < self.interval_s:
                self._kinds[kind] = (started, dropped + 1)
                self.suppressed += 1
                return False
            self._kinds[kind] = (now, 0)
        if dropped:
            # A copy of the template with the summary; args are untouched so %-formatting holds.
            record.msg = f"{record.msg} [{dropped} more like this in the last {self.interval_s:g} s]"
        return True


_installed: RateLimitFilter | None = None
_install_lock = threading.Lock()


def limit_retry_logs(interval_s: float, loggers: Iterable[str] = RETRY_LOGGERS) -> RateLimitFilter:
    """Put one :class:`RateLimitFilter` on each of ``loggers`` (process-wide, idempotent: the
    first call's ``interval_s`` holds for the process); returns the filter."""
    global _installed
    with _install_lock:
        if _installed is None:
            _installed = RateLimitFilter(interval_s)
            for name in loggers:
                logging.getLogger(name).addFilter(_installed)
        return _installed
