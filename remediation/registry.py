"""Remediations by name among the entry points of group ``linkwatch.remediations``.

Built-ins are declared in ``pyproject.toml`` exactly like third-party plugins. An unknown name,
a plugin that fails to import, or settings that do not validate stop start-up with a
:class:`~linkwatch.errors.ConfigError` that names the key and the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any

from linkwatch import plugins
from remediation.base import REMEDIATION_GROUP, Remediation


def available() -> dict[str, EntryPoint]:
    return plugins.available(REMEDIATION_GROUP)


def load_class(name: str, key: str = "remediations") -> type[Remediation]:
    return plugins.load_class(REMEDIATION_GROUP, name, Remediation, key)


def load_remediations(selection: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Remediation]:
    """Instantiate the chosen remediations; ``selection`` maps name -> settings (or None)."""
    return plugins.build(REMEDIATION_GROUP, Remediation, selection, "remediations")
