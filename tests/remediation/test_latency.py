"""The latency signal against a real HTTP server on loopback speaking Prometheus' query API."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar
from urllib.parse import parse_qs, urlparse

import pytest

from remediation.latency import DEFAULT_QUERY, PrometheusLatency


class _Prometheus(BaseHTTPRequestHandler):
    answer: bytes = b""
    queries: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.queries.append(parse_qs(urlparse(self.path).query)["query"][0])
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.answer)

    def log_message(self, *a: object) -> None:
        pass


@pytest.fixture
def prom() -> Iterator[tuple[str, type[_Prometheus]]]:
    handler = type("H", (_Prometheus,), {"queries": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()


def _vector(value: str) -> bytes:
    return json.dumps(
        {
            "status": "success",
            "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, value]}]},
        }
    ).encode()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (_vector("0.25"), 250.0),
        (_vector("NaN"), None),  # no Produce requests in the range
        (json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode(), None),
        (b"not json", None),
    ],
)
def test_reads_p99_ms_or_unknown(prom, answer: bytes, expected: float | None) -> None:
    url, handler = prom
    handler.answer = answer
    signal = PrometheusLatency(url)
    assert signal() == expected
    assert handler.queries == [DEFAULT_QUERY]
    assert signal.failures_total == (1 if answer == b"not json" or b'"result": []' in answer else 0)


def test_unreachable_is_unknown() -> None:
    signal = PrometheusLatency("http://127.0.0.1:9", timeout_s=0.5)
    assert signal() is None and signal.failures_total == 1
