"""Capture policy for ``kafka-request.log``: what the broker writes, and so what it costs.

* ``always`` — ``kafka.request.logger`` at DEBUG: every request, full detail.
* ``slow_only`` — DEBUG plus a log4j2 ``RegexFilter`` on the request appender that accepts only
  lines whose ``totalTimeMs`` is at or above a threshold (:func:`slow_only_filter_yaml`). The
  broker still builds each line (the filter sees the formatted message) but writes far fewer.
  Window sketches then only describe slow requests: use JMX for the rest.
* ``windows`` — the logger at WARN normally and switched to DEBUG for bounded capture windows
  through the ``BROKER_LOGGER`` dynamic config, no restart (:class:`BrokerLoggerSwitch`).

Changing a broker's logger level changes the cluster: :class:`BrokerLoggerSwitch` does nothing
without an explicit list of broker ids, supports ``dry_run`` (logs what it would do), and
always restores the idle level when a window ends (also on error).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from linkwatch.errors import SetupError

log = logging.getLogger("linkwatch.agent.capture")
REQUEST_LOGGER = "kafka.request.logger"


def at_least_regex(n: int) -> str:
    """A regex matching the decimal integers >= ``n`` (no leading zeros), e.g. 300 ->
    ``[1-9]\\d{3,}|[3-9]\\d{2}``: more digits than n, or as many and at least n digit by digit."""
    if n <= 0:
        return r"\d+"
    digits = str(n)
    k = len(digits)
    parts = [rf"[1-9]\d{{{k},}}"]
    for i, ch in enumerate(digits):
        d = int(ch)
        rest = k - i - 1
        low = d + 1
        if low <= 9:
            tail = rf"\d{{{rest}}}" if rest else ""
            parts.append(f"{digits[:i]}[{low}-9]{tail}")
    parts.append(digits)
    return "|".join(parts)


def slow_only_regex(threshold_ms: int) -> str:
    """Whole-message regex for log4j2 ``RegexFilter`` (it uses ``matches()``)."""
    return rf'.*"totalTimeMs":({at_least_regex(threshold_ms)})(\.\d+)?,.*'


def slow_only_filter_yaml(threshold_ms: int, indent: int = 8) -> str:
    """The filter block for the request appender of a log4j2 YAML config (``indent`` spaces, the
    appender's own property level; :class:`linkwatch.testbed.cluster.ClusterSpec` takes it as
    ``request_filter_yaml``)."""
    regex = slow_only_regex(threshold_ms).replace("\\", "\\\\").replace('"', '\\"')
    pad = " " * indent
    return f'{pad}RegexFilter: {{ regex: "{regex}", onMatch: ACCEPT, onMismatch: DENY }}\n'


class BrokerLoggerSwitch:
    """Set ``kafka.request.logger`` on chosen brokers through IncrementalAlterConfigs
    (resource type BROKER_LOGGER); ``window`` is a bounded capture window."""

    def __init__(
        self, admin, broker_ids: list[int], *, idle_level: str = "WARN", dry_run: bool = False
    ) -> None:
        if not broker_ids:
            raise SetupError("capture windows need an explicit list of broker ids")
        self.admin = admin
        self.broker_ids = broker_ids
        self.idle_level = idle_level
        self.dry_run = dry_run

    def set_level(self, level: str) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType

        if self.dry_run:
            log.info("dry run: would set %s=%s on brokers %s", REQUEST_LOGGER, level, self.broker_ids)
            return
        resources = [
            ConfigResource(ConfigResourceType.BROKER_LOGGER, str(b), {REQUEST_LOGGER: level})
            for b in self.broker_ids
        ]
        result = self.admin.alter_configs(resources, raise_on_unknown=False)
        errors = [f"{k} {n}: {v}" for k, by in result.items() for n, v in by.items() if v != "OK"]
        if errors:
            raise SetupError(f"the broker refused {REQUEST_LOGGER}={level}: " + "; ".join(errors))

    @contextlib.contextmanager
    def window(self, seconds: float | None = None, level: str = "DEBUG") -> Iterator[None]:
        """Capture at ``level`` inside the block (and at most ``seconds`` if given), then restore."""
        self.set_level(level)
        try:
            yield
            if seconds is not None:
                time.sleep(seconds)
        finally:
            self.set_level(self.idle_level)
