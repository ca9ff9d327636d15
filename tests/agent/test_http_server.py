"""The agent's HTTP server (aiohttp) on loopback: limits, deadline, slow clients, methods.

The page-cache handler here is a plain function standing in for a slow disk check (a real one
needs a cold segment on a real disk; tests/agent/test_pagecache_http.py covers that path)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry, Counter

from agent.exporters.http import AgentHttpServer, HttpLimits
from linkwatch.errors import ListenError


@pytest.fixture
def server() -> Iterator[AgentHttpServer]:
    registry = CollectorRegistry()
    Counter("linkwatch_test_things", "things", registry=registry).inc(3)
    release = threading.Event()

    def page_cache(query: str) -> tuple[int, dict[str, Any]]:
        if query == "slow":
            release.wait(5)
        return 200, {"query": query}

    s = AgentHttpServer(registry, page_cache=page_cache, limits=HttpLimits(request_timeout_s=0.5)).start()
    yield s
    release.set()
    s.close()


def request(server: AgentHttpServer, path: str, method: str = "GET", **kw: Any) -> tuple[int, bytes]:
    req = urllib.request.Request(f"http://127.0.0.1:{server.server_port}{path}", method=method, **kw)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def raw(server: AgentHttpServer, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.server_port), timeout=5) as s:
        s.sendall(data)
        return s.recv(4096)


def test_metrics_and_page_cache_answer_and_bind_loopback(server: AgentHttpServer) -> None:
    assert server.server_address is not None and server.server_address[0] == "127.0.0.1"
    status, body = request(server, "/metrics")
    assert status == 200 and b"linkwatch_test_things_total 3.0" in body
    status, body = request(server, "/page-cache?topic=a%26b&partition=1")
    assert status == 200 and orjson.loads(body) == {"query": "topic=a%26b&partition=1"}  # raw query


CASES = [
    # (what, request bytes, status code start)
    ("unknown path", b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", b"404"),
    ("POST to /metrics", b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", b"405"),
    (
        "POST to /page-cache",
        b"POST /page-cache HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
        b"405",
    ),
    (
        "header over 8 KB",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
        b"4",
    ),
    (
        "request line over 8 KB",
        b"GET /metrics?" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
        b"4",
    ),
    (
        "body over the limit",
        b"POST /page-cache HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n" + b"x" * 2000,
        b"4",
    ),
    (
        "bad Content-Length",
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
        b"400",
    ),
    ("not HTTP", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", b"400"),
]


@pytest.mark.parametrize(("what", "data", "status"), CASES, ids=[c[0] for c in CASES])
def test_bad_requests_get_an_answer(server: AgentHttpServer, what: str, data: bytes, status: bytes) -> None:
    answer = raw(server, data)
    assert answer.startswith(b"HTTP/1.") and answer.split(b" ", 2)[1].startswith(status), answer[:200]
    assert request(server, "/metrics")[0] == 200  # and the server goes on


def test_a_slow_handler_is_cut_at_the_deadline_and_others_go_on(server: AgentHttpServer) -> None:
    t = time.monotonic()
    status, body = request(server, "/page-cache?slow")
    assert status == 503 and orjson.loads(body)["error"] == "timeout"
    assert time.monotonic() - t < 3
    assert request(server, "/metrics")[0] == 200


def test_clients_trickling_headers_do_not_block_others(server: AgentHttpServer) -> None:
    slow = [socket.create_connection(("127.0.0.1", server.server_port), timeout=5) for _ in range(50)]
    try:
        for s in slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # never finished
        t = time.monotonic()
        for _ in range(5):
            assert request(server, "/metrics")[0] == 200
        assert time.monotonic() - t < 3
    finally:
        for s in slow:
            s.close()


def test_port_in_use_fails_at_start(taken_port: int) -> None:
    # Many times: a failed start once raced its own clean-up (about 2 % of starts raised
    # "Event loop is closed" instead of naming the port).
    for _ in range(100):
        with pytest.raises(
            ListenError, match=f"cannot listen on 127.0.0.1:{taken_port}: the address is already in use"
        ):
            AgentHttpServer(CollectorRegistry(), port=taken_port).start()


def test_scrapes_do_not_wait_behind_slow_page_cache_checks(server: AgentHttpServer) -> None:
    slow = [
        threading.Thread(target=request, args=(server, "/page-cache?slow"), daemon=True)
        for _ in range(server.limits.workers + 2)
    ]
    for t in slow:
        t.start()
    time.sleep(0.1)
    t0 = time.monotonic()
    assert request(server, "/metrics")[0] == 200
    assert time.monotonic() - t0 < 0.4  # before the deadline frees any worker
    for t in slow:
        t.join()
