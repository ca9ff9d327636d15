"""The imbalance measure, as the detectors use it: defined once in the core
(:mod:`linkwatch.imbalance`), because remediation's load planner measures with it too."""

from linkwatch.imbalance import imbalance, recent_windows

__all__ = ["imbalance", "recent_windows"]
