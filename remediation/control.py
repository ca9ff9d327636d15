"""Operator commands (``pause``, ``resume``, ``reset``, ``cancel``, ``undo``) go through the
remediator that acts, never around it.

* **With the shared state** (``execute: true``, lease on): :func:`send` produces the command to
  the lease topic — the holder's inbox, read only by the member holding the lease — and waits
  for the holder's reply in the shared state (``reply/<id>``, written in the same fenced
  transaction as the command's effect and the inbox position). No holder answering within the
  timeout is an error, unless ``take_lease``: then this process joins the lease group, and if
  it gets the lease it is the holder — it loads the state, answers the inbox (its own command
  included) and leaves.
* **With the state file** (one remediator by construction, or a dry run): a running remediator
  holds ``<state_dir>/remediator.lock``; the command is written to ``<state_dir>/inbox/`` and its
  tick answers it (the reply in the state file). No remediator running: this process takes the
  lock and answers the command itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from linkwatch.errors import LinkwatchError
from linkwatch.kafka_client import kafka_python_kwargs
from remediation.config import RemediatorConfig

LOCK_NAME = "remediator.lock"
INBOX = "inbox"


class NoHolder(LinkwatchError):
    """No acting remediator answered the command (the message says what to do)."""


class StateLock:
    """The exclusive lock a remediator on a state file holds while it lives."""

    def __init__(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        self.path = state_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class FileInbox:
    """Commands for a remediator on a state file: one JSON file each, answered oldest first."""

    def __init__(self, state_dir: Path) -> None:
        self.dir = state_dir / INBOX

    def put(self, cmd: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / f".{cmd['id']}.tmp"
        tmp.write_bytes(orjson.dumps(cmd))
        tmp.replace(self.dir / f"{time.time_ns():020d}-{cmd['id']}.json")

    def commands(self) -> list[tuple[Any, Any]]:
        if not self.dir.exists():
            return []
        out = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                value = orjson.loads(path.read_bytes())
            except (OSError, orjson.JSONDecodeError):
                value = None
            out.append((str(path), value if isinstance(value, dict) else None))
        return out

    def processed(self, token: Any) -> None:
        with contextlib.suppress(FileNotFoundError):
            Path(token).unlink()


def command(name: str, by: str, **args: Any) -> dict[str, Any]:
    return {"id": uuid.uuid4().hex[:12], "command": name, "ts": time.time(), "by": by, **args}


def send(
    cfg: RemediatorConfig,
    cmd: dict[str, Any],
    *,
    timeout_s: float,
    take_lease: bool = False,
    build: Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """Have the acting remediator run ``cmd``; return its reply (``ok``, ``result``)."""
    from remediation.service import build as default_build
    from remediation.service import shared

    build = build or default_build
    if shared(cfg):
        return _through_lease(cfg, cmd, timeout_s, take_lease, build)
    return _through_file(cfg, cmd, timeout_s, build)


def _through_lease(
    cfg: RemediatorConfig, cmd: dict[str, Any], timeout_s: float, take_lease: bool, build: Callable[..., Any]
) -> dict[str, Any]:
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    from remediation.state import from_documents, read_documents

    producer = KafkaProducer(
        **kafka_python_kwargs(cfg.kafka, "remediate-command"),
        acks="all",
        allow_auto_create_topics=False,
        max_block_ms=15_000,
    )
    try:
        producer.send(cfg.lease.topic, orjson.dumps(cmd), partition=0).get(timeout=30)
    except KafkaTimeoutError:
        raise NoHolder(
            f"lease topic {cfg.lease.topic} not found: no remediator has run with this config"
        ) from None
    finally:
        producer.close()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = from_documents(read_documents(cfg.kafka, cfg.lease.state_topic))["replies"]
        if cmd["id"] in replies:
            return replies[cmd["id"]]
        time.sleep(1.0)
    if not take_lease:
        raise NoHolder(
            f"no remediator holding the lease (group {cfg.lease.group}) answered within {timeout_s:.0f} s; "
            "start `linkwatch remediate run`, or pass --take-lease to act as the holder"
        )
    rem = build(cfg, member=f"cli-{cmd['by']}")
    try:
        if not rem.lease.wait(2 * cfg.lease.session_timeout_ms / 1000 + 5):
            raise NoHolder("another remediator holds the lease but did not answer; it may be stuck")
        rem.activate()
        seen = time.monotonic() + 15
        while time.monotonic() < seen and not any(
            isinstance(c, dict) and c.get("id") == cmd["id"] for _, c in rem.lease.commands()
        ):
            time.sleep(0.2)  # the lease consumer reads the inbox in the background
        rem.run_commands()
        reply = rem.state.data["replies"].get(cmd["id"])
        if reply is None:
            raise NoHolder("the command was not found in the holder's inbox (expired?)")
        return reply
    finally:
        rem.close()


def _through_file(
    cfg: RemediatorConfig, cmd: dict[str, Any], timeout_s: float, build: Callable[..., Any]
) -> dict[str, Any]:
    from remediation.state import FileStateStore

    lock = StateLock(cfg.state_dir)
    if lock.acquire():
        try:
            rem = build(cfg, with_lease=False)
            try:
                return rem.command(cmd)
            finally:
                rem.close()
        finally:
            lock.release()
    FileInbox(cfg.state_dir).put(cmd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        replies = FileStateStore(cfg.state_dir / "state.json").data["replies"]
        if cmd["id"] in replies:
            return replies[cmd["id"]]
        time.sleep(0.5)
    raise NoHolder(f"the remediator running on {cfg.state_dir} did not answer within {timeout_s:.0f} s")
