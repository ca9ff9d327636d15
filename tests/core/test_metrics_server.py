"""The shared /metrics endpoint: a real server on loopback, its config section, its lifecycle."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Counter

from linkwatch.config import load_config
from linkwatch.errors import ConfigError, ListenError
from linkwatch.metrics_server import MetricsServer, MetricsServerConfig, Port, serve_metrics


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    Counter("linkwatch_test_things", "Things.", registry=registry).inc(3)
    return registry


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def test_serves_the_registry_on_loopback_then_frees_the_port() -> None:
    server = serve_metrics(MetricsServerConfig(port=0), _registry())
    assert isinstance(server, MetricsServer) and server.server_port
    try:
        assert "linkwatch_test_things_total 3.0" in _scrape(server.server_port)
        assert server.url == f"http://127.0.0.1:{server.server_port}/metrics"
    finally:
        server.close()
    server.close()  # idempotent
    with pytest.raises(OSError):
        _scrape(server.server_port)
    # The port is free again: a new server binds it.
    again = MetricsServer(_registry(), "127.0.0.1", server.server_port).start()
    again.close()


def test_disabled_starts_nothing() -> None:
    assert serve_metrics(MetricsServerConfig(enabled=False), _registry()) is None


def test_a_taken_port_is_an_error_not_a_silent_run(taken_port: int) -> None:
    with pytest.raises(
        ListenError, match=f"cannot listen on 127.0.0.1:{taken_port}: the address is already in use"
    ):
        serve_metrics(MetricsServerConfig(port=taken_port), _registry())


def test_other_servers_start_the_same_way() -> None:
    made: list[tuple[str, int]] = []

    class Recording(MetricsServer):
        def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
            made.append((host, port))
            super().__init__(registry, host, port)

    server = serve_metrics(MetricsServerConfig(host="127.0.0.1", port=0), _registry(), Recording)
    server.close()
    assert made == [("127.0.0.1", 0)]


class _ProcessMetrics(MetricsServerConfig):
    port: Port = 9999  # a process's own default, the only thing it changes


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("port: 70000\n", "port=70000"),
        ("port: -1\n", "port=-1"),
        ("enabled: maybe\n", "enabled='maybe'"),
        ("prot: 1\n", "prot: unknown key"),
    ],
)
def test_bad_section_names_key_and_value(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path, _ProcessMetrics)
    assert message in str(e.value)


def test_defaults_loopback_and_the_process_port() -> None:
    assert _ProcessMetrics().model_dump() == {"enabled": True, "host": "127.0.0.1", "port": 9999}
