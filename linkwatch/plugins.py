"""Plugins by name among the entry points of a group: one loader for every extension point.

Built-ins are declared in ``pyproject.toml`` exactly like third-party plugins, so one code path
loads both. A plugin class carries a pydantic ``Config`` model and is built as ``cls(config)``.
An unknown name, a plugin that fails to import, a class that is not the expected kind, or
settings that do not validate stop start-up with a :class:`~linkwatch.errors.ConfigError` that
names the key (``<key>.<name>``) and the group.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from pydantic import ValidationError

from linkwatch.errors import ConfigError

T = TypeVar("T")


def available(group: str) -> dict[str, EntryPoint]:
    """Name -> entry point of every installed plugin of ``group``."""
    return {ep.name: ep for ep in entry_points(group=group)}


def load_class(group: str, name: str, base: type[T], key: str) -> type[T]:
    """The class registered as ``name`` in ``group``; it must be a subclass of ``base``."""
    eps = available(group)
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise ConfigError(f"{key}.{name}", [f"no entry point {name!r} in group {group} ({known})"])
    try:
        cls = eps[name].load()
    except Exception as e:  # a broken plugin stops start-up with its name, not a traceback
        raise ConfigError(f"{key}.{name}", [f"entry point in {group} failed to load: {e}"]) from e
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise ConfigError(f"{key}.{name}", [f"{eps[name].value} is not a {base.__name__} subclass"])
    return cls


def build(
    group: str, base: type[T], selection: Mapping[str, Mapping[str, Any] | None], key: str
) -> dict[str, T]:
    """Instantiate the chosen plugins, in ``selection``'s order; it maps name -> settings (or
    None for the defaults), validated by the class's ``Config`` model."""
    out: dict[str, T] = {}
    for name, raw in selection.items():
        cls = load_class(group, name, base, key)
        try:
            config = cls.Config.model_validate(dict(raw or {}))  # type: ignore[attr-defined]
        except ValidationError as e:
            problems = [
                f"{'.'.join(map(str, err['loc']))}={err.get('input')!r}: {err['msg']}" for err in e.errors()
            ]
            raise ConfigError(f"{key}.{name}", problems) from None
        out[name] = cls(config)  # type: ignore[call-arg]
    return out
