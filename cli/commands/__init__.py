"""Subcommands of the ``linkwatch`` CLI, one module each, each exposing ``app``."""

import signal
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

import typer
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from linkwatch.kafka_client import KafkaClientConfig, client_config, security_kwargs
from linkwatch.metrics_server import MetricsServerConfig, serve_metrics
from linkwatch.reach import KafkaReach, connect

ConfigOnlyOpt = typer.Option(
    False,
    "--config-only",
    help="Only validate the config; try nothing it names (no connection, no file read).",
)


ShowOpt = typer.Option(
    False, "--show", help="Also print the config with its defaults filled in (secrets hidden)."
)


def run_checks(probes: list[Callable[[], object]], closing: Callable[[], None] = lambda: None) -> None:
    """The body of every ``check``: run ``probes`` (:mod:`linkwatch.preflight`), one ✓/✗ line
    each, then exit 0 when all passed, else 1."""
    from linkwatch import preflight

    try:
        lines = preflight.run(probes)  # type: ignore[arg-type]
    finally:
        closing()
    raise typer.Exit(preflight.report(lines, typer.echo))


def check_cluster_config(
    valid: str,
    kafka: KafkaClientConfig,
    topics: dict[str, str],
    *,
    creates: tuple[str, ...] = (),
    more: tuple[Callable[[], object], ...] = (),
    config_only: bool = False,
    show: BaseModel | None = None,
) -> None:
    """The ``check`` of a process that works on a cluster: ``✓ valid`` for the config already
    loaded, its dump when ``show`` is given, then (unless ``config_only``) the cluster of
    ``kafka`` answering, the ``topics`` (config key -> topic; keys in ``creates`` are topics
    the process creates itself) and the ``more`` probes, through :func:`run_checks`."""
    from linkwatch import preflight

    typer.echo(f"✓ {valid}")
    if show is not None:
        typer.echo(show.model_dump_json(indent=2))
    if config_only:
        return
    cluster = preflight.KafkaProbes(kafka)
    run_checks([cluster.answers, lambda: cluster.topics(topics, creates), *more], cluster.close)


def stop_on_signals() -> threading.Event:
    """An event set on SIGTERM or SIGINT: a long-running command's loop ends on it and then
    cleans up (instead of being killed mid-step)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


class Service(Protocol):
    """What :func:`run_service` needs of a service: ``close`` releases everything."""

    def close(self) -> None: ...


S = TypeVar("S", bound=Service)


def run_service(
    build: Callable[[CollectorRegistry], S],
    metrics: MetricsServerConfig,
    kafka: KafkaClientConfig | str,
    process: str,
    loop: Callable[[S, threading.Event, KafkaReach], None],
) -> None:
    """The body of a long-running command (``lag run``, ``probe run``): serve /metrics when
    ``metrics.enabled`` (its URL echoed; a port that cannot be bound stops here, before any
    wait), build the service once the cluster of ``kafka`` answers (retried with back-off,
    said once, ``linkwatch_kafka_up`` meanwhile), run ``loop(service, stop, reach)`` until
    SIGTERM or SIGINT sets ``stop`` (``reach`` keeps those metrics for a cluster lost later),
    and close everything whatever happens."""
    stop = stop_on_signals()
    registry = CollectorRegistry()
    reach = KafkaReach(process, registry)
    server = serve_metrics(metrics, registry)
    try:
        if server is not None:
            typer.echo(f"metrics on {server.url}")
        cfg = client_config(kafka)
        key = "kafka.bootstrap_servers"
        options = security_kwargs(cfg)
        service = connect(lambda: build(registry), cfg.servers, reach, stop, key=key, client_options=options)
        if service is None:
            return
        try:
            loop(service, stop, reach)
        finally:
            service.close()
    finally:
        if server is not None:
            server.close()
