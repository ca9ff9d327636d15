"""The revert registry every fault registers in: a fault is undone when its ``with`` block
ends, and also by :func:`revert_all` (a test's teardown, Ctrl-C in the demo), so nothing stays
broken whatever a test did. Thread-safe."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

_lock = threading.Lock()
ACTIVE: dict[int, tuple[str, Callable[[], None]]] = {}  # token -> (name, undo) of each fault in force
_next_id = 0


def register(name: str, undo: Callable[[], None]) -> int:
    """Keep ``undo`` (named ``name``) until :func:`unregister`; returns its token."""
    global _next_id
    with _lock:
        _next_id += 1
        ACTIVE[_next_id] = (name, undo)
        return _next_id


def unregister(token: int) -> None:
    with _lock:
        ACTIVE.pop(token, None)


def revert_all() -> list[str]:
    """Undo every active fault (newest first); returns their names. Never raises."""
    with _lock:
        items = sorted(ACTIVE.items(), reverse=True)
        ACTIVE.clear()
    for _, (_name, undo) in items:
        with contextlib.suppress(Exception):
            undo()
    return [name for _, (name, _undo) in items]
