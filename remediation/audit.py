"""The append-only audit log: one JSON object per line, written and fsynced before we go on.

Every plan, step, result, refusal and recovery is an event ``{"ts": epoch_s, "event": ...,
"remediator": id, ...}``. The file is only ever opened for append; nothing rewrites it. Reading
it back (:func:`read_audit`) skips and counts lines that do not parse (a torn last line after a
crash), never fails on them.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import orjson


class AuditLog:
    def __init__(self, path: Path, remediator: str) -> None:
        self.path = Path(path)
        self.remediator = remediator
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._end_torn_line()

    def _end_torn_line(self) -> None:
        """A crash mid-write leaves a last line without its newline: end it, so the next event
        starts on a line of its own (the torn one is then dropped and counted by the reader)."""
        try:
            with self.path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
        except (FileNotFoundError, OSError):
            return
        if torn:
            with self.path.open("ab") as f:
                f.write(b"\n")

    def write(self, event: str, **fields: Any) -> dict[str, Any]:
        entry = {"ts": round(time.time(), 3), "event": event, "remediator": self.remediator, **fields}
        line = orjson.dumps(entry, default=str, option=orjson.OPT_NON_STR_KEYS) + b"\n"
        with self._lock:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        return entry


def read_audit(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every event, and how many lines were dropped as unreadable."""
    events, dropped = [], 0
    if not Path(path).exists():
        return events, dropped
    for line in Path(path).read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            dropped += 1
            continue
        if isinstance(obj, dict):
            events.append(obj)
        else:
            dropped += 1
    return events, dropped
