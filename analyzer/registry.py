"""Finds detectors by name among the entry points of group ``linkwatch.detectors``.

Built-in detectors are declared in ``pyproject.toml`` exactly like third-party ones, so one code
path loads both. An unknown name, a plugin that fails to import, or a config that does not
validate stops start-up with a :class:`~linkwatch.errors.ConfigError` naming the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any

from analyzer.base import DETECTOR_GROUP, Detector
from linkwatch import plugins


def available() -> dict[str, EntryPoint]:
    """Name -> entry point of every installed detector."""
    return plugins.available(DETECTOR_GROUP)


def load_detector_class(name: str) -> type[Detector]:
    return plugins.load_class(DETECTOR_GROUP, name, Detector, "detectors")


def load_detectors(selection: Mapping[str, Mapping[str, Any] | None]) -> list[Detector]:
    """Instantiate the chosen detectors; ``selection`` maps name -> thresholds (or None)."""
    return list(plugins.build(DETECTOR_GROUP, Detector, selection, "detectors").values())
