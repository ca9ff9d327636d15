"""The agent's HTTP server: ``GET /metrics`` and ``GET /page-cache`` on aiohttp.

aiohttp enforces what a hand-written ``http.server`` left to us: request line and header sizes
(over the limit: 400/431 before any handler runs), the body size (``client_max_size``; neither
endpoint takes a body), the listen backlog, and idle keep-alive connections are closed. A
connection is a coroutine, not a thread, so clients that send slowly hold a socket, never a
worker. On top of that, every request has a whole-request deadline (``request_timeout_s``: 503
past it) and the work of both endpoints runs in a small bounded thread pool, so a scrape that
reads ``/proc`` or a page-cache check that maps a segment never blocks the event loop, and
scrapes have a thread of their own, so they never wait behind page-cache checks.

The server runs on its own thread and event loop; :meth:`AgentHttpServer.start` returns once it
listens (loopback unless configured) and :meth:`AgentHttpServer.close` stops it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from linkwatch.errors import ListenError

JSON = "application/json"


@dataclass(frozen=True)
class HttpLimits:
    request_timeout_s: float = 10.0  # whole request, handler included
    keepalive_timeout_s: float = 15.0  # idle keep-alive connections are closed after this
    max_line_bytes: int = 8190  # request line
    max_field_bytes: int = 8190  # one header
    max_body_bytes: int = 1024  # no endpoint takes a body
    backlog: int = 64
    workers: int = 4  # threads doing page-cache checks (scrapes have their own thread)


class AgentHttpServer:
    """``/metrics`` from ``registry``; ``/page-cache`` from ``page_cache(query) -> (status, body)``
    when given (else 404 like any other path)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str = "127.0.0.1",
        port: int = 0,
        page_cache: Callable[[str], tuple[int, dict[str, Any]]] | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        self.registry = registry
        self.host, self.port = host, port
        self.page_cache = page_cache
        self.limits = limits or HttpLimits()
        self.server_address: tuple[str, int] | None = None  # as bound (host, port)
        self.server_port: int | None = None
        self._pool = ThreadPoolExecutor(self.limits.workers, thread_name_prefix="agent-http-work")
        # Scrapes never wait behind slow page-cache checks.
        self._scrape_pool = ThreadPoolExecutor(1, thread_name_prefix="agent-http-scrape")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> AgentHttpServer:
        """Listen, or raise the bind error (e.g. the port is taken)."""
        started: list[BaseException | None] = []
        ready = threading.Event()

        def run() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self._listen())
                started.append(None)
            except BaseException as e:  # reported to start()'s caller
                started.append(e)
                if self._runner is not None:  # set up before the bind failed: free what it holds
                    loop.run_until_complete(self._runner.cleanup())
                loop.close()
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup() if self._runner else asyncio.sleep(0))
            loop.close()

        self._thread = threading.Thread(target=run, name="agent-http", daemon=True)
        self._thread.start()
        ready.wait()
        if started[0] is not None:
            # The thread ends by itself after a failed start: wait for it, so close() never asks
            # its loop (closed, or closing) to stop (a race that raised "Event loop is closed").
            self._thread.join(timeout=10)
            self.close()
            if isinstance(started[0], OSError):
                raise ListenError("the agent's /metrics", self.host, self.port, started[0]) from None
            raise started[0]
        return self

    async def _listen(self) -> None:
        lim = self.limits
        app = web.Application(client_max_size=lim.max_body_bytes, middlewares=[self._deadline])
        app.router.add_route("*", "/metrics", self._metrics)
        app.router.add_route("*", "/page-cache", self._page_cache)
        self._runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log=None,
            keepalive_timeout=lim.keepalive_timeout_s,
            max_line_size=lim.max_line_bytes,
            max_field_size=lim.max_field_bytes,
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=lim.backlog)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.server_address, self.server_port = (host, port), port

    def close(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None and thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        for pool in (self._pool, self._scrape_pool):
            pool.shutdown(wait=False, cancel_futures=True)
        self._thread = None

    # -- handlers ----------------------------------------------------------------------------
    @web.middleware
    async def _deadline(self, request: web.Request, handler: Callable[..., Any]) -> web.StreamResponse:
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                return await handler(request)
        except TimeoutError:
            return _json(503, "timeout", f"not answered within {self.limits.request_timeout_s} s")

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        if request.method != "GET":
            return _json(405, "method_not_allowed", "use GET")
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.get_running_loop().run_in_executor(self._scrape_pool, encoder, self.registry)
        response = web.Response(body=body, headers={"Content-Type": content_type})
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            response.enable_compression()
        return response

    async def _page_cache(self, request: web.Request) -> web.StreamResponse:
        if self.page_cache is None:
            return _json(404, "not_found", "the page-cache endpoint is not enabled")
        if request.method != "GET":
            return _json(405, "method_not_allowed", "use GET")
        loop = asyncio.get_running_loop()
        status, body = await loop.run_in_executor(
            self._pool, self.page_cache, request.rel_url.raw_query_string
        )
        return web.Response(status=status, body=orjson.dumps(body), content_type=JSON)


def _json(status: int, error: str, message: str) -> web.Response:
    return web.Response(
        status=status, body=orjson.dumps({"error": error, "message": message}), content_type=JSON
    )
