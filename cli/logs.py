"""Logging for the ``linkwatch`` processes: one format, linkwatch's own level, and the client
libraries kept quiet.

kafka-python logs every connection, probe and metadata refresh at INFO; aiohttp logs every
request it serves (each Prometheus scrape); py4j logs every gateway call. In a long-running
process they were 93-99 % of the log, so they are held at ``--client-log-level`` (WARNING
unless asked for) whatever linkwatch's own level is. Warnings and errors from them still show.

Levels come from, first to last: ``--log-level`` (or ``$LINKWATCH_LOG_LEVEL``), the command's
config (``log_level`` where it has one), INFO.
"""

from __future__ import annotations

import logging

from linkwatch.errors import ConfigError

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
# Loggers of the client libraries linkwatch uses (their children follow them).
CLIENT_LOGGERS = (
    "kafka",
    "aiohttp",
    "urllib3",
    "requests",
    "py4j",
    "opentelemetry",
    "asyncio",
)

_explicit: str | None = None


def _level(value: str, option: str) -> str:
    level = value.strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in LEVELS:
        raise ConfigError(option, [f"{value!r} is not one of {', '.join(LEVELS)}"])
    return level


def configure(level: str | None = None, client_level: str = "WARNING") -> None:
    """Set up the root handler once, linkwatch's level (``level``, else INFO until a config says
    otherwise) and the client libraries' level."""
    global _explicit
    _explicit = _level(level, "--log-level") if level else None
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(format=FORMAT)
    root.setLevel(_explicit or "INFO")
    client = _level(client_level, "--client-log-level")
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(client)


def use_config_level(level: str | None) -> None:
    """A command's config names its log level: it applies unless ``--log-level`` was given."""
    if level and _explicit is None:
        logging.getLogger().setLevel(_level(level, "log_level"))
