"""The Alertmanager webhook receiver behind ``linkwatch alerts serve``.

``POST <path>`` with ``Authorization: Bearer <token>`` and an Alertmanager v4 JSON body.
Steps: authenticate (constant-time compare) → bound the body → validate → de-duplicate
(fingerprint, status, startsAt; bounded LRU) → one audit line per alert → enqueue new events
→ 200. A single dispatcher thread hands each event to every hook in order; a failing hook is
logged and audited, the others go on. ``GET /healthz`` answers without a token.

Answers: 401 bad/missing token, 404 unknown path, 411 no Content-Length, 413 body too large,
415 not JSON, 400 malformed message (``{"error": reason, "detail": ...}``), 503 queue full or
too many concurrent requests (Alertmanager retries).
"""

from __future__ import annotations

import hmac
import json
import logging
import queue
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from alerts.audit import AuditLog
from alerts.config import ReceiverConfig
from alerts.dedup import DedupCache
from alerts.hooks import Hook, HookResult, load_hook
from alerts.hooks.base import AlertEvent
from alerts.payload import PayloadError, parse_message

log = logging.getLogger("linkwatch.alerts")


class AlertReceiver:
    """Owns the HTTP server, the dedup cache, the audit log, the queue and the hooks."""

    def __init__(self, config: ReceiverConfig, hooks: list[Hook] | None = None) -> None:
        self.config = config
        self._token = config.resolved_token()
        self.hooks = hooks if hooks is not None else [load_hook(h.type, h.options) for h in config.hooks]
        self.audit = AuditLog(config.audit_log, config.audit_max_bytes)
        self.dedup = DedupCache(config.dedup_entries)
        self.queue: queue.Queue[AlertEvent | None] = queue.Queue(maxsize=config.queue_size)
        self.stats: Counter[str] = Counter()
        self._admit = threading.Lock()
        self._slots = threading.BoundedSemaphore(config.max_concurrent_requests)
        self._server: ThreadingHTTPServer | None = None
        self._threads: list[threading.Thread] = []

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}{self.config.path}"

    def start(self) -> AlertReceiver:
        self._server = ThreadingHTTPServer((self.config.host, self.config.port), _handler_for(self))
        self._server.daemon_threads = True
        # A short poll interval: shutdown() waits up to one poll.
        threads = (
            ("alerts-http", self._server.serve_forever, (0.1,)),
            ("alerts-dispatch", self._dispatch, ()),
        )
        for name, target, args in threads:
            t = threading.Thread(target=target, args=args, name=name, daemon=True)
            t.start()
            self._threads.append(t)
        log.info("alerts receiver listening on %s", self.url)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        self.queue.put(None)
        for t in self._threads:
            t.join(timeout_s)
        for hook in self.hooks:
            try:
                hook.close()
            except Exception:
                log.exception("hook %s failed to close", hook.name)

    def __enter__(self) -> AlertReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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
            fresh = [e for e in msg.alerts if not self.dedup.contains(e)]
            if self.queue.maxsize - self.queue.qsize() < len(fresh):
                self.stats["rejected_queue_full"] += 1
                return 503, {"error": "queue_full", "detail": f"{len(fresh)} new alerts do not fit"}
            accepted = 0
            for event in msg.alerts:
                new = self.dedup.first_time(event)  # also a repeat within this message is a duplicate
                self._audit_alert(event, duplicate=not new, remote=remote)
                if new:
                    self.queue.put_nowait(event)
                    accepted += 1
        self.stats["accepted"] += accepted
        self.stats["duplicates"] += len(msg.alerts) - accepted
        return 200, {"accepted": accepted, "duplicates": len(msg.alerts) - accepted}

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
            event = self.queue.get()
            if event is None:
                return
            for hook in self.hooks:
                self._run_hook(hook, event)

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


def _handler_for(receiver: AlertReceiver) -> type[BaseHTTPRequestHandler]:
    cfg = receiver.config

    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # seconds per socket read: a slow client cannot hold a slot forever
        server_version = "linkwatch-alerts"

        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._answer(200, {"status": "ok"})
            else:
                self._answer(404, {"error": "not_found", "detail": self.path[:100]})

        def do_POST(self) -> None:
            if not receiver._slots.acquire(blocking=False):
                self._answer(503, {"error": "busy", "detail": "too many concurrent requests"})
                return
            try:
                status, answer = self._post()
                self._answer(status, answer)
            finally:
                receiver._slots.release()

        def _post(self) -> tuple[int, dict[str, Any]]:
            if self.path != cfg.path:
                return 404, {"error": "not_found", "detail": self.path[:100]}
            if not receiver.authorized(self.headers.get("Authorization")):
                receiver.stats["rejected_unauthorized"] += 1
                return 401, {"error": "unauthorized", "detail": "missing or wrong bearer token"}
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                return 411, {"error": "length_required", "detail": "Content-Length header needed"}
            if int(length) > cfg.max_body_bytes:
                return 413, {"error": "too_large", "detail": f"{length} bytes > {cfg.max_body_bytes}"}
            ctype = self.headers.get("Content-Type", "")
            if ctype.split(";")[0].strip().lower() != "application/json":
                return 415, {"error": "not_json", "detail": f"Content-Type {ctype[:60]!r}"}
            body = self.rfile.read(int(length))
            return receiver.accept(body, self.client_address[0])

        def _answer(self, status: int, answer: dict[str, Any]) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            if status == 401:
                self.send_header("WWW-Authenticate", "Bearer")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status >= 400:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("%s %s", self.address_string(), format % args)

    return Handler
