"""Dynamic broker and topic configs, set and read back: the mechanism several faults share.

Dynamic configs travel through the metadata log, so an AlterConfigs response comes before the
change is in force; :func:`apply` waits until every broker reports it, so the next step of a
fault (or the test) runs against the config it set.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType
from kafka.errors import UnknownBrokerIdError

from linkwatch.errors import SetupError

# A broker's config is read and set on that broker: a broker the admin client's metadata lost
# (fenced while it was paused or restarting, and left out of the metadata it read then) is looked
# up again until it is back, for this long. The client refreshes its metadata only every few
# minutes unless asked.
BROKER_LOOKUP_S = 20.0

T = TypeVar("T")


def _on_known_broker(admin, call: Callable[[], T]) -> T:
    """``call()``, asking for fresh metadata and calling again while the client knows no broker
    it must reach (``UnknownBrokerIdError``), for up to :data:`BROKER_LOOKUP_S`."""
    deadline = time.monotonic() + BROKER_LOOKUP_S
    while True:
        try:
            return call()
        except UnknownBrokerIdError:
            if time.monotonic() > deadline:
                raise
            manager = getattr(admin, "_manager", None)  # kafka-python's admin: its metadata
            if manager is not None:
                manager.cluster.request_update()
            time.sleep(0.5)


def alter(admin, resources: list[ConfigResource]) -> None:
    """Apply config changes; raise SetupError naming the resource if the broker refuses any."""
    # raise_on_unknown=False: the throttle rates are valid dynamic configs kafka-python does not list.
    # {"broker": {"2": "OK" | "<error>"}}
    result = _on_known_broker(admin, lambda: admin.alter_configs(resources, raise_on_unknown=False))
    errors = [
        f"{rtype} {name}: {outcome}"
        for rtype, by_name in result.items()
        for name, outcome in by_name.items()
        if outcome != "OK"
    ]
    if errors:
        raise SetupError("the broker refused a config change: " + "; ".join(errors))


def broker_config(admin, broker_id: int, key: str) -> str | None:
    """Current value of one broker config (dynamic overrides included), for checking faults."""
    return _read_config(admin, ConfigResourceType.BROKER, str(broker_id), key)


def topic_config(admin, topic: str, key: str) -> str | None:
    """Current value of one topic config (its own override, else what it inherits)."""
    return _read_config(admin, ConfigResourceType.TOPIC, topic, key)


def _read_config(admin, rtype: ConfigResourceType, name: str, key: str) -> str | None:
    entry = read_entry(admin, rtype, name, key)
    return entry.get("value") if isinstance(entry, dict) else entry


def read_entry(admin, rtype: ConfigResourceType, name: str, key: str) -> Any:
    """The describe-configs entry of one key: a dict with ``value`` and ``config_source``."""
    resource = ConfigResource(rtype, name, [key])
    result = _on_known_broker(admin, lambda: admin.describe_configs([resource], config_filter="all"))
    by_name = next(iter(result.values()), {}) if result else {}
    return by_name.get(name, {}).get(key)


# Where a config set on the resource itself comes from; anything else is a default or inherited.
_OWN_SOURCE = {
    ConfigResourceType.BROKER: "DYNAMIC_BROKER_CONFIG",
    ConfigResourceType.TOPIC: "DYNAMIC_TOPIC_CONFIG",
}


def _in_force(entry: Any, rtype: ConfigResourceType, want: str | None) -> bool:
    """Whether the broker reports ``want`` for a key (None: the override is gone).

    A deleted override reads back as whatever is inherited, which for some keys is a value, not
    None: a topic's ``flush.messages`` reads back as Long.MAX_VALUE. So a deletion is in force
    when the entry's source is no longer the resource's own dynamic config."""
    value = entry.get("value") if isinstance(entry, dict) else entry
    if want is not None:
        return value == want
    if not value:
        return True
    return isinstance(entry, dict) and entry.get("config_source") not in (None, _OWN_SOURCE.get(rtype))


def entries_on_every_broker(admin, rtype: ConfigResourceType, name: str, key: str) -> list[Any]:
    """The describe-configs entry of one key as each broker reports it.

    A broker's own config is answered by that broker, but a topic's by whichever broker is asked
    (kafka-python's least loaded), and each broker applies a change from the metadata log on its
    own time: a change one broker reports may not be in force on the next one asked (a loaded
    whole-suite run read a deleted override back once). So a topic's key is asked of every broker
    the client knows."""
    if rtype is not ConfigResourceType.TOPIC:
        return [read_entry(admin, rtype, name, key)]
    manager = admin._manager  # kafka-python's admin: its metadata and per-node sends
    nodes = sorted(b.node_id for b in manager.cluster.brokers())
    resource = ConfigResource(rtype, name, [key])

    async def ask_each() -> list[Any]:
        responses = [
            await manager.send(admin._describe_configs_request([resource], False), node_id=n) for n in nodes
        ]
        return [
            admin._describe_configs_process_responses([r], "all").get("topic", {}).get(name, {}).get(key)
            for r in responses
        ]

    return _on_known_broker(admin, lambda: manager.run(ask_each))


def apply(admin, rtype: ConfigResourceType, names: list[str], configs: dict[str, str | None]) -> None:
    """Set (or, for None, delete) configs and wait until the brokers report the new values.

    Dynamic configs travel through the metadata log, so an AlterConfigs response comes before
    the change is in force; callers (and the next step of a fault) rely on it being in force.
    """
    ops = {k: (AlterConfigOp.DELETE, None) if v is None else v for k, v in configs.items()}
    alter(admin, [ConfigResource(rtype, n, ops) for n in names])
    deadline = time.monotonic() + 15
    for name in names:
        for key, want in configs.items():
            while not all(
                _in_force(got := entry, rtype, want)
                for entry in entries_on_every_broker(admin, rtype, name, key)
            ):
                if time.monotonic() > deadline:
                    raise SetupError(
                        f"{rtype.name.lower()} {name} still reports {key}={got!r}, expected "
                        f"{'its default' if want is None else repr(want)}"
                    )
                time.sleep(0.1)
