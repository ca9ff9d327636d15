"""Errors that stop a command with one line telling the operator what to do."""

from __future__ import annotations


class LinkwatchError(Exception):
    """Base of every error linkwatch reports to the operator instead of a traceback."""


class SetupError(LinkwatchError):
    """Something on this machine is missing or in the way (Java, Maven, a port, a stale dir).

    The message is one line: what is wrong and what to do about it.
    """


class ConfigError(LinkwatchError, ValueError):
    """A configuration file or value is invalid; the message names the key, the value and why."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))
