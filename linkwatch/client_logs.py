"""Process-wide holds on a client library's logger level, safe across threads.

kafka-python logs from its own IO thread, so a block that wants its records held back (a
reachability check says the cause once) or seen (a connect explains the last failure) can only
do so through the logger's level, which every thread shares. A plain save/set/restore per block
loses when two blocks overlap: the first to leave restores its saved level under the second,
and the last to leave restores the level the first one set, for good (a check in a service's
retry thread then held the "kafka" logger at CRITICAL for the rest of the process, and a later
connect saw none of its failures). A :class:`LevelHold` counts its holders: the first sets the
level, the last puts back the level from before the first.

Contract: ``with hold(): ...`` may nest and overlap from any number of threads; while any
holder is inside, the logger's level is the hold's; after the last leaves, it is what it was
before the first came in (a change made by someone else meanwhile is overwritten).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator


class LevelHold:
    """Holds ``logger_name`` at ``level`` while any holder is inside (see the module's contract);
    ``at_most``: at ``level`` or the more verbose level the logger had before the first holder."""

    def __init__(self, logger_name: str, level: int, *, at_most: bool = False) -> None:
        self._logger = logging.getLogger(logger_name)
        self._level = level
        self._at_most = at_most
        self._lock = threading.Lock()
        self._holders = 0
        self._saved = logging.NOTSET

    @property
    def holders(self) -> int:
        return self._holders

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._holders == 0:
                self._saved = self._logger.level
                level = self._level
                if self._at_most and self._saved != logging.NOTSET:
                    level = min(self._saved, level)  # a more verbose level asked for stays
                self._logger.setLevel(level)
            self._holders += 1
        try:
            yield
        finally:
            with self._lock:
                self._holders -= 1
                if self._holders == 0:
                    self._logger.setLevel(self._saved)


#: The Kafka client's own per-retry warnings held back ("kafka" and its children).
quiet_kafka = LevelHold("kafka", logging.CRITICAL)
#: kafka-python's connection manager heard at WARNING (it logs each failed bootstrap attempt),
#: even while :data:`quiet_kafka` holds its parent at CRITICAL.
BOOTSTRAP_LOGGER = "kafka.net.manager"
hear_bootstrap_failures = LevelHold(BOOTSTRAP_LOGGER, logging.WARNING, at_most=True)
