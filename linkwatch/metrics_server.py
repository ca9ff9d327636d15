"""The ``/metrics`` endpoint of linkwatch's long-running processes: where it listens and its
lifecycle, written once for the agent, the lag collector, the probe and the consumer.

* :class:`MetricsServerConfig` — the ``enabled`` / ``host`` / ``port`` section of a process's
  config: loopback unless configured, port 0 for any free port (tests). A process subclasses
  it only to give its own default port (``port: Port = 9311``).
* :class:`MetricsServer` — ``prometheus_client``'s exposition server for one registry, on its
  own daemon thread: :meth:`~MetricsServer.start` binds (or raises the bind error, e.g. the port
  is taken) and returns once it listens; :meth:`~MetricsServer.close` stops it and frees the
  port, and may be called again or before ``start``.
* :func:`serve_metrics` — start a server from a config section; ``None`` when it is disabled.
  Any server with the same three members (:class:`MetricsEndpoint`) can be started this way:
  the agent's, which also serves ``/page-cache``, is one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from prometheus_client import CollectorRegistry, start_http_server
from pydantic import Field

from linkwatch.config import StrictModel
from linkwatch.errors import ListenError

#: A TCP port to listen on; 0 lets the system pick a free one (read it back from the server).
Port = Annotated[int, Field(ge=0, le=65535)]


class MetricsServerConfig(StrictModel):
    enabled: bool = True
    host: str = "127.0.0.1"  # nothing listens beyond loopback unless configured
    port: Port = 9309


class MetricsEndpoint(Protocol):
    """What :func:`serve_metrics` needs of a server: ``start`` binds and returns the server,
    ``close`` stops it (idempotent), ``server_port`` is the bound port once started."""

    server_port: int | None

    def start(self) -> Any: ...
    def close(self) -> None: ...


class MetricsServer:
    """``registry`` in the Prometheus text format on ``host:port``: every path but
    ``/favicon.ico`` answers with it, as ``prometheus_client`` serves it."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        self.registry, self.host, self.port = registry, host, port
        self.server_port: int | None = None  # as bound, once started
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self) -> MetricsServer:
        try:
            self._server, self._thread = start_http_server(self.port, addr=self.host, registry=self.registry)
        except OSError as e:
            raise ListenError("/metrics", self.host, self.port, e) from None
        self.server_port = int(self._server.server_address[1])
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server_port}/metrics"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None


def serve_metrics(
    cfg: MetricsServerConfig,
    registry: CollectorRegistry,
    server: Callable[[CollectorRegistry, str, int], MetricsEndpoint] = MetricsServer,
) -> Any:
    """``server(registry, cfg.host, cfg.port)``, started, or ``None`` when ``cfg.enabled`` is
    false. Bind errors propagate: a process told to serve metrics must not run without them."""
    if not cfg.enabled:
        return None
    return server(registry, cfg.host, cfg.port).start()
