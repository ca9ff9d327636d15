"""The agent's own health: lines read, drops by reason, source up/down, rate-limited logging.

Every source reports into one :class:`Health`; the Prometheus collector reads it. Counting is
never skipped; logging a drop is rate-limited per reason (first one, then at most one every
``log_every_s``, with how many were suppressed) so a flood of bad lines cannot flood the log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

log = logging.getLogger("linkwatch.agent")


class Health:
    def __init__(self, log_every_s: float = 30.0, clock=time.monotonic) -> None:
        self.lines_read = 0
        self.dropped: Counter[str] = Counter()
        self.source_up: dict[str, bool] = {}
        self.source_detail: dict[str, str] = {}  # why each source last went down
        self.log_behind_bytes = 0
        self.spool_records = 0
        self.spool_resent = 0  # records sent again after the producer gave up on them
        self.slow_requests: Counter[str] = Counter()
        # How the request log is read: "compiled", or "python (why not compiled)"; "" if no
        # request log source runs.
        self.request_log_scanner = ""
        # Sampled capture (agent.capture): 1/stride of the last window emitted; None: not sampled.
        self.capture_ratio: float | None = None
        # Lines of sampled windows kept although their slice did not go as planned (a switch
        # through the broker's admin API failed or was late): marked inexact, never dropped.
        self.capture_inexact = 0
        # Saves of the request log's position that failed (a full or read-only disk): the
        # windows are published all the same; a restart re-reads from the last saved position.
        self.position_save_failures = 0
        # Service time (µs) of connections beyond the per-window bound, not timed per connection
        # (agent.requestlog.window.MAX_CONNECTIONS).
        self.untimed_connection_us = 0
        self._log_every_s = log_every_s
        self._clock = clock
        self._last_log: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()
        self._lock = threading.Lock()

    def drop(self, reason: str, detail: str = "", n: int = 1, context: str = "") -> None:
        """Count ``n`` dropped items under ``reason`` and log it (rate-limited per reason)."""
        with self._lock:
            self.dropped[reason] += n
            more = self._may_log(reason, n)
        if more is not None:
            log.warning("dropped %s [%s]%s: %s", reason, context, more, detail[:300])

    def position_not_saved(self, path: str, detail: str) -> None:
        """The request log's position could not be saved to ``path``: counted, logged the
        first time and then at most once every ``log_every_s`` (with how many since)."""
        with self._lock:
            self.position_save_failures += 1
            more = self._may_log("position_save", 1)
        if more is not None:
            log.warning(
                "request_log.position_file %s not saved%s: %s; windows are still published, a restart "
                "would re-read from the last saved position",
                path,
                more,
                detail[:300],
            )

    def _may_log(self, key: str, n: int) -> str | None:
        """Under the lock: ``None`` when ``key`` was logged less than ``log_every_s`` ago (the
        ``n`` items are remembered), else the "+k more" note for the line to log now."""
        now = self._clock()
        last = self._last_log.get(key)
        if last is not None and now - last < self._log_every_s:
            self._suppressed[key] += n
            return None
        self._last_log[key] = now
        suppressed = self._suppressed.pop(key, 0)
        return f" (+{suppressed} more since last report)" if suppressed else ""

    def drops(self) -> Counter[str]:
        """A copy of the drop counts by reason (safe while other threads drop)."""
        with self._lock:
            return Counter(self.dropped)

    def set_up(self, source: str, up: bool, detail: str = "") -> None:
        """A source's state as it reports it: its first report is logged (a source that cannot
        be opened says so at start, with why), then each change."""
        was = self.source_up.get(source)
        self.source_up[source] = up
        if not up:
            self.source_detail[source] = detail
        if was is None:
            if up:
                log.info("source %s is open", source)
            else:
                log.warning("source %s could not be opened: %s", source, detail[:300])
        elif was != up:
            if up:
                log.info("source %s is up again", source)
            else:
                log.warning("source %s is down: %s", source, detail[:300])
