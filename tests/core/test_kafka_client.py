"""The shared ``kafka:`` section: validation naming the key, what kafka-python and Spark get,
secrets kept out of messages, and the old spellings moved with one warning line."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from lag.runner import LagConfig
from linkwatch.config import StrictModel, load_config
from linkwatch.errors import ConfigError, KafkaConnectError
from linkwatch.kafka_client import (
    KafkaClientConfig,
    describe,
    explained_connect_errors,
    kafka_python_kwargs,
    spark_kafka_options,
)

SECRET = "s3cr3t-pa55"
SCRAM = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_username": "lw"}


class Component(StrictModel):
    kafka: KafkaClientConfig = KafkaClientConfig()


def _load(tmp_path: Path, text: str, model: type[BaseModel] = Component) -> Any:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(path, model, env_prefix="LWTEST_")


# (id, the kafka section, text the error must contain)
BAD = [
    ("unknown-protocol", "security_protocol: TLS", "kafka.security_protocol='TLS'"),
    ("unknown-mechanism", "security_protocol: SASL_SSL\n  sasl_mechanism: GSSAPI", "kafka.sasl_mechanism"),
    (
        "sasl-without-mechanism",
        "security_protocol: SASL_SSL\n  sasl_username: u\n  sasl_password: p",
        "kafka.sasl_mechanism: required with security_protocol SASL_SSL",
    ),
    (
        "sasl-without-password",
        "security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n  sasl_username: u",
        "kafka.sasl_password: required with SASL_PLAINTEXT",
    ),
    (
        "sasl-keys-on-plaintext",
        "sasl_mechanism: PLAIN",
        "kafka: security_protocol=PLAINTEXT: sasl_* keys need SASL_SSL",
    ),
    (
        "ssl-files-on-plaintext",
        "ssl_cafile: /etc/ca.pem",
        "kafka: security_protocol=PLAINTEXT: ssl_* files need SSL",
    ),
    (
        "cert-without-key",
        "security_protocol: SSL\n  ssl_certfile: /etc/c.pem",
        "kafka.ssl_keyfile: ssl_certfile and ssl_keyfile go together",
    ),
    ("cafile-a-directory", "security_protocol: SSL\n  ssl_cafile: /", "kafka.ssl_cafile"),
    ("typo", "bootstrap_server: b:9092", "kafka.bootstrap_server: unknown key"),
    ("bad-prefix", "client_id_prefix: 'a b'", "kafka.client_id_prefix"),
]


@pytest.mark.parametrize(("section", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_section_stops_loading_naming_the_key(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, f"kafka:\n  {section}\n")
    assert message in str(e.value)


def test_plaintext_gives_servers_and_client_id_only() -> None:
    kw = kafka_python_kwargs("a:9092, b:9092", "lag")
    assert kw == {
        "bootstrap_servers": ["a:9092", "b:9092"],
        "client_id": "linkwatch-lag",
        "security_protocol": "PLAINTEXT",
    }
    assert spark_kafka_options("a:9092") == {
        "kafka.bootstrap.servers": "a:9092",
        "kafka.security.protocol": "PLAINTEXT",
    }


def test_sasl_ssl_from_a_password_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text(SECRET + "\n")
    (tmp_path / "ca.pem").write_text("pem")
    cfg = KafkaClientConfig(
        bootstrap_servers="k:9093", **SCRAM, sasl_password_file=tmp_path / "pw", ssl_cafile=tmp_path / "ca.pem",
        client_id_prefix="mon",
    )  # fmt: skip
    assert kafka_python_kwargs(cfg, "probe") == {
        "bootstrap_servers": ["k:9093"],
        "client_id": "mon-probe",
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "lw",
        "sasl_plain_password": SECRET,
        "ssl_check_hostname": True,
        "ssl_cafile": str(tmp_path / "ca.pem"),
    }
    assert spark_kafka_options(cfg) == {
        "kafka.bootstrap.servers": "k:9093",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="lw" password="{SECRET}";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(tmp_path / "ca.pem"),
    }


def test_password_from_the_environment_and_jaas_quoting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LW_KAFKA_PW", 'a"b\\c')
    cfg = KafkaClientConfig(
        bootstrap_servers="k:1", **{**SCRAM, "sasl_mechanism": "PLAIN"}, sasl_password_env="LW_KAFKA_PW"
    )
    assert kafka_python_kwargs(cfg, "x")["sasl_plain_password"] == 'a"b\\c'
    jaas = spark_kafka_options(cfg)["kafka.sasl.jaas.config"]
    assert (
        jaas
        == 'org.apache.kafka.common.security.plain.PlainLoginModule required username="lw" password="a\\"b\\\\c";'
    )


def test_mutual_tls_and_no_hostname_check_reach_spark(tmp_path: Path) -> None:
    for name in ("c.pem", "k.pem"):
        (tmp_path / name).write_text(f"-----{name}-----\n")
    cfg = KafkaClientConfig(
        bootstrap_servers="k:1", security_protocol="SSL", ssl_certfile=tmp_path / "c.pem",
        ssl_keyfile=tmp_path / "k.pem", ssl_check_hostname=False,
    )  # fmt: skip
    opts = spark_kafka_options(cfg)
    assert opts["kafka.ssl.keystore.type"] == "PEM"
    assert opts["kafka.ssl.keystore.certificate.chain"] == "-----c.pem-----\n"
    assert opts["kafka.ssl.keystore.key"] == "-----k.pem-----\n"
    assert opts["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert kafka_python_kwargs(cfg, "x")["ssl_check_hostname"] is False


def test_an_unreadable_secret_names_its_key_when_a_client_is_built(tmp_path: Path) -> None:
    cfg = KafkaClientConfig(bootstrap_servers="k:1", **SCRAM, sasl_password_file=tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"kafka: sasl_password_file: cannot read .*missing"):
        kafka_python_kwargs(cfg, "x")
    unset = KafkaClientConfig(bootstrap_servers="k:1", **SCRAM, sasl_password_env="LW_SURELY_UNSET_VAR")
    with pytest.raises(
        ConfigError, match="sasl_password_env: the environment variable LW_SURELY_UNSET_VAR is not set"
    ):
        spark_kafka_options(unset)


def test_secrets_never_appear_in_errors_reprs_or_descriptions(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, f"kafka:\n  sasl_password: {SECRET}\n  security_protocol: PLAINTEXT\n")
    assert SECRET not in str(e.value)
    cfg = KafkaClientConfig(bootstrap_servers="k:1", **SCRAM, sasl_password=SECRET)
    assert SECRET not in repr(cfg) and SECRET not in str(cfg)
    assert SECRET not in cfg.model_dump_json()  # what `lag check` / `probe check` print
    assert describe(cfg) == "k:1 (SASL_SSL, SCRAM-SHA-512 as lw)"


def test_the_admin_clients_debug_log_of_its_configuration_hides_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kw = kafka_python_kwargs(KafkaClientConfig(bootstrap_servers="k:1", **SCRAM, sasl_password=SECRET), "x")
    with caplog.at_level(logging.DEBUG, logger="kafka.admin.client"):
        # what KafkaAdminClient.__init__ logs (kafka-python 3.0)
        logging.getLogger("kafka.admin.client").debug("Starting KafkaAdminClient with configuration: %s", kw)
    assert "sasl_plain_username" in caplog.text and SECRET not in caplog.text


def test_old_spellings_move_with_one_warning_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="linkwatch.config"):
        cfg = _load(tmp_path, "bootstrap_servers: old:9092\n", LagConfig)
    assert cfg.kafka.bootstrap_servers == "old:9092"
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "config: bootstrap_servers is deprecated, use kafka.bootstrap_servers (the old spelling goes in a later release)"
    ]
    with pytest.raises(
        ConfigError, match=r"bootstrap_servers is the deprecated spelling of kafka\.bootstrap_servers"
    ):
        _load(tmp_path, "bootstrap_servers: a:1\nkafka:\n  bootstrap_servers: b:1\n", LagConfig)


@pytest.mark.parametrize(
    ("model", "old", "read"),
    [
        ("analyzer", "bootstrap: a:1\nprometheus: {listen: 0.0.0.0, port: 1}\n", lambda c: (c.kafka.bootstrap_servers, c.metrics.host, c.metrics.port)),
        ("agent", "broker_id: 1\nprometheus: {port: 1}\ncapture: {bootstrap_servers: a:1}\n", lambda c: (c.capture.kafka.bootstrap_servers, c.metrics.port)),
        ("lag", "bootstrap_servers: a:1\ncold_read: {bootstrap_servers: b:1}\n", lambda c: (c.kafka.bootstrap_servers, c.cold_read.kafka.bootstrap_servers)),
        ("probe", "bootstrap_servers: a:1\n", lambda c: (c.kafka.bootstrap_servers,)),
        ("remediation", "bootstrap_servers: a:1\n", lambda c: (c.kafka.bootstrap_servers,)),
        ("consumer", "bootstrap_servers: a:1\n", lambda c: (c.kafka.bootstrap_servers,)),
    ],
)  # fmt: skip
def test_every_components_old_spelling_still_loads(tmp_path: Path, model: str, old: str, read: Any) -> None:
    from agent.config import AgentConfig
    from analyzer.service import AnalyzerConfig
    from consumer.config import ConsumerConfig
    from probe.config import ProbeConfig
    from remediation.config import RemediatorConfig

    models = {
        "analyzer": AnalyzerConfig, "agent": AgentConfig, "lag": LagConfig, "probe": ProbeConfig,
        "remediation": RemediatorConfig, "consumer": ConsumerConfig,
    }  # fmt: skip
    got = read(_load(tmp_path, old, models[model]))
    assert got[0] == "a:1"
    expected = {"analyzer": ("a:1", "0.0.0.0", 1), "agent": ("a:1", 1), "lag": ("a:1", "b:1")}
    assert got == expected.get(model, ("a:1",))


def test_the_env_override_of_a_password_is_taken_verbatim(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LWTEST_KAFKA__SASL_PASSWORD", "123")  # a YAML int, were it parsed
    cfg = _load(
        tmp_path, "kafka:\n  security_protocol: SASL_PLAINTEXT\n  sasl_mechanism: PLAIN\n  sasl_username: u\n"
    )
    assert cfg.kafka.password() == "123"


def _failed_bootstrap(logged: BaseException) -> str:
    """The message of a bootstrap that logged ``logged`` (as kafka-python's manager does for
    each failed attempt) and then timed out."""
    from kafka.errors import KafkaTimeoutError

    cfg = KafkaClientConfig(bootstrap_servers="k:9093", **SCRAM, sasl_password=SECRET)
    with pytest.raises(KafkaConnectError) as e, explained_connect_errors(cfg):
        logging.getLogger("kafka.net.manager").warning("Bootstrap connection to %s failed: %s", "b-0", logged)
        # the broker then closes the connection of a client that failed to authenticate
        logging.getLogger("kafka.net.manager").warning(
            "Bootstrap connection to %s failed: %s", "b-0", OSError("gone")
        )
        raise KafkaTimeoutError("Unable to bootstrap from ['k:9093']")
    return str(e.value)


def _logging_state() -> str:
    """What decides whether kafka-python's records reach a handler: said when a test fails."""
    names = ("kafka", "kafka.net", "kafka.net.manager")
    loggers = {n: logging.getLogger(n) for n in names}
    state = {
        n: (lg.level, lg.disabled, lg.propagate, [type(h).__name__ for h in lg.handlers])
        for n, lg in loggers.items()
    }
    return f"disable={logging.root.manager.disable} {state} threads={[t.name for t in threading.enumerate()]}"


@pytest.mark.parametrize(
    ("logged", "cause"),
    [
        ("sasl", "authentication failed (SaslAuthenticationFailedError"),
        ("tls", "the TLS handshake failed (SSLCertVerificationError"),
        ("refused", "OSError: gone; check bootstrap_servers"),
    ],
)
def test_a_cluster_that_cannot_be_used_is_one_line_naming_the_cause(logged: str, cause: str) -> None:
    import ssl

    from kafka.errors import SaslAuthenticationFailedError

    errors = {
        "sasl": SaslAuthenticationFailedError("invalid credentials with SASL mechanism SCRAM-SHA-512"),
        "tls": ssl.SSLCertVerificationError("certificate verify failed"),
        "refused": ConnectionRefusedError("refused"),
    }
    message = _failed_bootstrap(errors[logged])
    assert message.startswith("cannot use Kafka at k:9093 (SASL_SSL, SCRAM-SHA-512 as lw): ")
    assert cause in message, _logging_state()
    assert SECRET not in message and "\n" not in message


def test_nothing_listening_is_explained_within_the_bootstrap_timeout() -> None:
    from kafka import KafkaAdminClient

    with (
        pytest.raises(
            KafkaConnectError, match=r"cannot use Kafka at 127\.0\.0\.1:1 \(PLAINTEXT\): no broker answered"
        ),
        explained_connect_errors("127.0.0.1:1"),
    ):
        KafkaAdminClient(**kafka_python_kwargs("127.0.0.1:1", "test"), bootstrap_timeout_ms=1000)


def test_another_parts_section_is_taken_by_the_consumer_and_the_analyzer() -> None:
    from analyzer.service import AnalyzerConfig
    from consumer.config import ConsumerConfig
    from probe.config import ProbeConfig

    probe = ProbeConfig(kafka={"bootstrap_servers": "k:9093", **SCRAM, "sasl_password": SECRET})
    consumer = ConsumerConfig(kafka=probe.kafka)  # what the probe's read-back consumer gets
    assert consumer.kafka.password() == SECRET and consumer.kafka.security_protocol == "SASL_SSL"
    assert AnalyzerConfig(kafka=KafkaClientConfig(bootstrap_servers="m:9092")).kafka.servers == ["m:9092"]


def test_the_cause_is_kept_while_another_check_holds_the_client_quiet() -> None:
    """reach.quiet_client (a check in another thread) sets the "kafka" logger's level: the
    failed attempts are still seen, and the one line still names the cause."""
    import ssl

    from linkwatch.reach import quiet_client

    with quiet_client():
        message = _failed_bootstrap(ssl.SSLCertVerificationError("certificate verify failed"))
    assert "the TLS handshake failed (SSLCertVerificationError" in message, _logging_state()
    assert logging.getLogger("kafka.net.manager").level == logging.NOTSET  # put back as it was


def test_overlapping_holds_put_the_level_back_whatever_order_they_leave_in() -> None:
    """Two checks in two threads overlap (the first leaves first): the "kafka" logger is quiet
    while either is inside and back at its own level after both; a connect meanwhile hears its
    failures. A plain save/restore per block left the logger at CRITICAL for good."""
    from linkwatch.client_logs import hear_bootstrap_failures, quiet_kafka

    kafka_logger = logging.getLogger("kafka")
    before = kafka_logger.level
    first, second = quiet_kafka(), quiet_kafka()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert kafka_logger.level == logging.CRITICAL  # the second check is still inside
    with hear_bootstrap_failures():
        assert logging.getLogger("kafka.net.manager").isEnabledFor(logging.WARNING)
    second.__exit__(None, None, None)
    assert kafka_logger.level == before and quiet_kafka.holders == 0
    assert logging.getLogger("kafka.net.manager").level == logging.NOTSET


def test_the_cause_is_seen_under_the_consumers_rate_limit_on_retry_logs() -> None:
    """consumer.log_limit puts a rate limit on kafka-python's retry loggers (a repeat of one
    message within 10 s is dropped): every connect still names its own cause, though the
    same message was logged a moment before. (In the whole suite, an async-fetch consumer's
    test installed it first and two of the three cases above lost their cause.)"""
    import ssl

    from consumer.log_limit import RateLimitFilter

    limit = RateLimitFilter(60.0)
    source = logging.getLogger("kafka.net.manager")
    passed: list[logging.LogRecord] = []
    counter = logging.Handler(logging.WARNING)
    counter.emit = passed.append  # type: ignore[method-assign]
    source.addFilter(limit)
    source.addHandler(counter)
    try:
        first = _failed_bootstrap(ConnectionRefusedError("refused"))
        second = _failed_bootstrap(ssl.SSLCertVerificationError("certificate verify failed"))
    finally:
        source.removeFilter(limit)
        source.removeHandler(counter)
    assert "OSError: gone" in first
    assert "the TLS handshake failed (SSLCertVerificationError" in second
    # The repeats were dropped from the log all the same (by this limit, or by the consumer's
    # own when an earlier test in the process installed it): 4 logged, at most 1 let through.
    assert len(passed) <= 1
    assert not any(getattr(f, "__self__", None) for f in source.filters)  # the watcher removed


def test_a_failed_admin_client_leaves_no_thread_behind() -> None:
    """kafka-python starts an admin client's IO thread before it bootstraps and leaves it
    running when the bootstrap fails: a retry loop over an outage leaked one per attempt."""
    import threading

    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from linkwatch.kafka_client import admin_client

    def io_threads() -> int:
        return sum(t.name == "kafka-io-linkwatch-leak-test" for t in threading.enumerate())

    for _ in range(3):
        with pytest.raises(KafkaError):
            admin_client(
                bootstrap_servers="127.0.0.1:1", client_id="linkwatch-leak-test", bootstrap_timeout_ms=300
            )
    assert io_threads() == 0
    # kafka-python's own client, as every one was built before, leaves its thread behind (the
    # test would fail without admin_client).
    with pytest.raises(KafkaError):
        KafkaAdminClient(
            bootstrap_servers="127.0.0.1:1", client_id="linkwatch-leak-test", bootstrap_timeout_ms=300
        )
    assert io_threads() == 1
