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

from pydantic import BaseModel, ValidationError

from linkwatch.config import describe
from linkwatch.errors import ConfigError

T = TypeVar("T")


def available(group: str) -> dict[str, EntryPoint]:
    """Name -> entry point of every installed plugin of ``group``."""
    return {ep.name: ep for ep in entry_points(group=group)}


def load(group: str, name: str, key: str) -> Any:
    """The object registered as ``name`` in ``group`` (a class, or a factory function)."""
    eps = available(group)
    if name not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise ConfigError(f"{key}.{name}", [f"no entry point {name!r} in group {group} ({known})"])
    try:
        return eps[name].load()
    except Exception as e:  # a broken plugin stops start-up with its name, not a traceback
        raise ConfigError(f"{key}.{name}", [f"entry point in {group} failed to load: {e}"]) from e


def load_class(group: str, name: str, base: type[T], key: str) -> type[T]:
    """The class registered as ``name`` in ``group``; it must be a subclass of ``base``."""
    cls = load(group, name, key)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        value = available(group)[name].value
        raise ConfigError(f"{key}.{name}", [f"{value} is not a {base.__name__} subclass"])
    return cls


def validate_options(group: str, name: str, options: Mapping[str, Any] | None, key: str) -> dict[str, Any]:
    """``options`` of the plugin registered as ``name``, checked against its class's ``Options``
    model (a class without one takes its options unchecked) and returned with the defaults
    filled in; an unknown key or a bad value raises ConfigError naming ``<key>.<name>``."""
    cls = load(group, name, key)
    model = getattr(cls, "Options", None)
    if model is None:
        return dict(options or {})
    return checked_options(model, options, f"{key}.{name}")


def checked_options(model: type[BaseModel], options: Mapping[str, Any] | None, where: str) -> dict[str, Any]:
    """``options`` validated by ``model`` (unknown keys refused when it forbids extras), as a
    dict with the defaults filled in; ConfigError naming ``where`` and each bad key."""
    try:
        return model.model_validate(dict(options or {})).model_dump()
    except ValidationError as e:
        raise ConfigError(where, [f"options.{describe(err, model)}" for err in e.errors()[:20]]) from None


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
