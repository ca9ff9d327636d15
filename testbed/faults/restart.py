"""A planned rolling restart: each broker in turn stopped cleanly (SIGTERM: controlled shutdown,
its leaderships moved away first), started again with its data, and waited for until every
broker answers metadata, then the next. What an operator does for an upgrade or a config change;
nothing a detector should ask to remediate. Runs in a thread so the caller keeps measuring; the
block's end waits for it, and an early end (or ``revert_all``) starts any broker left stopped."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

from testbed.faults.registry import register, unregister


@contextlib.contextmanager
def rolling_restart(cluster: Any, node_ids: Sequence[int], gap_s: float = 10.0) -> Iterator[list[str]]:
    """``cluster`` is a :class:`testbed.cluster.LocalCluster`; yields the log of what was done
    (one line per step, with the time it took), complete when the block ends."""
    done: list[str] = []
    stop = threading.Event()
    stopped: set[int] = set()

    def start_stopped() -> None:
        for n in sorted(stopped):
            with contextlib.suppress(Exception):
                cluster.start_node(n)
            stopped.discard(n)

    def run() -> None:
        for n in node_ids:
            if stop.is_set():
                return
            t0 = time.monotonic()
            stopped.add(n)
            try:
                cluster.stop_node(n)
                cluster.start_node(n)
            except Exception as e:  # as an operator would: no next broker while one is not back
                done.append(f"broker {n} not back after {time.monotonic() - t0:.1f}s ({e}); restart stopped")
                return
            stopped.discard(n)
            done.append(f"broker {n} restarted in {time.monotonic() - t0:.1f}s")
            stop.wait(gap_s)

    token = register("rolling restart", start_stopped)
    thread = threading.Thread(target=run, name="rolling-restart", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        thread.join()
        stop.set()
        start_stopped()
        unregister(token)
