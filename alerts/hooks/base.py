"""The hook contract: what the alerts receiver hands each alert to.

A hook is a class registered under an entry-point group and chosen by name in the receiver's
config (``hooks: [{type: log}, {type: exec, options: {...}}]``). Notification hooks live in the
group ``linkwatch.notifiers``. Actions on a cluster (demote a leader, reassign, throttle) are
not hooks: they are remediations (entry-point group ``linkwatch.remediations``) with their own
contract in :mod:`remediation.base`, behind that package's guardrails (dry-run by default,
cooldown per subject, caps, a lease so two actors never collide). The built-ins are registered
the same way as plugins.

Contract, for every hook:

* ``__init__(options)`` validates its options and raises :class:`~linkwatch.errors.ConfigError`
  naming the bad key; it never connects, spawns or writes anything (the receiver builds every
  hook before it listens, so a typo fails start-up, not the first alert).
* ``handle(event)`` is called once per new (de-duplicated) alert event, from the receiver's
  single dispatcher thread, never from the HTTP thread. It may block, but only up to its own
  configured timeout (bounded retries included). It must not mutate the event. It returns a
  :class:`HookResult`; raising is allowed and means FAILED: the dispatcher logs the error
  with the hook name and alert fingerprint, counts it, and goes on with the other hooks.
* Alert text is untrusted input (labels and annotations come from metrics): a hook never
  builds a shell command, URL path or file path from it.
* ``close()`` releases what ``handle`` opened; called once at shutdown; must not raise.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from linkwatch.config import StrictModel
from linkwatch.plugins import checked_options

NOTIFIERS_GROUP = "linkwatch.notifiers"


class HookResult(enum.Enum):
    DONE = "done"  # delivered / acted
    SKIPPED = "skipped"  # chose not to act (filtered, dry run, cooldown)
    FAILED = "failed"  # tried and could not; the dispatcher logs and counts it


@dataclass(frozen=True)
class AlertEvent:
    """One alert from an Alertmanager webhook message, as hooks see it."""

    status: str  # "firing" | "resolved"
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: str
    ends_at: str
    fingerprint: str
    generator_url: str = ""
    receiver: str = ""
    group_key: str = ""
    received_at: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def alertname(self) -> str:
        return self.labels.get("alertname", "")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["labels"] = dict(self.labels)
        d["annotations"] = dict(self.annotations)
        d["alertname"] = self.alertname
        return d


class NoOptions(StrictModel):
    """The options of a hook that takes none: any key is a typo."""


class Hook(abc.ABC):
    """Base of every hook; subclasses set ``name`` to their entry-point name and ``Options`` to
    a :class:`~linkwatch.config.StrictModel` of their options. ``options`` are validated by it
    before the subclass reads them (an unknown key such as ``retires`` or a bad value raises
    ConfigError naming ``hooks.<name>``), and ``self.options`` holds them with the defaults;
    config loading runs the same check, so ``--check`` catches it too."""

    name: ClassVar[str] = "hook"
    Options: ClassVar[type[StrictModel]] = NoOptions

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = checked_options(self.Options, options, f"hooks.{self.name}")

    @abc.abstractmethod
    def handle(self, event: AlertEvent) -> HookResult:
        """Deliver or act on one alert event (see the module contract)."""

    def close(self) -> None:  # noqa: B027 - optional for hooks that hold nothing
        """Release resources; never raises."""


class Notifier(Hook):
    """A hook that tells someone: never changes the cluster."""
