"""Waiting on real components in tests: poll a check until it holds, or fail naming what was
awaited (and, when asked, the state that tells why)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    check: Callable[[], Any],
    timeout_s: float,
    what: str,
    every_s: float = 0.3,
    explain: Callable[[], str] | None = None,
) -> Any:
    """``check()`` once it is truthy; an AssertionError naming ``what`` (and, when given,
    ``explain()``: the state that tells why, read at the timeout) after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            why = f"\n{explain()}" if explain is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{why}")
        time.sleep(every_s)
