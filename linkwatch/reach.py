"""Whether a Kafka cluster answers, and if not, why, in one line an operator can act on.

The Kafka client alone answers an unreachable or wrong bootstrap with a 30 s wait and then a
timeout that names neither the cause nor the setting. This module says it in a few seconds:

* :func:`tcp_problem` — why one ``host:port`` does not accept a TCP connection (``None``: it
  does): the name does not resolve, nothing listens there, no answer (a firewall or a wrong
  host), no route.
* :func:`check_bootstrap` — the check a one-shot command runs before it builds any client:
  TCP to every bootstrap address at once; then, if one accepts, a Kafka bootstrap bounded by
  the rest of :data:`CHECK_BUDGET_S` (a port that accepts but does not speak Kafka — a TLS or
  SASL listener without the settings, another service — fails here, not after 30 s); then TCP
  to the brokers the cluster advertises (``advertised.listeners`` naming a host this machine
  cannot reach is the other first-hour mistake). Raises :class:`UnreachableError`.
* :func:`unreachable` / :func:`kafka_errors` — a Kafka client's bootstrap or connection error
  met later, turned into the same one line (with the TCP diagnosis of the addresses).
* :class:`Backoff` — exponential back-off with full jitter, bounded, for the long-running
  processes that retry instead of stopping.

Nothing here logs the client's options (they may hold secrets); errors name addresses only.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from linkwatch.client_logs import quiet_kafka
from linkwatch.errors import UnreachableError

T = TypeVar("T")

#: Seconds :func:`check_bootstrap` may take in all (the operator hears within 10 s).
CHECK_BUDGET_S = 6.0
#: Seconds a TCP connect may take before the address counts as not answering.
TCP_TIMEOUT_S = 3.0
DEFAULT_PORT = 9092

_CAUSES = {
    errno.ECONNREFUSED: "connection refused: nothing listens on that port (a wrong port, or the broker is down)",
    errno.EHOSTUNREACH: "no route to the host (a wrong address, or the network is down)",
    errno.ENETUNREACH: "the network is unreachable from this host",
    errno.EADDRNOTAVAIL: "not an address this host can connect to",
}


def addresses(servers: str | Sequence[str]) -> list[str]:
    """``"a:1,b:2"`` or ``["a:1", "b:2"]`` as a list of ``host:port`` (blank entries dropped)."""
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    return [s.strip() for s in items if s and s.strip()]


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; no port: 9092) as (host, port); ValueError when malformed."""
    host, sep, port = address.rpartition(":")
    if not sep or "]" in port:
        return address.strip("[]"), DEFAULT_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{port!r} is not a port")
    return host.strip("[]"), int(port)


def tcp_problem(address: str, timeout_s: float = TCP_TIMEOUT_S) -> str | None:
    """Why ``address`` does not accept a TCP connection, in words; ``None`` when it does."""
    try:
        host, port = split_address(address)
    except ValueError as e:
        return f"not a host:port ({e})"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return "the host name does not resolve (a typo, or a name only another network knows)"
    except (OSError, UnicodeError) as e:
        return f"the host name cannot be looked up ({e})"
    problem = "no address"
    for family, kind, proto, _, sockaddr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(timeout_s)
                s.connect(sockaddr)
            return None
        except TimeoutError:
            problem = f"no answer within {timeout_s:g}s (a firewall drops the connection, or the host is wrong or down)"
        except OSError as e:
            problem = _CAUSES.get(e.errno or 0, e.strerror or str(e))
    return problem


def tcp_problems(servers: Sequence[str], timeout_s: float = TCP_TIMEOUT_S) -> dict[str, str | None]:
    """:func:`tcp_problem` of every address, all at once (the slowest bounds the wait)."""
    if not servers:
        return {}
    with ThreadPoolExecutor(max_workers=min(16, len(servers))) as pool:
        return dict(zip(servers, pool.map(lambda a: tcp_problem(a, timeout_s), servers), strict=True))


def _why(problems: Mapping[str, str | None]) -> str:
    """The problems in words: the cause alone when every address has the same one."""
    bad = {a: p for a, p in problems.items() if p}
    causes = set(bad.values())
    if len(causes) == 1 and len(bad) == len(problems):
        return causes.pop() or ""
    return "; ".join(f"{a}: {p}" for a, p in bad.items())


def check_bootstrap(
    servers: str | Sequence[str],
    key: str = "bootstrap_servers",
    budget_s: float = CHECK_BUDGET_S,
    client_options: Mapping[str, Any] | None = None,
) -> None:
    """Return when the cluster at ``servers`` answers as Kafka; else raise
    :class:`UnreachableError` naming ``key``, the addresses and the likely cause, within about
    ``budget_s``. ``client_options`` go to the Kafka client as they are (security settings)."""
    listed = addresses(servers)
    if not listed:
        raise UnreachableError(key, "", "no address given")
    started = time.monotonic()
    problems = tcp_problems(listed, min(TCP_TIMEOUT_S, budget_s / 2))
    if all(problems.values()):
        raise UnreachableError(key, ",".join(listed), _why(problems))
    advertised = _kafka_brokers(listed, key, budget_s - (time.monotonic() - started), client_options or {})
    if advertised:
        far = tcp_problems(advertised, min(TCP_TIMEOUT_S, max(0.5, budget_s - (time.monotonic() - started))))
        if all(far.values()):
            raise UnreachableError(
                key,
                ",".join(listed),
                f"the cluster answers but the brokers it advertises ({', '.join(far)}) cannot be "
                f"reached from here ({_why(far)}); check the brokers' advertised.listeners",
            )


def check_kafka(kafka: Any, key: str, budget_s: float = CHECK_BUDGET_S) -> None:
    """:func:`check_bootstrap` for a ``kafka:`` section (or a bare bootstrap string): the
    section's security settings are used for the handshake, so a secured listener passes."""
    from linkwatch.kafka_client import client_config, security_kwargs

    cfg = client_config(kafka)
    return check_bootstrap(cfg.servers, key, budget_s, client_options=security_kwargs(cfg))


def _kafka_brokers(
    listed: list[str], key: str, budget_s: float, client_options: Mapping[str, Any]
) -> list[str]:
    """Bootstrap a Kafka client within ``budget_s``; the brokers the cluster advertises."""
    from kafka.errors import IncompatibleBrokerVersion, KafkaError

    from linkwatch.kafka_client import admin_client, known_brokers

    timeout_ms = max(1000, int(budget_s * 1000))
    with quiet_client():
        try:
            admin = admin_client(
                bootstrap_servers=listed,
                client_id="linkwatch-check",
                bootstrap_timeout_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
                **client_options,
            )
        except IncompatibleBrokerVersion:
            raise UnreachableError(
                key,
                ",".join(listed),
                "that port answers as a KRaft controller, not a broker: use the brokers' client listener",
            ) from None
        except (KafkaError, OSError) as e:
            raise UnreachableError(
                key,
                ",".join(listed),
                f"a connection is accepted but no Kafka answered within {timeout_ms / 1000:.0f}s "
                f"({type(e).__name__}): a TLS or SASL listener needs the matching security settings, "
                "or it is not a Kafka broker's port",
            ) from None
        try:
            # The metadata the bootstrap fetched (the client keeps it on its cluster view).
            brokers = known_brokers(admin)
            return [f"{b.host}:{b.port}" for b in brokers]
        finally:
            admin.close()


def quiet_client() -> contextlib.AbstractContextManager[None]:
    """The Kafka client's own per-retry warnings held back (this module says it once). Safe
    when checks in several threads overlap (:mod:`linkwatch.client_logs`)."""
    return quiet_kafka()


def is_unreachable(e: BaseException) -> bool:
    """A Kafka client's error that means the cluster did not answer at all (bootstrap failed,
    no broker connected), as opposed to an error of one request."""
    name = type(e).__name__
    if name in ("NoBrokersAvailable", "KafkaConnectionError"):
        return True
    return name == "KafkaTimeoutError" and "bootstrap" in str(e).lower()


def unreachable(servers: str | Sequence[str], key: str, e: BaseException) -> UnreachableError:
    """The one-line error for a Kafka client's bootstrap or connection failure ``e``."""
    listed = addresses(servers)
    problems = tcp_problems(listed)
    if any(problems.values()):
        why = _why(problems)
    else:
        why = f"{type(e).__name__}: {e} (the port accepts connections: security settings, or not Kafka?)"
    return UnreachableError(key, ",".join(listed), why)


@contextlib.contextmanager
def kafka_errors(servers: str | Sequence[str], key: str = "bootstrap_servers") -> Iterator[None]:
    """Inside, a Kafka client's failure to reach the cluster becomes :class:`UnreachableError`;
    any other error passes unchanged."""
    try:
        yield
    except Exception as e:
        if is_unreachable(e):
            raise unreachable(servers, key, e) from None
        raise


class Backoff:
    """Delays for retrying: a bound of ``first_s`` doubling up to ``max_s``, each delay drawn
    uniformly from its upper half ("equal jitter": processes retrying together drift apart, and
    none retries faster than half its bound). :meth:`reset` after a success."""

    def __init__(self, first_s: float = 1.0, max_s: float = 60.0, rng: random.Random | None = None) -> None:
        self.first_s, self.max_s = first_s, max_s
        self._rng = rng or random.Random()
        self.attempts = 0

    def next_s(self) -> float:
        bound = min(self.max_s, self.first_s * 2 ** min(self.attempts, 32))
        self.attempts += 1
        return bound / 2 + self._rng.uniform(0, bound / 2)

    def reset(self) -> None:
        self.attempts = 0


class KafkaReach:
    """Whether a long-running process reaches its cluster, said once and kept as metrics.

    :meth:`failed` logs the first failure of an outage as one line (later ones at DEBUG) and
    counts every failed attempt; :meth:`reached` logs the recovery once.
    ``linkwatch_kafka_up{process}`` is 1 while the last attempt reached the cluster;
    ``linkwatch_kafka_unreachable_total{process}`` counts the attempts that did not."""

    def __init__(self, process: str, registry: Any = None, logger: logging.Logger | None = None) -> None:
        from prometheus_client import Counter, Gauge

        self.process = process
        self.log = logger or logging.getLogger(f"linkwatch.{process}")
        self.failures = 0
        self._said: str | None = None
        # registry None: not registered anywhere (a caller that serves no /metrics)
        self._up = Gauge(
            "linkwatch_kafka_up",
            "1 while the last attempt reached the Kafka cluster",
            ["process"],
            registry=registry,
        )
        self._failed = Counter(
            "linkwatch_kafka_unreachable",
            "attempts to reach the Kafka cluster that failed",
            ["process"],
            registry=registry,
        )
        self._up.labels(process).set(0)
        self._failed.labels(process)

    def failed(self, e: UnreachableError, retry_s: float | None = None) -> None:
        self.failures += 1
        self._up.labels(self.process).set(0)
        self._failed.labels(self.process).inc()
        if self._said is None:  # once per outage: the first cause; later ones at DEBUG
            self._said = str(e)
            retry = f"; retrying with back-off (next in {retry_s:.1f}s)" if retry_s is not None else ""
            self.log.warning("%s%s", e, retry)
        else:
            self.log.debug("still unreachable: %s", e)

    def reached(self) -> None:
        self._up.labels(self.process).set(1)
        if self._said is not None:
            self.log.info("Kafka answers again (after %d failed attempts)", self.failures)
            self._said = None


def connect(
    build: Callable[[], T],
    servers: str | Sequence[str],
    reach: KafkaReach,
    stop: threading.Event,
    key: str = "bootstrap_servers",
    backoff: Backoff | None = None,
    client_options: Mapping[str, Any] | None = None,
) -> T | None:
    """``build()`` once the cluster at ``servers`` answers (:func:`check_bootstrap`), retried
    with :class:`Backoff` (1 s doubling to 60 s, jittered) until ``stop`` is set; ``None`` if
    it is set first. An error of ``build`` other than unreachability propagates."""
    backoff = backoff or Backoff()
    while not stop.is_set():
        try:
            check_bootstrap(servers, key, client_options=client_options)
            with kafka_errors(servers, key):
                built = build()
        except UnreachableError as e:
            wait_s = backoff.next_s()
            reach.failed(e, wait_s)
            stop.wait(wait_s)
            continue
        reach.reached()
        return built
    return None
