"""Starved request handlers: the broker's dynamic ``num.io.threads`` set low, so requests wait
in the request queue for a handler (its RequestQueue stage and RequestHandlerAvgIdlePercent
show it). Kafka takes a thread-count change only within half to double the count in force, so
the count is walked there and back step by step."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kafka.admin import ConfigResourceType

from testbed.faults.configs import apply, broker_config
from testbed.faults.registry import register, unregister


def _thread_steps(current: int, target: int) -> list[int]:
    """Kafka accepts a dynamic thread-count change only within [current/2, current*2]."""
    steps = []
    while current != target:
        current = max(target, (current + 1) // 2) if target < current else min(target, current * 2)
        steps.append(current)
    return steps


def _set_io_threads(admin, broker_id: int, current: int, target: int) -> None:
    # The broker validates each step against the value in force, hence _apply's wait.
    for n in _thread_steps(current, target):
        apply(admin, ConfigResourceType.BROKER, [str(broker_id)], {"num.io.threads": str(n)})


@contextlib.contextmanager
def starve_request_handlers(admin, broker_id: int, threads: int = 1) -> Iterator[None]:
    """Run broker ``broker_id`` with only ``threads`` I/O handler threads; restore on exit.

    Requests then wait for a handler: the RequestQueue stage and RequestHandlerAvgIdlePercent
    show it. The original count is restored step by step (Kafka allows halving/doubling only).
    """
    original = int(broker_config(admin, broker_id, "num.io.threads") or 8)
    _set_io_threads(admin, broker_id, original, threads)

    def undo() -> None:
        _set_io_threads(admin, broker_id, threads, original)

    token = register(f"starve broker {broker_id}", undo)
    try:
        yield
    finally:
        unregister(token)
        undo()
