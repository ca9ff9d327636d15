"""Hooks the alerts receiver hands alerts to: the contract (:mod:`.base`), the built-in
notifiers (:mod:`.log`, :mod:`.webhook`, :mod:`.exec`, :mod:`.memory`) and loading by entry
point (:func:`load_hook`)."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from alerts.hooks.base import NOTIFIERS_GROUP, AlertEvent, Hook, HookResult, Notifier
from linkwatch.errors import ConfigError

__all__ = ["NOTIFIERS_GROUP", "AlertEvent", "Hook", "HookResult", "Notifier", "available_hooks", "load_hook"]


def available_hooks(group: str = NOTIFIERS_GROUP) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def load_hook(name: str, options: Mapping[str, Any] | None = None, group: str = NOTIFIERS_GROUP) -> Hook:
    """Build the hook registered as ``name``; an unknown name fails naming the group."""
    found = available_hooks(group)
    if name not in found:
        known = ", ".join(sorted(found)) or "none"
        raise ConfigError(
            f"hooks[{name}]", [f"no hook {name!r} in entry-point group {group} (known: {known})"]
        )
    cls = found[name].load()
    if not (isinstance(cls, type) and issubclass(cls, Hook)):
        raise ConfigError(f"hooks[{name}]", [f"{found[name].value} is not a Hook subclass"])
    return cls(options)
