"""A starved CPU: every thread of the broker JVM pinned to one CPU that spinning processes
share, so it gets about 1/(spinners + 1) of a core: its RequestQueue and Local stages grow. The
spinners run in sessions of their own (sched autogroup would otherwise share the core per
session) and stop by themselves if this process goes."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from linkwatch.errors import SetupError
from testbed.faults.registry import register, unregister


def _thread_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        raise SetupError(f"no process {pid}: is the broker running?") from None


def _set_thread_affinity(pid: int, mask: Callable[[int], set[int]]) -> dict[int, set[int]]:
    """Set ``mask(tid)`` on every thread of ``pid`` (affinity is per thread on Linux, and a JVM is
    many threads), again until no new thread appeared; returns each thread's mask before."""
    before: dict[int, set[int]] = {}
    while todo := [t for t in _thread_ids(pid) if t not in before]:
        for tid in todo:
            try:
                before[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, mask(tid))
            except ProcessLookupError:  # the thread ended meanwhile
                before[tid] = set()
    return {t: m for t, m in before.items() if m}


def _burn(cpu: int, parent: int, max_s: float) -> None:
    """Spin on ``cpu`` until the parent is gone or ``max_s`` passed (bounded even if the parent
    is killed before it can stop us). A session of its own: with sched autogroup on (the Linux
    default) CPU time is shared per session first, and a burner in the test's session would take
    the JVM's core only as one group, however many burners there are."""
    os.setsid()
    os.sched_setaffinity(0, {cpu})
    deadline = time.monotonic() + max_s
    while os.getppid() == parent and time.monotonic() < deadline:
        for _ in range(100_000):
            pass


@contextlib.contextmanager
def starve_cpu(
    pid: int, busy_processes: int = 3, cpu: int | None = None, max_s: float = 600.0
) -> Iterator[int]:
    """Pin every thread of the broker JVM ``pid`` to one CPU (``cpu``, default the highest one it
    may use) and run ``busy_processes`` spinning processes pinned to the same CPU, so the broker
    gets about 1/(busy_processes + 1) of one core: its RequestQueue and Local stages grow.
    Yields the CPU. On exit the spinners are killed and every thread gets back the affinity it
    had (threads started meanwhile get the process's original mask). Spinners also stop by
    themselves after ``max_s`` or when this process is gone."""
    import multiprocessing

    if not 1 <= busy_processes <= 8:
        raise ValueError(f"busy_processes={busy_processes} must be between 1 and 8")
    allowed = os.sched_getaffinity(pid) if os.path.exists(f"/proc/{pid}") else set()
    if not allowed:
        raise SetupError(f"no process {pid}: is the broker running?")
    cpu = max(allowed) if cpu is None else cpu
    if cpu not in allowed or cpu not in os.sched_getaffinity(0):
        raise SetupError(f"cpu {cpu} is not usable by both pid {pid} ({sorted(allowed)}) and this process")
    before: dict[int, set[int]] = {}
    procs: list[Any] = []

    def undo() -> None:
        for p in procs:
            p.kill()
        for p in procs:
            p.join(timeout=5)
        with contextlib.suppress(SetupError):
            _set_thread_affinity(pid, lambda tid: before.get(tid, allowed))

    token = register(f"starve cpu of pid {pid}", undo)
    try:
        before = _set_thread_affinity(pid, lambda tid: {cpu})
        ctx = multiprocessing.get_context("fork")  # the spinner needs nothing of this process
        for i in range(busy_processes):
            proc = ctx.Process(
                target=_burn, args=(cpu, os.getpid(), max_s), name=f"burn-{cpu}-{i}", daemon=True
            )
            proc.start()
            procs.append(proc)
        yield cpu
    finally:
        unregister(token)
        undo()
