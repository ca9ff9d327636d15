"""Subcommands of the ``linkwatch`` CLI, one module each, each exposing ``app``."""

import signal
import threading
from collections.abc import Callable
from typing import Protocol

import typer

from linkwatch.metrics_server import MetricsServerConfig


def stop_on_signals() -> threading.Event:
    """An event set on SIGTERM or SIGINT: a long-running command's loop ends on it and then
    cleans up (instead of being killed mid-step)."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    return stop


class Service(Protocol):
    """What :func:`run_service` needs: ``serve_metrics`` starts /metrics and returns the bound
    port; ``close`` releases everything, also after a failed start."""

    def serve_metrics(self) -> int: ...
    def close(self) -> None: ...


def run_service(
    service: Service, metrics: MetricsServerConfig, loop: Callable[[threading.Event], None]
) -> None:
    """The body of a long-running command (``lag run``, ``probe run``): serve /metrics when
    ``metrics.enabled`` (its URL echoed), run ``loop(stop)`` until SIGTERM or SIGINT sets
    ``stop``, and close the service whatever happens."""
    stop = stop_on_signals()
    try:
        if metrics.enabled:
            port = service.serve_metrics()
            typer.echo(f"metrics on http://{metrics.host}:{port}/metrics")
        loop(stop)
    finally:
        service.close()
