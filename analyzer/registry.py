"""Finds detectors by name among the entry points of group ``linkwatch.detectors``.

Built-in detectors are declared in ``pyproject.toml`` exactly like third-party ones, so one code
path loads both. An unknown name, a plugin that fails to import, or a config that does not
validate stops start-up with a :class:`~linkwatch.errors.ConfigError` naming the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import ValidationError

from analyzer.base import DETECTOR_GROUP, Detector
from linkwatch.errors import ConfigError


def available() -> dict[str, EntryPoint]:
    """Name -> entry point of every installed detector."""
    return {ep.name: ep for ep in entry_points(group=DETECTOR_GROUP)}


def load_detector_class(name: str) -> type[Detector]:
    eps = available()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise ConfigError(
            f"detectors.{name}", [f"no entry point {name!r} in group {DETECTOR_GROUP} ({known})"]
        )
    try:
        cls = eps[name].load()
    except Exception as e:  # a broken plugin must stop start-up with its name, not a traceback
        raise ConfigError(
            f"detectors.{name}", [f"entry point in {DETECTOR_GROUP} failed to load: {e}"]
        ) from e
    if not (isinstance(cls, type) and issubclass(cls, Detector)):
        raise ConfigError(f"detectors.{name}", [f"{eps[name].value} is not a Detector subclass"])
    return cls


def load_detectors(selection: Mapping[str, Mapping[str, Any] | None]) -> list[Detector]:
    """Instantiate the chosen detectors; ``selection`` maps name -> thresholds (or None)."""
    detectors = []
    for name, raw in selection.items():
        cls = load_detector_class(name)
        try:
            config = cls.Config.model_validate(dict(raw or {}))
        except ValidationError as e:
            problems = [
                f"{'.'.join(map(str, err['loc']))}={err.get('input')!r}: {err['msg']}" for err in e.errors()
            ]
            raise ConfigError(f"detectors.{name}", problems) from None
        detectors.append(cls(config))
    return detectors
