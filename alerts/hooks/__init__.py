"""Hooks the alerts receiver hands alerts to: the contract (:mod:`.base`), the built-in
notifiers (:mod:`.log`, :mod:`.webhook`, :mod:`.exec`, :mod:`.memory`) and loading by entry
point (:func:`load_hook`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alerts.hooks.base import NOTIFIERS_GROUP, AlertEvent, Hook, HookResult, Notifier
from linkwatch import plugins

__all__ = ["NOTIFIERS_GROUP", "AlertEvent", "Hook", "HookResult", "Notifier", "available_hooks", "load_hook"]


def available_hooks(group: str = NOTIFIERS_GROUP) -> dict[str, Any]:
    return plugins.available(group)


def load_hook(name: str, options: Mapping[str, Any] | None = None, group: str = NOTIFIERS_GROUP) -> Hook:
    """Build the hook registered as ``name`` through the shared plugin loader
    (:mod:`linkwatch.plugins`): an unknown name, a hook that fails to import or a class that is
    not a :class:`Hook` stops start-up with a ConfigError naming ``hooks.<name>`` and the group.
    A hook validates its own ``options`` (its constructor raises ConfigError)."""
    return plugins.load_class(group, name, Hook, "hooks")(options)
