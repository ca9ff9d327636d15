"""Remediations by name among the entry points of group ``linkwatch.remediations``.

Built-ins are declared in ``pyproject.toml`` exactly like third-party plugins. An unknown name,
a plugin that fails to import, or settings that do not validate stop start-up with a
:class:`~linkwatch.errors.ConfigError` that names the key and the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import ValidationError

from linkwatch.errors import ConfigError
from remediation.base import REMEDIATION_GROUP, Remediation


def available() -> dict[str, EntryPoint]:
    return {ep.name: ep for ep in entry_points(group=REMEDIATION_GROUP)}


def load_class(name: str, key: str = "remediations") -> type[Remediation]:
    eps = available()
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise ConfigError(
            f"{key}.{name}", [f"no entry point {name!r} in group {REMEDIATION_GROUP} ({known})"]
        )
    try:
        cls = eps[name].load()
    except Exception as e:  # a broken plugin stops start-up with its name, not a traceback
        raise ConfigError(f"{key}.{name}", [f"entry point in {REMEDIATION_GROUP} failed to load: {e}"]) from e
    if not (isinstance(cls, type) and issubclass(cls, Remediation)):
        raise ConfigError(f"{key}.{name}", [f"{eps[name].value} is not a Remediation subclass"])
    return cls


def load_remediations(selection: Mapping[str, Mapping[str, Any] | None]) -> dict[str, Remediation]:
    """Instantiate the chosen remediations; ``selection`` maps name -> settings (or None)."""
    out: dict[str, Remediation] = {}
    for name, raw in selection.items():
        cls = load_class(name)
        try:
            config = cls.Config.model_validate(dict(raw or {}))
        except ValidationError as e:
            problems = [
                f"{'.'.join(map(str, err['loc']))}={err.get('input')!r}: {err['msg']}" for err in e.errors()
            ]
            raise ConfigError(f"remediations.{name}", problems) from None
        out[name] = cls(config)
    return out
