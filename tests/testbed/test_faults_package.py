"""The faults package: one kind a module, each saying its mechanism, every name callers use
still reached as ``faults.<name>``, and one revert registry for all of them (no cluster)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from testbed import faults
from testbed.faults.registry import register, unregister

# What callers (tests, benchmarks, the demo) reach through ``testbed.faults``.
PUBLIC = [
    "ACTIVE",
    "BLKIO_ROOT",
    "CongestedLink",
    "DeleteMidPass",
    "PauseDutyCycle",
    "SafepointStorm",
    "SlowClient",
    "blkio_cgroup",
    "block_device",
    "broker_config",
    "evict_page_cache",
    "restore_preferred_leaders",
    "revert_all",
    "rolling_restart",
    "slow_disk",
    "slow_log_appends",
    "stall_follower",
    "starve_cpu",
    "starve_request_handlers",
    "throttle_disk_writes",
    "throttle_replication",
    "topic_config",
    "topic_configs",
]
MODULES = sorted(m.name for m in pkgutil.iter_modules(faults.__path__))


def test_every_public_name_is_reached_through_the_package() -> None:
    assert sorted(faults.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(faults, name) is not None


@pytest.mark.parametrize("name", MODULES)
def test_each_module_says_what_it_holds(name: str) -> None:
    doc = importlib.import_module(f"testbed.faults.{name}").__doc__
    assert doc is not None and len(doc.split()) >= 10, name


def test_one_registry_reverts_every_kind_newest_first() -> None:
    undone: list[str] = []
    first = register("first", lambda: undone.append("first"))
    register("second", lambda: undone.append("second"))
    register("broken", lambda: 1 / 0)  # a failing undo never stops the others
    unregister(first)
    register("third", lambda: undone.append("third"))
    assert faults.revert_all() == ["third", "broken", "second"]
    assert undone == ["third", "second"] and not faults.ACTIVE
