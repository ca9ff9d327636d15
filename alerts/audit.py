"""Audit log: one JSON line per alert event the receiver accepted (new or duplicate) and per
hook outcome. Bounded: at ``max_bytes`` the file is rotated to ``<name>.1`` (one backup)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any


class AuditLog:
    def __init__(self, path: Path, max_bytes: int = 64 * 1024 * 1024) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"ts": round(time.time(), 3), **record}, sort_keys=True) + "\n"
        with self._lock:
            if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                os.replace(self.path, self.path.with_name(self.path.name + ".1"))
            with self.path.open("a") as f:
                f.write(line)

    def read(self) -> list[dict[str, Any]]:
        """All records in the current file (tests and the demo)."""
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]
