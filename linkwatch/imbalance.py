"""The imbalance measure ``I = max_i L_i / avg_i L_i − 1`` (0 when perfectly even).

Shared by the analyzer's detectors and remediation's load planner. The same definition is computed by ``spark_metrics.transforms.imbalance`` over frames; this is
the plain-Python form the detectors use on rows (a test checks both agree).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

K = TypeVar("K")


def imbalance(loads: Mapping[K, float]) -> tuple[float, K | None]:
    """``(I, member with the max load)``; ``(0.0, None)`` for no members or zero total load."""
    if not loads:
        return 0.0, None
    avg = sum(loads.values()) / len(loads)
    top = max(loads, key=loads.__getitem__)
    if avg <= 0:
        return 0.0, None
    return loads[top] / avg - 1.0, top


def recent_windows(starts: set[int], now_ms: int, window_s: int, limit: int) -> list[int]:
    """The last ``limit`` windows that have ended by ``now_ms``, oldest first."""
    return sorted(w for w in starts if w + window_s * 1000 <= now_ms)[-limit:]
