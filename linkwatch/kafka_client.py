"""The ``kafka:`` client section every component's config shares, and what it becomes.

* :class:`KafkaClientConfig` — where a Kafka cluster is and how to connect to it: bootstrap
  servers, ``security_protocol``, SASL (PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512) with the username
  and password inline, from a file or from an environment variable, TLS files (PEM) and the
  client id prefix. Validated at load: settings that cannot work together (SASL keys without a
  SASL protocol, SASL without a mechanism, a username or password, a certificate without its
  key) are a :class:`~linkwatch.errors.ConfigError` naming the key. Secrets are read when a
  client is built (a password file rotated is read again by the next client); one that cannot
  be read is a ConfigError naming its key then. Secrets never appear in a message.
* :func:`kafka_python_kwargs` — the keyword arguments of kafka-python's ``KafkaAdminClient``,
  ``KafkaProducer`` and ``KafkaConsumer`` (every client linkwatch builds goes through it).
* :func:`spark_kafka_options` — the ``kafka.``-prefixed options of Spark's Kafka source.
* :func:`client_config` — a section from either a section or a bare ``host:port,...`` string,
  for code and tests that only know an address.
* :func:`describe` — one line naming the cluster and how linkwatch connects to it, safe to log.
* :func:`explained_connect_errors` — around building a client: a cluster that cannot be used
  (a wrong password, a CA that does not match, nothing listening) becomes one
  :class:`~linkwatch.errors.KafkaConnectError` naming the address and the likely cause.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import ssl
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from linkwatch.client_logs import BOOTSTRAP_LOGGER, hear_bootstrap_failures
from linkwatch.config import FileLocation, StrictModel
from linkwatch.errors import ConfigError, KafkaConnectError

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]

_SASL = ("SASL_PLAINTEXT", "SASL_SSL")
_TLS = ("SSL", "SASL_SSL")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
MAX_SECRET_BYTES = 4096  # a password file is a few bytes; a larger one is the wrong file
HIDDEN = "<hidden>"
# How long a service's first admin client tries to reach the cluster before it says why it
# cannot (kafka-python's default is 30 s; a wrong password or address is not worth waiting for).
BOOTSTRAP_TIMEOUT_MS = 10_000


class HidePasswords(logging.Filter):
    """Hides the SASL password in the configuration kafka-python's admin client logs at DEBUG
    ("Starting KafkaAdminClient with configuration: {...}"). Installed on that logger when this
    module is imported, i.e. before any client is built through it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, Mapping):
            record.args = _hidden(record.args)
        elif isinstance(record.args, tuple):
            record.args = tuple(_hidden(a) for a in record.args)
        return True


def _hidden(value: Any) -> Any:
    if isinstance(value, Mapping) and value.get("sasl_plain_password"):
        return {**value, "sasl_plain_password": HIDDEN}
    return value


logging.getLogger("kafka.admin.client").addFilter(HidePasswords())
_log = logging.getLogger(__name__)


class KafkaClientConfig(StrictModel):
    """How to reach one Kafka cluster (the ``kafka:`` section of every component's config).

    Username and password each come from the first set of ``<name>_file`` (the file's text,
    one trailing newline dropped), ``<name>_env`` (the named variable) and ``<name>`` (inline, or
    the component's environment override such as ``LINKWATCH_LAG_KAFKA__SASL_PASSWORD``).
    """

    bootstrap_servers: str = ""  # host:port[,host:port...]; "" only where the component allows
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism | None = None  # required with SASL_PLAINTEXT / SASL_SSL
    sasl_username: str | None = None
    sasl_username_file: FileLocation | None = None
    sasl_username_env: str | None = None
    sasl_password: SecretStr | None = None
    sasl_password_file: FileLocation | None = None
    sasl_password_env: str | None = None
    # TLS (SSL / SASL_SSL), PEM files: the CA bundle that signed the brokers' certificates (None:
    # the system's), and this client's certificate and unencrypted key for mutual TLS.
    ssl_cafile: FileLocation | None = None
    ssl_certfile: FileLocation | None = None
    ssl_keyfile: FileLocation | None = None
    ssl_check_hostname: bool = True  # the broker's certificate must name the host connected to
    # Client ids are "<client_id_prefix>-<role>" (linkwatch-lag, linkwatch-probe ...): brokers'
    # quotas and request logs tell linkwatch's clients apart by them.
    client_id_prefix: str = Field("linkwatch", min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._-]+$")

    @model_validator(mode="after")
    def _consistent(self) -> KafkaClientConfig:
        problems = [*_sasl_problems(self), *_tls_problems(self)]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def servers(self) -> list[str]:
        """The bootstrap servers as a list (blanks dropped)."""
        return [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()]

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in _SASL

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in _TLS

    def username(self) -> str:
        """The SASL username from the first source set; ValueError naming the key if it cannot be read."""
        return _secret(self, "sasl_username", self.sasl_username)

    def password(self) -> str:
        """The SASL password from the first source set; ValueError naming the key (never the value)."""
        inline = self.sasl_password.get_secret_value() if self.sasl_password is not None else None
        return _secret(self, "sasl_password", inline)


def _sources(cfg: KafkaClientConfig, name: str) -> list[str]:
    return [k for k in (name, f"{name}_file", f"{name}_env") if getattr(cfg, k) is not None]


def _sasl_problems(cfg: KafkaClientConfig) -> list[str]:
    given = [*_sources(cfg, "sasl_username"), *_sources(cfg, "sasl_password")]
    if not cfg.uses_sasl:
        if cfg.sasl_mechanism is not None or given:
            return [f"security_protocol={cfg.security_protocol}: sasl_* keys need SASL_SSL or SASL_PLAINTEXT"]
        return []
    problems = []
    if cfg.sasl_mechanism is None:
        problems.append(f"sasl_mechanism: required with security_protocol {cfg.security_protocol}")
    for name in ("sasl_username", "sasl_password"):
        if not _sources(cfg, name):
            problems.append(f"{name}: required with {cfg.security_protocol} (or {name}_file, or {name}_env)")
    return problems


def _tls_problems(cfg: KafkaClientConfig) -> list[str]:
    files = {k: getattr(cfg, k) for k in ("ssl_cafile", "ssl_certfile", "ssl_keyfile")}
    given = {k: v for k, v in files.items() if v is not None}
    if not cfg.uses_tls:
        return (
            [f"security_protocol={cfg.security_protocol}: ssl_* files need SSL or SASL_SSL"] if given else []
        )
    if (cfg.ssl_certfile is None) != (cfg.ssl_keyfile is None):
        return ["ssl_keyfile: ssl_certfile and ssl_keyfile go together (mutual TLS needs both)"]
    return []


def _secret(cfg: KafkaClientConfig, name: str, inline: str | None) -> str:
    path: Path | None = getattr(cfg, f"{name}_file")
    env: str | None = getattr(cfg, f"{name}_env")
    if path is not None:
        return _read_secret_file(f"{name}_file", path)
    if env is not None:
        value = os.environ.get(env)
        if not value:
            raise ValueError(f"{name}_env: the environment variable {env[:80]} is not set or empty")
        return value
    if not inline:
        raise ValueError(f"{name}: empty")
    return inline


def unreadable(kafka: KafkaClientConfig) -> list[str]:
    """What a client built from ``kafka`` could not read now: its username, password and TLS
    files, one message per key (``sasl_password_file: cannot read ... (No such file ...)``)."""
    problems = []
    if kafka.uses_sasl:
        for read in (kafka.username, kafka.password):
            try:
                read()
            except ValueError as e:
                problems.append(str(e))
    if kafka.uses_tls:
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            path = getattr(kafka, key)
            if path is not None and not os.access(path, os.R_OK):
                problems.append(f"{key}: cannot read {str(path)[:80]}")
    return problems


def _read_secret_file(key: str, path: Path) -> str:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SECRET_BYTES + 1)
    except OSError as e:
        raise ValueError(f"{key}: cannot read {str(path)[:80]} ({e.strerror})") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise ValueError(f"{key}: {str(path)[:80]} is larger than {MAX_SECRET_BYTES} bytes")
    try:
        text = raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        raise ValueError(f"{key}: {str(path)[:80]} is not UTF-8 text") from None
    if not text:
        raise ValueError(f"{key}: {str(path)[:80]} is empty")
    return text


def client_config(kafka: KafkaClientConfig | str) -> KafkaClientConfig:
    """``kafka`` itself, or a PLAINTEXT section for a bare ``host:port[,...]`` address."""
    return kafka if isinstance(kafka, KafkaClientConfig) else KafkaClientConfig(bootstrap_servers=kafka)


def client_id(kafka: KafkaClientConfig, role: str) -> str:
    return f"{kafka.client_id_prefix}-{role}"


def kafka_python_kwargs(kafka: KafkaClientConfig | str, role: str) -> dict[str, Any]:
    """Connection kwargs for kafka-python's clients: ``bootstrap_servers``, ``client_id``
    (``<prefix>-<role>``), ``security_protocol`` and the SASL / TLS settings it names. The
    caller adds its own (``acks``, ``group_id`` ...) and may override ``client_id``. The result
    holds the password: pass it to the client, never to a log. A secret or file that cannot be
    read is a ConfigError naming its key (``kafka.sasl_password_file: ...``)."""
    cfg = client_config(kafka)
    _require_readable(cfg)
    kw: dict[str, Any] = {
        "bootstrap_servers": cfg.servers,
        "client_id": client_id(cfg, role),
        "security_protocol": cfg.security_protocol,
    }
    if cfg.uses_sasl:
        kw |= {
            "sasl_mechanism": cfg.sasl_mechanism,
            "sasl_plain_username": cfg.username(),
            "sasl_plain_password": cfg.password(),
        }
    if cfg.uses_tls:
        kw["ssl_check_hostname"] = cfg.ssl_check_hostname
        for key in ("ssl_cafile", "ssl_certfile", "ssl_keyfile"):
            if getattr(cfg, key) is not None:
                kw[key] = str(getattr(cfg, key))
    return kw


def security_kwargs(kafka: KafkaClientConfig | str) -> dict[str, Any]:
    """Only how to connect (protocol, SASL, TLS): :func:`kafka_python_kwargs` without the
    addresses and the client id, for a caller that brings its own (a reachability check)."""
    kw = kafka_python_kwargs(kafka, "check")
    del kw["bootstrap_servers"], kw["client_id"]
    return kw


def _require_readable(cfg: KafkaClientConfig) -> None:
    problems = unreadable(cfg)
    if problems:
        raise ConfigError("kafka", problems)


def jaas_config(kafka: KafkaClientConfig) -> str:
    """The ``sasl.jaas.config`` line of a Java client (quotes and backslashes escaped)."""
    assert kafka.sasl_mechanism is not None  # guaranteed by validation with SASL_*

    def quoted(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'

    module = _LOGIN_MODULES[kafka.sasl_mechanism]
    return f"{module} required username={quoted(kafka.username())} password={quoted(kafka.password())};"


def spark_kafka_options(kafka: KafkaClientConfig | str) -> dict[str, str]:
    """Options of Spark's Kafka source and sink (``kafka.``-prefixed Java client settings).

    TLS files are PEM (Kafka 2.7+): the CA file as a PEM truststore, a client certificate and
    key (PKCS#8, unencrypted) as a PEM keystore given by value. The result holds the password
    (in ``kafka.sasl.jaas.config``): never log it. Unreadable secrets: as :func:`kafka_python_kwargs`."""
    cfg = client_config(kafka)
    _require_readable(cfg)
    opts = {
        "kafka.bootstrap.servers": ",".join(cfg.servers),
        "kafka.security.protocol": cfg.security_protocol,
    }
    if cfg.uses_sasl:
        assert cfg.sasl_mechanism is not None
        opts["kafka.sasl.mechanism"] = cfg.sasl_mechanism
        opts["kafka.sasl.jaas.config"] = jaas_config(cfg)
    if cfg.uses_tls:
        if cfg.ssl_cafile is not None:
            opts["kafka.ssl.truststore.type"] = "PEM"
            opts["kafka.ssl.truststore.location"] = str(cfg.ssl_cafile)
        if cfg.ssl_certfile is not None and cfg.ssl_keyfile is not None:
            opts["kafka.ssl.keystore.type"] = "PEM"
            opts["kafka.ssl.keystore.certificate.chain"] = Path(cfg.ssl_certfile).read_text()
            opts["kafka.ssl.keystore.key"] = Path(cfg.ssl_keyfile).read_text()
        if not cfg.ssl_check_hostname:
            opts["kafka.ssl.endpoint.identification.algorithm"] = ""
    return opts


def admin_client(**configs: Any) -> Any:
    """``kafka.KafkaAdminClient(**configs)`` with two mends of kafka-python (3.0.12); build
    every admin client through this.

    * Its IO thread is stopped when the constructor fails: kafka-python starts that thread, then
      bootstraps; a bootstrap that fails left the thread running for the life of the process,
      so a retry loop over an outage (``linkwatch.reach.connect``, a check every back-off)
      leaked one thread per attempt.
    * A request for the controller survives the restart of the broker it went to. The client
      keeps the broker it first sent controller requests to and its own view of the brokers,
      which it does not refresh by itself; a broker that restarts (a rolling restart) leaves
      that view without it, and every later controller request (reassignments, leader
      elections, topic creation) failed with ``UnknownBrokerIdError`` for good — the probe's
      topic keeper and the remediator's leader elections stopped working after one. On that
      error (or the broker not ready), the view is refreshed, the controller asked again, and
      the request sent once more.
    * A refused authentication ends the bootstrap at once. kafka-python records the refusal and
      tries again until ``bootstrap_timeout_ms`` ends (10 s for linkwatch's services), then
      raises a timeout; a wrong password cannot succeed on a later try, and Kafka's own clients
      fail on it at once (an authentication error is not retriable there). A refusal the
      bootstrap sees is raised instead, so the operator's one line comes with no wait. It is not
      always seen as one (in some attempts the bootstrap only times out, as before: a clean-clone
      suite run and a random-order run showed it; the cause is not yet read), so callers keep
      their handling of a timeout.
    """
    return _admin_class()(**configs)


def _net_client_refusing_early(**configs: Any) -> Any:
    """kafka-python's ``KafkaNetClient`` whose bootstrap stops at the first authentication
    refusal (see :func:`admin_client`). The bootstrap asks its manager for a connection on every
    try; a refusal of an earlier try is raised there instead. A refusal reaches the bootstrap
    two ways: recorded by the manager (its connect step failed) or as the failure of the
    connection's handshake (the broker's SaslAuthenticate answer), which the manager does not
    record; both are read. Only while not yet bootstrapped: later, kafka-python's own handling
    of a refused reconnection stands."""
    from kafka import errors  # kafka-python: only where clients are built
    from kafka.net.compat import KafkaNetClient

    refused = (errors.SaslAuthenticationFailedError, errors.AuthorizationError)
    client = KafkaNetClient(**configs)
    manager = client._manager
    connect = manager.get_connection
    tried: list[Any] = []  # the bootstrap's connections so far (a few: one a try)

    def get_connection(node_id: Any, *args: Any, **kwargs: Any) -> Any:
        if not manager.bootstrapped:
            for failure in [*manager._auth_failures.values(), *(c.init_future.exception for c in tried)]:
                if isinstance(failure, refused):
                    raise failure
            del tried[:-8]
        conn = connect(node_id, *args, **kwargs)
        if not manager.bootstrapped:
            tried.append(conn)
        return conn

    manager.get_connection = get_connection
    return client


def known_brokers(admin: Any) -> list[Any]:
    """The brokers (each with ``node_id``, ``host``, ``port``, ``rack``) in the metadata an
    admin client holds. kafka-python keeps them on the client's private cluster view and has no
    public call for it; this is the one place that reads it."""
    return list(admin._client.cluster.brokers())


@functools.cache
def _admin_class() -> type:
    from kafka import KafkaAdminClient, errors  # kafka-python: only where clients are built

    stale = (errors.UnknownBrokerIdError, errors.NodeNotReadyError, errors.KafkaConnectionError)

    class Admin(KafkaAdminClient):
        def __init__(self, **configs: Any) -> None:
            try:
                super().__init__(**{"kafka_client": _net_client_refusing_early, **configs})
            except BaseException:
                net = getattr(self, "_net", None)
                if net is not None:
                    with contextlib.suppress(Exception):
                        net.stop(timeout_ms=5000)
                raise

        async def _send_request_to_controller(self, *args: Any, **kwargs: Any) -> Any:
            # Runs on the client's IO thread (kafka-python's own coroutine): see admin_client.
            try:
                return await super()._send_request_to_controller(*args, **kwargs)
            except stale as e:
                _log.info("admin: controller request failed (%s); refreshing the broker view", e)
                self._controller_id = None
                await self._manager.cluster.refresh_metadata()
                return await super()._send_request_to_controller(*args, **kwargs)

    return Admin


def describe(kafka: KafkaClientConfig | str) -> str:
    """``host:port,... (SASL_SSL, SCRAM-SHA-512 as alice)``: for logs and errors, no secret."""
    cfg = client_config(kafka)
    how = cfg.security_protocol
    if cfg.uses_sasl:
        try:
            who = cfg.username()
        except ValueError:
            who = "<unreadable username>"
        how += f", {cfg.sasl_mechanism} as {who[:80]}"
    return f"{cfg.bootstrap_servers or '<no bootstrap_servers>'} ({how})"


class _LastFailure(logging.Handler):
    """Keeps why kafka-python's connection attempts failed: it logs each failed bootstrap
    attempt, then raises only a timeout ("Unable to bootstrap"). A telling reason (an
    authentication or TLS failure) is kept over a later plain disconnect: a broker closes the
    connections of a client that failed to authenticate.

    Two ways in: as a handler on the "kafka" logger (every kafka-python record that propagates)
    and through :meth:`note`, put first among the filters of the logger that reports bootstrap
    failures, so a rate-limit filter there (consumer.log_limit drops a retry loop's repeats of
    one message for 10 s) cannot hide the failures of this block from it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.error: BaseException | None = None

    def note(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level:
            self.emit(record)
        return True  # a filter that only watches

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        found = [a for a in args if isinstance(a, BaseException)]
        if found and not (self.error is not None and _telling(self.error) and not _telling(found[-1])):
            self.error = found[-1]


def _telling(error: BaseException) -> bool:
    from kafka import errors

    return isinstance(error, errors.SaslAuthenticationFailedError | errors.AuthorizationError | ssl.SSLError)


@contextlib.contextmanager
def explained_connect_errors(kafka: KafkaClientConfig | str) -> Iterator[None]:
    """Run the block (which builds kafka-python clients for ``kafka``); a ``KafkaError`` it
    raises becomes a :class:`~linkwatch.errors.KafkaConnectError` naming the address, the last
    reason a connection failed and what to check. Other exceptions pass unchanged."""
    from kafka.errors import KafkaError  # kafka-python: only where clients are built

    seen = _LastFailure()
    logger = logging.getLogger("kafka")
    logger.addHandler(seen)
    # kafka-python logs each failed bootstrap on "kafka.net.manager" (from its IO thread); the
    # hold keeps that logger at WARNING for the block, even while a check in another thread
    # holds the "kafka" logger quiet (linkwatch.reach.quiet_client).
    source = logging.getLogger(BOOTSTRAP_LOGGER)
    source.filters.insert(0, seen.note)
    try:
        with hear_bootstrap_failures():
            yield
    except KafkaError as e:
        raise KafkaConnectError(f"cannot use Kafka at {describe(kafka)}: {_cause(seen.error or e)}") from None
    finally:
        source.removeFilter(seen.note)
        logger.removeHandler(seen)


def _cause(error: BaseException) -> str:
    """The likely cause of a failed connection, in words an operator can act on."""
    from kafka import errors

    text = str(error)
    reason = (text if text.startswith(type(error).__name__) else f"{type(error).__name__}: {text}")[:300]
    if isinstance(error, errors.SaslAuthenticationFailedError):
        return (
            f"authentication failed ({reason}); check sasl_username, the password's source and sasl_mechanism"
        )
    if isinstance(error, errors.AuthorizationError):
        return f"not authorized ({reason}); the user needs the rights docs/security.md lists"
    if isinstance(error, ssl.SSLError):
        return (
            f"the TLS handshake failed ({reason}); check ssl_cafile, ssl_check_hostname and that the "
            "listener speaks security_protocol"
        )
    if isinstance(error, errors.KafkaTimeoutError):
        return f"no broker answered in time ({reason}); check bootstrap_servers and security_protocol"
    return f"{reason}; check bootstrap_servers and security_protocol"
