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
        self.log_behind_bytes = 0
        self.spool_records = 0
        self.spool_resent = 0  # records sent again after the producer gave up on them
        self.slow_requests: Counter[str] = Counter()
        # How the request log is read: "compiled", or "python (why not compiled)"; "" if no
        # request log source runs.
        self.request_log_scanner = ""
        # Sampled capture (agent.capture): 1/stride of the last window emitted; None: not sampled.
        self.capture_ratio: float | None = None
        self._log_every_s = log_every_s
        self._clock = clock
        self._last_log: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()
        self._lock = threading.Lock()

    def drop(self, reason: str, detail: str = "", n: int = 1, context: str = "") -> None:
        """Count ``n`` dropped items under ``reason`` and log it (rate-limited per reason)."""
        with self._lock:
            self.dropped[reason] += n
            now = self._clock()
            last = self._last_log.get(reason)
            if last is not None and now - last < self._log_every_s:
                self._suppressed[reason] += n
                return
            self._last_log[reason] = now
            suppressed = self._suppressed.pop(reason, 0)
        more = f" (+{suppressed} more since last report)" if suppressed else ""
        log.warning("dropped %s [%s]%s: %s", reason, context, more, detail[:300])

    def drops(self) -> Counter[str]:
        """A copy of the drop counts by reason (safe while other threads drop)."""
        with self._lock:
            return Counter(self.dropped)

    def set_up(self, source: str, up: bool, detail: str = "") -> None:
        was = self.source_up.get(source)
        self.source_up[source] = up
        if was is not None and was != up:
            if up:
                log.info("source %s is up again", source)
            else:
                log.warning("source %s is down: %s", source, detail[:300])
