"""Time a paused leader's recovery: fault onset → finding → demotion → producers back under the
line, and leadership restored after the fault.

Shared by ``bench/remediation_recover.py``, which times it over rounds (or over the fault
matrix's random draws with :func:`fault_round`) and whose smoke run is the suite's test of the
loop (``tests/bench/test_bench_smoke.py`` checks the order of its figures). The pieces
under test are the demo's (``testbed.demo``): the agents, the Spark analyzer and its
findings pipeline with the demo's remediation config (demote on ``slow_broker``, executed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from testbed import faults
from testbed.faults.partitions import partitions, wait_until_none
from testbed.load import ProducerLoad, brokers_leading, p99_ms, partition_leaders

P99_LINE_MS = 300.0
CALM_S = 3.0  # the producer's p99 must stay under the line this long to count as recovered
SETTLE_S = 10.0  # the first seconds of a fault still hold acks from before it
# The paused leader's pause per second. 400 ms puts the leaders' acks=all p99 (waiting on the
# paused follower) at 300-390 ms, on the slow-broker line itself (300 ms), once the pauses come
# on time (bench/results/remediation.md, 2026-11-24): a fault at the threshold is found in some
# rounds and not others. 500 ms is a broker clearly past the line.
PAUSE_MS = 500


def one_round(
    admin: Any,
    serve: ProducerLoad,
    active: Callable[[], bool],
    victim: int,
    pid: int,
    fault_s: float,
    topics: Sequence[str] = (),
    pause_ms: int = PAUSE_MS,
) -> dict[str, Any]:
    """Pause ``pid`` (broker ``victim``) ``pause_ms`` of every 1000 ms for at most ``fault_s`` and return
    the seconds from the onset to: ``finding`` (``active()`` first true), ``demoted`` (the victim
    leads no partition of ``serve``'s topic nor of ``topics``), ``recovered`` (the start of
    ``CALM_S`` seconds in a row with ``serve``'s ack p99 over the last 5 s under
    ``P99_LINE_MS``; :func:`fault_round`'s loop); None for a step not reached. Also ``crossed``,
    ``peak_p99_ms``, and ``onset_ms`` and
    ``removed_ms`` (wall clock, ms: to line the round up with the agents' windows), and
    ``pause_cycles`` / ``pause_max_late_ms`` (the fault as it was applied). The fault is
    removed on return (recovered, or ``fault_s`` over)."""
    onset_ms = int(time.time() * 1000)
    pause = faults.PauseDutyCycle(pid, pause_ms, 1000, own_process=True)
    r = fault_round(admin, lambda: [serve], active, [victim], pause, fault_s, topics=[serve.topic, *topics])
    return {
        **r,
        "onset_ms": onset_ms,
        "removed_ms": int(time.time() * 1000),
        "pause_cycles": pause.cycles,
        "pause_max_late_ms": pause.max_late_ms,
    }


def wait_restored(
    admin: Any,
    topic: str,
    victim: int,
    timeout_s: float,
    on_poll: Callable[[float], None] | None = None,
) -> float | None:
    """Seconds until ``victim`` leads a partition of ``topic`` again (None: not within
    ``timeout_s``). ``on_poll(waited_s)`` runs before each look (to time another step beside)."""
    start = time.monotonic()
    while (waited := time.monotonic() - start) < timeout_s:
        if on_poll is not None:
            on_poll(waited)
        if victim in partition_leaders(admin, topic).values():
            return time.monotonic() - start
        time.sleep(1.0)
    return None


def wait_whole(admin: Any, topics: Sequence[str], replicas: int, timeout_s: float) -> None:
    """Wait until every partition of ``topics`` has ``replicas`` replicas, all in sync (a
    remediation that dropped a slow follower restores it after its hold, and the next round must
    start from the whole replica sets its fault is set up on); SetupError naming the others."""

    def broken() -> list[str]:
        return [
            f"{t}-{p}"
            for (t, p), m in partitions(admin, list(topics)).items()
            if len(m["replica_nodes"]) != replicas or set(m["isr_nodes"]) != set(m["replica_nodes"])
        ]

    wait_until_none(broken, timeout_s, lambda left: f"replica sets not whole after {timeout_s:.0f} s: {left}")


def worst_p99_ms(loads: Sequence[ProducerLoad], window_s: float = 5.0) -> float | None:
    """The worst ack p99 (ms) over ``loads`` in the last ``window_s`` (None: too few acks)."""
    got = [p99_ms((lat for lat, _ in load.stats.recent(window_s)), min_samples=20) for load in loads]
    known = [p for p in got if p is not None]
    return max(known) if known else None


def fault_round(
    admin: Any,
    loads: Callable[[], Sequence[ProducerLoad]],
    active: Callable[[], bool],
    victims: Sequence[int],
    fault: Any,
    fault_s: float,
    topics: Sequence[str] = (),
) -> dict[str, Any]:
    """As :func:`one_round` for any fault: ``fault`` is a context manager that applies it (a
    drawn scenario of ``bench/fault_matrix.py``), ``loads()`` the producers running beside it
    (their worst ack p99 is the line's), ``victims`` the brokers it hits. Returns the seconds
    from the onset to ``finding``, ``demoted`` (no victim leads a partition of ``topics``),
    ``crossed`` (the p99 first at or over the line) and ``recovered`` (the start of ``CALM_S``
    seconds under the line after it crossed, or after ``SETTLE_S`` if it never did); None for a
    step not reached; ``peak_p99_ms``; ``last_p99_ms`` (:func:`p99_by_leader` at the end, read
    before the fault is undone)."""
    t: dict[str, float | None] = {"finding": None, "demoted": None, "crossed": None, "recovered": None}
    calm_since, peak = None, 0.0
    onset = time.monotonic()
    with fault:
        while (elapsed := time.monotonic() - onset) < fault_s:
            if t["finding"] is None and active():
                t["finding"] = elapsed
            if t["demoted"] is None and topics:
                leading = brokers_leading(admin, topics)
                if leading is not None and not set(victims) & leading:
                    t["demoted"] = elapsed
            p99 = worst_p99_ms(loads())
            peak = max(peak, p99 or 0.0)
            slow = p99 is None or p99 >= P99_LINE_MS
            if slow and p99 is not None and t["crossed"] is None:
                t["crossed"] = elapsed
            if elapsed > SETTLE_S and not slow:
                calm_since = calm_since if calm_since is not None else elapsed
                if elapsed - calm_since >= CALM_S:
                    t["recovered"] = calm_since
                    break
            else:
                calm_since = None
            time.sleep(0.5)
        # Read while the fault is on: its undo moves replicas and leaders back.
        last = p99_by_leader(admin, loads())
    return {**t, "peak_p99_ms": peak, "last_p99_ms": last}


def p99_by_leader(
    admin: Any, loads: Sequence[ProducerLoad], window_s: float = 5.0
) -> dict[str, float | None]:
    """Each producer's ack p99 (ms) over the last ``window_s``, per leader of the partitions it
    wrote (``topic@leader``): which producer, and behind which broker, held the line (a round
    that did not recover says whose acks waited)."""
    out: dict[str, float | None] = {}
    for load in loads:
        leaders = partition_leaders(admin, load.topic)
        by: dict[int, list[float]] = {}
        for lat, partition in load.stats.recent(window_s):
            by.setdefault(leaders.get(partition, -1), []).append(lat)
        for leader, lats in sorted(by.items()):
            out[f"{load.topic}@{leader}"] = p99_ms(lats, min_samples=5)
    return out
