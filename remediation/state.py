"""Persisted execution state: one JSON file, replaced atomically (write, fsync, rename).

It holds what a restarted remediator needs to finish or cancel **its own** work and to keep its
guardrails: actions (``planned`` → ``running`` → ``done`` / ``failed`` / ``cancelled``) with
their steps, each step's status (``intent`` is written *before* the step is sent to the
cluster, so a kill between the write and the call is recovered as "maybe sent"), the throttles
an action set (with the values they replaced), demoted brokers, per-subject last-action times,
the dedup keys acted on, the finding tracker, and findings kept while paused.

A file on the remediator's host: a standby on another host does not see it. The lease makes the
standby wait for the holder's session to expire; the holder's own moves are recognisable in
the cluster (its reassignments are listed by Kafka), and on takeover the standby's
``cancel``/``status`` read the cluster, not this file (see docs/remediation.md).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import orjson

EMPTY: dict[str, Any] = {
    "version": 1,
    "actions": {},
    "demoted": {},  # broker id (str) -> action id
    "last_action": {},  # subject -> epoch s
    "acted": [],  # dedup keys
    "tracker": {"active": {}, "cleared": {}},
    "pending": [],  # findings (dicts) kept while paused
    "paused": False,
}
MAX_ACTED_KEYS = 10_000


class StateStore:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.data: dict[str, Any] = self._load()

    def _load(self) -> dict[str, Any]:
        if not self.path.exists():
            return orjson.loads(orjson.dumps(EMPTY))
        data = orjson.loads(self.path.read_bytes())
        for k, v in EMPTY.items():
            data.setdefault(k, orjson.loads(orjson.dumps(v)))
        return data

    def save(self) -> None:
        with self._lock:
            self.data["acted"] = self.data["acted"][-MAX_ACTED_KEYS:]
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, orjson.dumps(self.data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)

    # -- actions ------------------------------------------------------------------------------

    def put_action(self, action: dict[str, Any]) -> None:
        with self._lock:
            self.data["actions"][action["id"]] = action
            self.save()

    def action(self, action_id: str) -> dict[str, Any]:
        return self.data["actions"][action_id]

    def update(self, action_id: str, **fields: Any) -> None:
        with self._lock:
            self.data["actions"][action_id].update(fields)
            self.save()

    def step_status(self, action_id: str, index: int, status: str, **extra: Any) -> None:
        with self._lock:
            step = self.data["actions"][action_id]["steps"][index]
            step["status"] = status
            step.update(extra)
            self.save()

    def running(self) -> list[dict[str, Any]]:
        return [a for a in self.data["actions"].values() if a["status"] in ("planned", "running")]
