"""The Alertmanager webhook receiver behind ``linkwatch alerts serve``, served by aiohttp.

``POST <path>`` with ``Authorization: Bearer <token>`` and an Alertmanager v4 JSON body.
Steps: authenticate (constant-time compare) → bound the body → validate → per alert: audit,
then mark as seen (fingerprint, status, startsAt; bounded LRU), then enqueue → 200. A single
dispatcher thread hands each event to every hook in order; a failing hook is logged and
audited, the others go on. ``GET /healthz`` answers without a token.

Answers: 401 bad/missing token, 404 unknown path, 405 other methods, 411 no Content-Length,
413 body too large, 415 not JSON, 400 malformed message (``{"error": reason, "detail": ...}``),
408 body not received within ``request_timeout_s``, 503 queue full, audit log not writable,
too many requests being processed or too many open connections (Alertmanager retries),
500 for a bug (logged; the request still gets an answer).

Bounds, all in :class:`~alerts.config.ReceiverConfig`: ``max_connections`` open connections
(more are answered 503 and closed when accepted), the listen ``backlog``, request line and
headers (aiohttp's limits), ``max_body_bytes``, and ``request_timeout_s``: the headers must
arrive within it of the connection opening (or of the previous answer), the body within it of
the headers. A client that trickles its body holds a connection, never a processing slot: the
``max_concurrent_requests`` slots are taken only once the whole body is in.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import json
import logging
import queue
import sys
import threading
from collections import Counter
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from alerts.audit import AuditLog
from alerts.config import ReceiverConfig
from alerts.dedup import DedupCache, event_key
from alerts.hooks import Hook, HookResult, load_hook
from alerts.hooks.base import AlertEvent
from alerts.hooks.findings import FiringAlerts, HookNotifier, finding_from_alert
from alerts.payload import PayloadError, parse_message
from linkwatch.errors import ListenError
from linkwatch.records import Finding

log = logging.getLogger("linkwatch.alerts")

LINGER_S = 1.0


PIPELINE_TICK_S = 1.0  # how often held CHECK_LATER findings are looked at when no alert arrives


class AlertReceiver:
    """Owns the HTTP server, the dedup cache, the audit log, the queue and the hooks.

    The HTTP server runs on its own event loop in thread ``alerts-http``; validation, audit
    and enqueueing run on a pool of ``max_concurrent_requests`` threads (the audit write is
    blocking file I/O); hooks run on thread ``alerts-dispatch``.
    """

    def __init__(self, config: ReceiverConfig, hooks: list[Hook] | None = None) -> None:
        self.config = config
        self._token = config.resolved_token()
        self.hooks = hooks if hooks is not None else [load_hook(h.type, h.options) for h in config.hooks]
        self.audit = AuditLog(config.audit_log, config.audit_max_bytes)
        self.dedup = DedupCache(config.dedup_entries)
        self.queue: queue.Queue[AlertEvent | None] = queue.Queue(maxsize=config.queue_size)
        self.stats: Counter[str] = Counter()
        self._admit = threading.Lock()
        self._busy = 0  # requests being processed; only touched on the event loop
        self._pool = concurrent.futures.ThreadPoolExecutor(
            config.max_concurrent_requests, thread_name_prefix="alerts-accept"
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._threads: list[threading.Thread] = []
        self.pipeline = None
        self.firing = FiringAlerts(max_findings=config.dedup_entries)
        if config.remediation is not None:
            from findings.pipeline import build_pipeline

            self.pipeline = build_pipeline(config.remediation, [HookNotifier(h) for h in self.hooks])

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}{self.config.path}"

    def start(self) -> AlertReceiver:
        """Listen (errors such as a port in use are raised here) and start the dispatcher."""
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._listen())
        except OSError as e:
            loop.close()
            raise ListenError("the alerts receiver", self.config.host, self.config.port, e) from None
        except BaseException:
            loop.close()
            raise
        self._loop = loop
        threads = (("alerts-http", loop.run_forever), ("alerts-dispatch", self._dispatch))
        for name, target in threads:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("alerts receiver listening on %s", self.url)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None:
            done = asyncio.run_coroutine_threadsafe(self._close(timeout_s), self._loop)
            try:
                done.result(timeout_s + 1)
            except Exception:
                log.exception("alerts receiver did not shut down cleanly")
            self._loop.call_soon_threadsafe(self._loop.stop)
        self.queue.put(None)
        for t in self._threads:
            t.join(timeout_s)
        if self._loop is not None and not self._loop.is_running():
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for hook in self.hooks:
            try:
                hook.close()
            except Exception:
                log.exception("hook %s failed to close", hook.name)

    def __enter__(self) -> AlertReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- HTTP ---------------------------------------------------------------------------
    async def _listen(self) -> None:
        cfg = self.config
        app = web.Application(client_max_size=cfg.max_body_bytes)
        # One catch-all route: every answer, 404 and 405 included, is this receiver's JSON.
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            shutdown_timeout=1.0,
            # An idle connection, and one whose request line and headers have not all
            # arrived, is closed this long after it opened or after its previous answer.
            keepalive_timeout=cfg.request_timeout_s,
            # After an early answer (413, 408, ...) the unread rest of a body is drained for
            # at most this long before the connection closes (aiohttp's default is 10 s).
            lingering_time=LINGER_S,
            logger=_HttpErrorLog(self.stats),
        )
        await self._runner.setup()
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            self._protocol, cfg.host, cfg.port, backlog=cfg.backlog, reuse_address=True
        )

    def _protocol(self) -> asyncio.BaseProtocol:
        """aiohttp's connection handler, or a 503-and-close once ``max_connections`` are open.

        Counted when a connection is accepted: connections accepted in one burst may exceed
        the limit by that burst (at most ``backlog``).
        """
        assert self._runner is not None and self._runner.server is not None
        if len(self._runner.server.connections) >= self.config.max_connections:
            self.stats["rejected_connections"] += 1
            return _Refuse()
        return self._runner.server()

    async def _close(self, timeout_s: float) -> None:
        if self._server is not None:
            self._server.close()
        if self._runner is not None:
            await asyncio.wait_for(self._runner.cleanup(), timeout_s)
        # Connections still open after the runner's grace time are cut off here.
        rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in rest:
            t.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    async def _handle(self, request: web.Request) -> web.Response:
        try:
            status, answer = await self._route(request)
        except Exception as e:  # a bug: the client still gets an answer
            log.exception("alerts receiver failed on %s %s", request.method, request.path[:100])
            self.stats["errors"] += 1
            status, answer = 500, {"error": "internal", "detail": type(e).__name__}
        return _json(status, answer)

    async def _route(self, request: web.Request) -> tuple[int, dict[str, Any]]:
        cfg = self.config
        if request.path == "/healthz" and request.method in ("GET", "HEAD"):
            return 200, {"status": "ok"}
        if request.path != cfg.path:
            return 404, {"error": "not_found", "detail": request.path[:100]}
        if request.method != "POST":
            return 405, {"error": "method_not_allowed", "detail": request.method[:20]}
        if not self.authorized(request.headers.get("Authorization")):
            self.stats["rejected_unauthorized"] += 1
            return 401, {"error": "unauthorized", "detail": "missing or wrong bearer token"}
        length = request.content_length  # aiohttp answers 400 itself to a malformed one
        if length is None:
            return 411, {"error": "length_required", "detail": "Content-Length header needed"}
        if length > cfg.max_body_bytes:
            return 413, {"error": "too_large", "detail": f"{length} bytes > {cfg.max_body_bytes}"}
        if request.content_type != "application/json":
            ctype = request.headers.get("Content-Type", "")
            return 415, {"error": "not_json", "detail": f"Content-Type {ctype[:60]!r}"}
        try:
            async with asyncio.timeout(cfg.request_timeout_s):
                body = await request.read()
        except TimeoutError:
            self.stats["rejected_timeout"] += 1
            detail = f"body not received within {cfg.request_timeout_s} s"
            return 408, {"error": "timeout", "detail": detail}
        if self._busy >= cfg.max_concurrent_requests:
            self.stats["rejected_busy"] += 1
            return 503, {"error": "busy", "detail": "too many concurrent requests"}
        self._busy += 1
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, self.accept, body, request.remote or "")
        finally:
            self._busy -= 1

    # --- request path -------------------------------------------------------------------
    def authorized(self, header: str | None) -> bool:
        if not header or not header.startswith("Bearer "):
            return False
        return hmac.compare_digest(header[len("Bearer ") :].strip().encode(), self._token)

    def accept(self, body: bytes, remote: str) -> tuple[int, dict[str, Any]]:
        """Validate, de-duplicate, audit and enqueue one message; returns (status, answer)."""
        try:
            msg = parse_message(body)
        except PayloadError as e:
            self.stats[f"rejected_{e.reason}"] += 1
            log.warning("rejected alert message from %s: %s", remote, e)
            return 400, {"error": e.reason, "detail": e.detail}
        with self._admit:
            fresh = {event_key(e) for e in msg.alerts if not self.dedup.contains(e)}
            if self.queue.maxsize - self.queue.qsize() < len(fresh):
                self.stats["rejected_queue_full"] += 1
                return 503, {"error": "queue_full", "detail": f"{len(fresh)} new alerts do not fit"}
            accepted = duplicates = 0
            # One notification is a snapshot of its group: its firing alerts are handed on
            # before its resolved ones, so a finding whose alert changed labels (the old label
            # set resolved, the new one firing) is never cleared in between (FiringAlerts).
            for event in sorted(msg.alerts, key=lambda e: e.status != "firing"):
                # A repeat within this message is a duplicate too. Audit first, then mark:
                # an alert whose audit line could not be written is not marked as seen, so
                # Alertmanager's retry of this message hands it on (it is not a duplicate).
                new = not self.dedup.contains(event)
                try:
                    self._audit_alert(event, duplicate=not new, remote=remote)
                except OSError as e:
                    self.stats["rejected_audit_failed"] += 1
                    self.stats["accepted"] += accepted
                    self.stats["duplicates"] += duplicates
                    log.error("audit log %s not writable (%s): answering 503", self.audit.path, e)
                    detail = f"audit log not writable ({e.strerror}); {accepted} of the alerts taken"
                    return 503, {"error": "audit_failed", "detail": detail}
                if new:
                    self.dedup.first_time(event)
                    self.queue.put_nowait(event)  # room was checked above, under the same lock
                    accepted += 1
                else:
                    duplicates += 1
        self.stats["accepted"] += accepted
        self.stats["duplicates"] += duplicates
        return 200, {"accepted": accepted, "duplicates": duplicates}

    def _audit_alert(self, event: AlertEvent, duplicate: bool, remote: str) -> None:
        self.audit.write(
            {
                "event": "alert",
                "duplicate": duplicate,
                "status": event.status,
                "alertname": event.alertname,
                "labels": dict(event.labels),
                "annotations": dict(event.annotations),
                "startsAt": event.starts_at,
                "endsAt": event.ends_at,
                "fingerprint": event.fingerprint,
                "receiver": event.receiver,
                "remote": remote,
            }
        )

    # --- dispatcher ---------------------------------------------------------------------
    def _dispatch(self) -> None:
        while True:
            try:
                event = self.queue.get(timeout=PIPELINE_TICK_S if self.pipeline else None)
            except queue.Empty:
                self._tick()
                continue
            if event is None:
                return
            finding = finding_from_alert(event) if self.pipeline is not None else None
            if finding is not None:
                if self.firing.admit(finding, event.fingerprint) is None:
                    self.stats["resolved_while_another_fires"] += 1
                    self.audit.write(
                        {
                            "event": "pipeline",
                            "rule": finding.rule,
                            "subject": finding.subject,
                            "outcome": "kept active: another alert of this finding still fires",
                            "fingerprint": event.fingerprint,
                        }
                    )
                    continue
                self._through_pipeline(finding)
                continue
            for hook in self.hooks:
                self._run_hook(hook, event)

    def _through_pipeline(self, finding: Finding) -> None:
        """An alert naming a broker/stage: the pipeline decides and its dispatcher calls the hooks."""
        assert self.pipeline is not None
        failed = sum(self.pipeline.errors.values())
        try:
            outcome = self.pipeline.handle(finding)
            self.pipeline.tick()
        except Exception as e:  # a pipeline bug must not stop the dispatcher
            self.stats["pipeline_failed"] += 1
            log.exception("findings pipeline failed on %s %s", finding.rule, finding.subject)
            outcome = {"error": f"{type(e).__name__}: {e}"}
        self.stats["pipeline_plugin_failed"] += sum(self.pipeline.errors.values()) - failed
        self.audit.write(
            {"event": "pipeline", "rule": finding.rule, "subject": finding.subject, "outcome": outcome}
        )

    def _tick(self) -> None:
        assert self.pipeline is not None
        try:
            self.pipeline.tick()
        except Exception:
            self.stats["pipeline_failed"] += 1
            log.exception("findings pipeline tick failed")

    def _run_hook(self, hook: Hook, event: AlertEvent) -> None:
        error = ""
        try:
            result = hook.handle(event)
        except Exception as e:  # a plugin's bug must not stop the others
            result, error = HookResult.FAILED, f"{type(e).__name__}: {e}"
            log.exception("hook %s failed on %s %s", hook.name, event.alertname, event.fingerprint)
        if result is HookResult.FAILED:
            self.stats[f"hook_failed_{hook.name}"] += 1
            if not error:
                log.warning(
                    "hook %s reported failure on %s %s", hook.name, event.alertname, event.fingerprint
                )
        self.audit.write(
            {
                "event": "hook",
                "hook": hook.name,
                "result": result.value,
                "error": error,
                "alertname": event.alertname,
                "status": event.status,
                "fingerprint": event.fingerprint,
            }
        )


def _json(status: int, answer: dict[str, Any]) -> web.Response:
    resp = web.json_response(answer, status=status)
    if status == 401:
        resp.headers["WWW-Authenticate"] = "Bearer"
    if status >= 400:
        resp.force_close()  # the client may be mid-body or misbehaving: do not read on
    return resp


class _HttpErrorLog(logging.LoggerAdapter):
    """aiohttp logs malformed HTTP (a bad Content-Length, header or request line) at ERROR
    with a traceback. From the network that is bad input, not a bug: it is answered 400 by
    aiohttp, counted in ``stats["rejected_bad_http"]`` and logged as one WARNING line."""

    def __init__(self, stats: Counter[str]) -> None:
        super().__init__(log, {})
        self.stats = stats

    def exception(self, msg: object, *args: object, exc_info: Any = True, **kwargs: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else sys.exc_info()[1]
        if isinstance(exc, HttpProcessingError):
            self.stats["rejected_bad_http"] += 1
            reason = " ".join(str(exc.message).split())[:200]
            self.logger.warning(f"{msg}: %s %s", *args, exc.code, reason)
        else:
            self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


_BUSY = json.dumps({"error": "busy", "detail": "too many open connections"}).encode()


class _Refuse(asyncio.Protocol):
    """Answers 503 to a connection over ``max_connections``, discards what the client sends
    for at most :data:`LINGER_S` (closing at once would reset the connection before the
    client reads the answer), then closes."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(_BUSY)}\r\nConnection: close\r\n\r\n"
        )
        transport.write(head.encode() + _BUSY)
        if transport.can_write_eof():
            transport.write_eof()
        asyncio.get_running_loop().call_later(LINGER_S, transport.close)

    def data_received(self, data: bytes) -> None:
        pass  # discarded: the answer is already sent

    def eof_received(self) -> bool:
        self.transport.close()
        return False
