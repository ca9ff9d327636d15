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


class UnreachableError(LinkwatchError):
    """The Kafka cluster a setting names does not answer; the message names the setting, the
    addresses and the likely cause (never a secret: addresses only)."""

    def __init__(self, key: str, servers: str, why: str) -> None:
        self.key, self.servers, self.why = key, servers, why
        super().__init__(f"cannot reach Kafka at {key} {servers or '(empty)'}: {why}")


class ListenError(SetupError):
    """A server cannot listen where it is told to (the port is taken, the address is not this
    host's); the message names ``host:port`` and what listens there for linkwatch."""

    def __init__(self, what: str, host: str, port: int, e: OSError) -> None:
        self.host, self.port = host, port
        super().__init__(f"{what} cannot listen on {host}:{port}: {listen_cause(e)}")


def listen_cause(e: OSError) -> str:
    import errno

    causes = {
        errno.EADDRINUSE: "the address is already in use (another process listens there: stop it or "
        "choose another port)",
        errno.EADDRNOTAVAIL: "that address is not one of this host's",
        errno.EACCES: "permission denied (ports below 1024 need privileges)",
    }
    if e.errno in causes:
        return causes[e.errno]
    return e.strerror or str(e) or type(e).__name__


class KafkaConnectError(LinkwatchError):
    """No broker of a configured cluster could be used. The message is one line: the address,
    how linkwatch connects (never a secret), the reason the client gave and the likely fix."""
