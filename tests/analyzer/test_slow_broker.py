"""Slow-broker rule table: one row per scenario, including the no-false-positive rows."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.slow_broker import SlowBrokerConfig, SlowBrokerDetector, broker_scores, evaluate, walk_score
from findings.policy import Action, FindingPolicyConfig, PolicyRule, decide
from linkwatch.aggregates import Aggregates, BrokerStartWindow, ClientWindow, StageWindow
from linkwatch.records import Finding

WINDOW_S = 10
T0 = 1_700_000_000_000
STAGES = ("requestQueue", "local", "remote", "responseQueue", "send", "throttle")


def window(i: int) -> int:
    return T0 + i * WINDOW_S * 1000


def broker_rows(
    broker: int,
    i: int,
    p99: float,
    count: int = 100,
    logged: int | None = None,
    stage: str = "local",
    request: str = "Produce",
    stage_p99: dict[str, float] | None = None,
    waited: dict[str, float] | None = None,
    saturated: int = 0,
) -> list[StageWindow]:
    """A broker's rows for one window: total p99 and stage p99s, the excess on ``stage``;
    ``stage_p99`` sets single stages' p99 exactly (others as before); ``waited`` single stages'
    p99 of the values above zero (``nonzero_p99_ms``, else none); ``logged`` is ``count``
    unless sampled capture logged fewer; ``saturated`` the client connections its agent saw
    served back to back (on the total row, of 8 served)."""
    rows = []
    for s in (*STAGES, "total"):
        v = p99 if s == "total" else (max(p99 - 15.0, 3.0) if s == stage else 3.0)
        v = (stage_p99 or {}).get(s, v)
        rows.append(
            StageWindow(
                broker=broker,
                request=request,
                stage=s,
                window_start_ms=window(i),
                count=count,
                logged=count if logged is None else logged,
                p50_ms=v / 4,
                p99_ms=v,
                p999_ms=v * 1.2,
                nonzero_p99_ms=(waited or {}).get(s),
                mean_ms=v / 3,
                connections=8 if s == "total" else 0,
                saturated_connections=saturated if s == "total" else 0,
            )
        )
    return rows


def scenario(n_windows: int, brokers: int, special: dict[int, dict[int, dict]]) -> Aggregates:
    """Every broker at p99 20 ms / 100 requests, except ``special[broker][window]`` kwargs.

    ``clients={client_id: send_ms}`` in a window adds the agent's slow-request exemplars of
    those clients (three each) on that broker, as spark_metrics collects them;
    ``jvm_started_ms=t`` the JVM start time its agent read in that window."""
    rows, clients, starts = [], [], []
    for i in range(n_windows):
        for b in range(brokers):
            kw = dict(special.get(b, {}).get(i, {}))
            if "jvm_started_ms" in kw:
                starts.append(
                    BrokerStartWindow(
                        broker=b, window_start_ms=window(i), started_ms=kw.pop("jvm_started_ms")
                    )
                )
            if kw.get("absent"):  # the broker logged nothing in this window
                continue
            for cid, send_ms in kw.pop("clients", {}).items():
                clients.append(
                    ClientWindow(
                        broker=b,
                        request=kw.get("request", "Produce"),
                        client_id=cid,
                        window_start_ms=window(i),
                        count=3,
                        send_ms_max=send_ms,
                        throttle_ms_max=0.0,
                    )
                )
            rows.extend(broker_rows(b, i, **({"p99": 20.0} | kw)))
    return Aggregates(
        cluster="c1", window_s=WINDOW_S, broker_stages=rows, client_windows=clients, broker_starts=starts
    )


SLOW = {"p99": 800.0}


# Busy brokers of the fault matrix: total p99 78 ms, most of it replication (acks=all).
BUSY_STAGES = {
    "requestQueue": 2.0,
    "local": 2.2,
    "remote": 70.0,
    "responseQueue": 0.5,
    "send": 0.4,
    "throttle": 0.0,
}
BUSY = {"p99": 78.0, "stage_p99": BUSY_STAGES}


def jitter(b: int, i: int) -> dict:
    """Healthy brokers whose stage p99s wander between windows (0.5–6 ms, total 30–70 ms)."""
    k = (7 * b + 3 * i) % 11
    stages = {"requestQueue": 0.5 + k / 2, "local": 1.0 + (k * 5 % 11) / 2, "remote": 20.0 + 3 * k}
    return {"p99": 30.0 + 4 * k, "stage_p99": {**BUSY_STAGES, **stages}}


def tiny(local_ms: float) -> dict:
    """A quiet cluster: every stage under a few ms; ``local`` as given."""
    return {"p99": 8.0, "stage_p99": {s: 0.7 for s in STAGES} | {"local": local_ms}}


def slow_in(windows, **kw) -> dict[int, dict]:
    return {i: SLOW | kw for i in windows}


def paused(i: int) -> dict:
    """A broker paused most of the time (Rule 9): a request it had read waits the pause out in
    one of its own stages (mostly the request queue), and it waits in remote too."""
    own = "requestQueue" if i % 4 else "responseQueue"
    return {"p99": 980.0, "count": 40, "stage_p99": {**BUSY_STAGES, "remote": 900.0, own: 907.0}}


def waiting(p99: float) -> dict:
    """A healthy leader waiting in remote on a stalled follower: own stages normal."""
    return {"p99": p99, "stage_p99": {**BUSY_STAGES, "requestQueue": 20.0, "local": 5.0, "remote": p99 - 10}}


# Below the line, but its own acks=all requests wait in remote too (over Rule 5's 0.25 × the
# waiting leaders'): the broker a paused broker leaves out is itself.
LEFT_OUT = {"p99": 200.0, "stage_p99": {**BUSY_STAGES, "remote": 190.0}}


def now_after(n_windows: int) -> int:
    return window(n_windows)


def jvm(started_ms: int, windows, then: dict[int, dict] | None = None) -> dict[int, dict]:
    """A broker's agent reading its JVM's start time ``started_ms`` in every window of
    ``windows``, merged into the broker's other window kwargs ``then``."""
    then = then or {}
    return {i: {"jvm_started_ms": started_ms} for i in windows} | {
        i: kw | ({"jvm_started_ms": started_ms} if i in windows else {}) for i, kw in then.items()
    }


def sub_window_restart(jvm_restarts: bool) -> dict[int, dict[int, dict]]:
    """A restart shorter than a window, as the fault matrix's rolling restart showed it: broker
    2 shuts down in window 8 (its leadership moved away: it serves nothing, and leaders 0 and 1
    wait on it in remote while the moved partitions' followers catch up), is back in window 9
    with a new JVM, and leads again in windows 10-13 with a cold cache (its local work slow).
    It has rows in every window, so it is never absent. ``jvm_restarts`` False: the same rows
    with the same JVM throughout (a stall, not a restart)."""
    old, new = window(0) - 3_600_000, window(9) + 2_000
    broker2 = {8: {"count": 0, "p99": 20.0}} | {i: SLOW | {"stage": "local"} for i in range(10, 14)}
    if jvm_restarts:
        starts = jvm(old, range(9), broker2) | jvm(new, range(9, 14), broker2)
    else:
        starts = jvm(old, range(14), broker2)
    return {
        0: jvm(old - 5, range(14), slow_in([8, 9], stage="remote")),
        1: jvm(old - 9, range(14), slow_in([8, 9], stage="remote")),
        2: starts,
    }


# Rule 12, shaped like the fault matrix's run 4 (leader paused 900/1000 ms, 10 s windows): the
# paused broker served 132-159 logged requests against its own ~800 before and its peers' ~900,
# its own acks=all requests waiting out its pauses in remote (907 ms) in some windows, so Rule
# 5's "one broker not waiting" was a healthy one. Here: 100 requests a window, 18 when paused.
FEW = {"count": 18}
PAUSED_WAITING = FEW | {"p99": 907.0, "stage_p99": {**BUSY_STAGES, "remote": 900.0}}


def paused_900(b: int) -> dict[int, dict]:
    """Windows 0-7 healthy; from 8 broker 2 paused: W02 Q Q W02 Q W0 W01 W01, where W02 has
    brokers 0 and 2 waiting above the line (1 left out), Q nobody waiting (2 serving few), W0
    broker 0 waiting alone and W01 brokers 0 and 1 waiting."""
    shapes = ["W02", "Q", "Q", "W02", "Q", "W0", "W01", "W01"]
    out: dict[int, dict] = {}
    for k, shape in enumerate(shapes):
        i = 8 + k
        if b == 2:
            out[i] = PAUSED_WAITING if shape == "W02" else FEW
        elif b == 0 or (b == 1 and shape == "W01"):
            out[i] = waiting(780.0) if shape != "Q" else {}
    return out


def stalled_below_line(b: int) -> dict[int, dict]:
    """Windows 0-7 healthy; from 8 broker 2 stalls as a follower 400/1000 ms: it serves about half
    its requests, its own remote 0 (it leads none of the acks=all partitions), its leaders wait
    150-250 ms in remote, under the slow line (the fault matrix's stalled follower, run 4)."""
    if b == 2:
        return {
            i: {"count": 55, "p99": 30.0, "stage_p99": {**BUSY_STAGES, "remote": 0.0}} for i in range(8, 16)
        }
    return {i: waiting(150.0 + 10 * ((i + b) % 10)) for i in range(8, 16)}


# The fault matrix's run 6, Produce, 10 s windows, from the onset (broker ids 1, 3, 2 as 0, 1, 2):
# the two leaders' total p99 in the fault windows, remote carrying nearly all of it. Only one of
# them is above the 300 ms line in most windows; the other waits 99-347 ms.
RUN6_STALLED = ((384, 268), (347, 99), (321, 262), (334, 176), (347, 302), (273, 347), (369, 268), (340, 334))
RUN6_PAUSE_400 = (
    (369, 279),
    (334, 228),
    (284, 302),
    (369, 211),
    (361, 334),
    (347, 224),
    (308, 268),
    (314, 242),
)


# Broker 2's logged requests in those windows against its baseline, the leaders' at 0.95 of
# theirs: Rule 12 reads it as serving few (at most 0.65 × 0.95) in one window only.
RUN6_STALLED_COUNTS = (62, 57, 62, 65, 65, 63, 67, 65)


def leaders_of_run6(b: int, totals: tuple[tuple[int, int], ...], follower: dict) -> dict[int, dict]:
    """Windows 0-7 healthy, then the leaders (0, 1) wait as run 6's did and broker 2 is ``follower``
    (its ``count`` per window from ``RUN6_STALLED_COUNTS`` when it sets none)."""
    if b == 2:
        return {8 + k: {"count": RUN6_STALLED_COUNTS[k]} | follower for k in range(len(totals))}
    return {8 + k: waiting(float(pair[b])) | {"count": 95} for k, pair in enumerate(totals)}


# The fault matrix's run 10, Produce, 10 s windows from the onset (broker ids 1, 3, 2 as 0, 1, 2):
# per window, broker 1's and broker 3's remote p99 and the three brokers' logged requests against
# their usual (100 here). Broker 2 is paused 400/1000 ms. Stalled follower: it leads no acks=all
# partition (its remote 0 ms) and serves 0.54-0.59 of its usual, not few enough for Rule 12;
# broker 1 is degraded in remote in six of the eight windows, broker 3 barely waits. Leader
# paused: broker 2 leads too (its remote 2-5 ms) and serves about its usual; broker 1 is degraded in
# the first two windows only (the rows judge those).
RUN10_STALLED = (
    (215, 44, 76, 86, 54),
    (14, 5, 83, 89, 58),
    (268, 18, 79, 87, 58),
    (15, 4, 81, 90, 58),
    (34, 27, 84, 90, 59),
    (35, 16, 81, 92, 58),
    (233, 14, 77, 90, 58),
    (28, 10, 83, 92, 57),
)
RUN10_PAUSE_400 = (
    (67, 21, 105, 110, 93, 5),
    (111, 17, 99, 108, 91, 5),
    (19, 20, 106, 106, 94, 5),
    (24, 9, 96, 100, 97, 3),
    (13, 30, 105, 92, 90, 3),
    (21, 15, 94, 96, 98, 2),
)


def run10(b: int, frames: tuple[tuple[int, ...], ...]) -> dict[int, dict]:
    """Windows 0-7 healthy (remote 2 ms, total 5 ms), then run 10's frames: (broker 0's remote,
    broker 1's remote, the three brokers' counts, broker 2's remote or 0)."""
    out: dict[int, dict] = {i: {"p99": 5.0, "stage_p99": {**BUSY_STAGES, "remote": 2.0}} for i in range(8)}
    for k, frame in enumerate(frames):
        remote = float(frame[b]) if b < 2 else float(frame[5] if len(frame) > 5 else 0)
        out[8 + k] = {
            "count": frame[2 + b],
            "p99": remote + 8.0,
            "stage_p99": {**BUSY_STAGES, "remote": remote},
        }
    return out


# Fault-matrix runs 9 and 11, Produce's remote per window: the mixed p99 of the run's brokers 1
# and 3 (0 and 1 here) and broker 2 (most requests acks=1, remote 0), then their p99 of the
# requests that waited (acks=all), rounded. Broker 2 is paused 400/1000 ms while it leads too;
# nobody is degraded in the mixed p99 in most windows, while the leaders' acks=all requests wait
# out its pauses.
RUN9_PAUSE_400 = (
    ((28, 25, 13), (400, 392, 60)),
    ((133, 29, 9), (400, 392, 56)),
    ((21, 22, 5), (392, 400, 27)),
    ((32, 12, 4), (376, 392, 19)),
    ((268, 19, 5), (392, 392, 11)),
    ((4, 5, 4), (392, 384, 8)),
)
# Run 11: broker 2 stalled while it follows every acks=all partition and leads none.
RUN11_STALLED = (
    ((27, 15, 0), (400, 408, 0)),
    ((10, 12, 0), (400, 400, 0)),
    ((7, 7, 0), (400, 400, 0)),
    ((6, 7, 0), (400, 400, 0)),
    ((7, 4, 0), (392, 400, 0)),
    ((21, 22, 0), (400, 400, 0)),
)
# Run 22: broker 2 paused 400/1000 ms while it leads. Its peers' acks=all requests wait on it
# (first frame), then in one window its own waited as long (its pauses), then they wait on it again.
RUN22_PAUSE_400 = (
    ((13, 17, 9), (384, 327, 24)),
    ((28, 47, 13), (399, 399, 408)),
    ((8, 56, 9), (392, 392, 17)),
)
# The same, with the peers' waits back to normal in the window between (no sign of the fault).
RUN22_PAUSE_400_GAP = (RUN22_PAUSE_400[0], ((28, 30, 13), (30, 35, 28)), RUN22_PAUSE_400[2])
# Two all-waiting windows in a row: the hold is for one window only.
RUN22_PAUSE_400_TWICE = (*RUN22_PAUSE_400[:2], RUN22_PAUSE_400[1], RUN22_PAUSE_400[2])


def run22_handlers(b: int) -> dict[int, dict]:
    """Run 22's handlers starved (one I/O thread held by flushed appends on a capped disk),
    Produce, brokers 1, 3, 2 of the run as 0, 1, 2: four healthy windows, then broker 2's
    request queue out of line in two, its total above the line (478 ms) in the first and just
    under it (296 ms) in the second. (count, total, requestQueue, local, remote, responseQueue)."""
    frames = (
        ((1041, 30, 13, 3, 9, 4), (800, 12, 5, 2, 10, 2), (891, 32, 8, 2, 11, 7)),
        ((912, 22, 6, 2, 7, 3), (683, 24, 10, 4, 10, 3), (819, 25, 14, 3, 12, 4)),
        ((909, 29, 9, 2, 10, 4), (714, 31, 24, 3, 15, 3), (675, 478, 237, 5, 21, 5)),
        ((837, 19, 8, 2, 6, 4), (695, 33, 12, 2, 11, 5), (636, 296, 279, 3, 9, 4)),
    )
    out = {}
    for i, f in enumerate((frames[0], frames[1], *frames)):
        n, total, rq, local, remote, rsq = f[b]
        stages = {"requestQueue": rq, "local": local, "remote": remote, "responseQueue": rsq}
        out[i] = {"count": n, "p99": float(total), "stage_p99": {**BUSY_STAGES, **stages}}
    return out


# The waited p99s of the 15-minute bursty soaks' windows nearest to telling one broker apart
# (run 9: 5.8x but 14 ms; run 8: 24.8 and 23.8 ms against 7.8 ms), the lowest as broker 2; the
# mixed p99s the soaks' usual 2-4 ms.
SOAK_WAITED = (
    ((3, 3, 2), (17, 18, 3)),
    ((2, 3, 4), (4, 19, 21)),
    ((3, 4, 2), (13, 17, 3)),
    ((4, 3, 3), (24, 8, 25)),
    ((3, 4, 3), (33, 38, 9)),
    ((3, 2, 3), (18, 4, 17)),
)


def waits(b: int, frames: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]) -> dict[int, dict]:
    """Windows 0-7 healthy (remote 2 ms, the requests that waited 5 ms), then the frames'
    (mixed remote p99s, waited remote p99s), broker ``b``'s of each; a waited 0 is none."""
    out: dict[int, dict] = {
        i: {"p99": 12.0, "stage_p99": {**BUSY_STAGES, "remote": 2.0}, "waited": {"remote": 5.0}}
        for i in range(8)
    }
    for k, (mixed, waited) in enumerate(frames):
        out[8 + k] = {
            "p99": mixed[b] + 10.0,
            "stage_p99": {**BUSY_STAGES, "remote": float(mixed[b])},
            "waited": {"remote": float(waited[b])} if waited[b] else {},
        }
    return out


def long_poll(p99: float) -> dict:
    """A consumer fetch that waits out fetch.max.wait.ms in purgatory (remote): by design."""
    return {"request": "FetchConsumer", "p99": p99, "stage_p99": {**BUSY_STAGES, "remote": p99 - 5}}


def slow_disk(b: int, victim: int, fault: dict) -> dict[int, dict]:
    """Run 15's shape: 6 healthy windows (1,500 requests, local 0.8 ms), then 8 with ``fault`` on
    the victim and its peers waiting ~700 ms on it in remote, serving about half as many."""
    healthy = {"count": 1500, "p99": 15.0, "stage_p99": {"requestQueue": 5.0, "local": 0.8, "remote": 4.0}}
    waiting = {"count": 800, "p99": 700.0, "stage_p99": {"requestQueue": 3.0, "local": 0.9, "remote": 699.0}}
    return {i: healthy if i < 6 else fault if b == victim else waiting for i in range(14)}


CASES = [
    # (id, windows, brokers, special, expected {(rule, subject): stage or None})
    ("healthy", 8, 3, {}, {}),
    ("slow broker 2, disk", 8, 3, {2: slow_in(range(3, 8))}, {("slow_broker", "broker:2"): "local"}),
    ("low traffic broker", 8, 3, {2: slow_in(range(8), count=5)}, {}),
    # Sampled capture at stride 6: 60 requests served (estimated), 10 logged; the p99 of 10 is
    # their maximum. The guard reads the logged 10 (min_requests 20), not the 60.
    ("low traffic broker, sampled 1/6", 8, 3, {2: slow_in(range(8), count=60, logged=10)}, {}),
    (
        "slow broker, sampled 1/6 with enough logged",
        8,
        3,
        {2: slow_in(range(3, 8), count=600, logged=100)},
        {("slow_broker", "broker:2"): "local"},
    ),
    ("one noisy window", 8, 3, {2: slow_in([7])}, {}),
    ("two noisy windows apart", 8, 3, {2: slow_in([2, 6])}, {}),
    (
        "cluster-wide slowdown",
        8,
        3,
        {b: slow_in(range(8)) for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    ("cold start", 1, 3, {2: slow_in(range(1))}, {}),
    ("recovered broker", 8, 3, {2: slow_in(range(4))}, {}),
    (
        "above peers, below 300 ms: degraded, not slow",
        8,
        3,
        {2: {i: {"p99": 200.0} for i in range(8)}},
        {("degraded_broker", "broker:2"): "local"},
    ),
    # A slow disk under pipelining producers (the recovery bench's slow-disk draws): each produce
    # served in 200 ms, under the line, while the broker serves three clients' connections back
    # to back; its peers serve the acks=all producer's back to back too (waiting on it).
    (
        "below the line, its clients queued behind it: slow",
        8,
        3,
        {
            2: {i: {"p99": 200.0, "saturated": 3 if i >= 3 else 0} for i in range(8)},
            0: {i: {"saturated": 1 if i >= 3 else 0} for i in range(8)},
            1: {i: {"saturated": 1 if i >= 3 else 0} for i in range(8)},
        },
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "below the line, its clients queued from the fault on after a known level: slow",
        16,
        3,
        {2: {i: {"p99": 200.0 if i >= 11 else 20.0, "saturated": 3 if i >= 11 else 1} for i in range(16)}},
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "clients queued on a healthy broker (a client faster than one broker): nothing",
        8,
        3,
        {2: {i: {"saturated": 3} for i in range(8)}},
        {},
    ),
    (
        "below the line, its clients as queued as always: degraded, not slow",
        16,
        3,
        {2: {i: {"p99": 200.0 if i >= 11 else 20.0, "saturated": 2} for i in range(16)}},
        {("degraded_broker", "broker:2"): "local"},
    ),
    (
        "below the line, every broker's clients queued alike: degraded, not slow",
        8,
        3,
        {
            2: {i: {"p99": 200.0, "saturated": 2 if i >= 3 else 0} for i in range(8)},
            0: {i: {"saturated": 2 if i >= 3 else 0} for i in range(8)},
            1: {i: {"saturated": 2 if i >= 3 else 0} for i in range(8)},
        },
        {("degraded_broker", "broker:2"): "local"},
    ),
    (
        "below the line, its clients queued in one window: degraded, not slow",
        8,
        3,
        {2: {i: {"p99": 200.0, "saturated": 3 if i == 7 else 0} for i in range(8)}},
        {("degraded_broker", "broker:2"): "local"},
    ),
    (
        "above 300 ms, not 2x peers",
        8,
        3,
        {
            2: {i: {"p99": 400.0} for i in range(8)},
            0: {i: {"p99": 250.0} for i in range(8)},
            1: {i: {"p99": 250.0} for i in range(8)},
        },
        {},
    ),
    (
        "queue stage",
        8,
        3,
        {1: slow_in(range(8), stage="requestQueue")},
        {("slow_broker", "broker:1"): "requestQueue"},
    ),
    (
        "send stage: a slow client, no exemplar names it",
        8,
        3,
        {0: slow_in(range(8), stage="send")},
        {("slow_client", "client:unknown@broker:0"): "send"},
    ),
    (
        "response queue stage",
        8,
        3,
        {0: slow_in(range(8), stage="responseQueue")},
        {("slow_broker", "broker:0"): "responseQueue"},
    ),
    (
        "leader waits on a flagged follower",
        8,
        5,
        {3: slow_in(range(8)), 0: slow_in(range(8), stage="remote")},
        {("slow_broker", "broker:3"): "local"},
    ),
    (
        "stalled follower: two leaders wait in remote, broker 2 looks normal",
        8,
        3,
        {0: slow_in(range(3, 8), stage="remote"), 1: slow_in(range(3, 8), stage="remote")},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "stalled follower serving too few requests to judge (a paused JVM): still the suspect",
        8,
        3,
        {
            0: slow_in(range(3, 8), stage="remote"),
            1: slow_in(range(3, 8), stage="remote"),
            2: {i: {"count": 4, "p99": 450.0} for i in range(3, 8)},
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "stalled follower silent in its windows (a paused JVM logs nothing): still the suspect",
        8,
        3,
        {
            0: slow_in(range(3, 8), stage="remote"),
            1: slow_in(range(3, 8), stage="remote"),
            2: {i: {"absent": True} for i in range(3, 8)},
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "stalled follower, one noisy window",
        8,
        3,
        {0: slow_in([7], stage="remote"), 1: slow_in([7], stage="remote")},
        {},
    ),
    (
        "all three wait in remote: cluster-wide, no follower to blame",
        8,
        3,
        {b: slow_in(range(8), stage="remote") for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    # -- Rule 10: windows where everyone waits in remote, around windows naming one broker ------
    (
        "stalled follower; in windows 4 and 7 all three wait: broker 2's, not cluster-wide",
        8,
        3,
        {b: {i: waiting(450.0) for i in range(2, 8) if b != 2 or i in (4, 7)} for b in range(3)},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        # The live e2e's shape (2 s windows, leader paused 400/1000): brokers 0 and 2 wait on 1
        # for two windows, then all three wait (1's own acks=all requests wait out its pauses).
        # Those windows are 1's (Rule 10) and hold its score: counted healthy, one cleared the
        # finding and the next raised it again.
        "stalled follower named twice, then everyone waits, itself too: its finding holds",
        10,
        3,
        {
            0: {i: waiting(450.0) for i in range(6, 10)},
            1: {i: waiting(430.0) for i in (8, 9)},
            2: {i: waiting(420.0) for i in range(6, 10)},
        },
        {("slow_broker", "broker:1"): "remote"},
    ),
    (
        "everyone waits, the windows between name different brokers (paused in turn): cluster-wide",
        10,
        3,
        {b: {i: waiting(450.0) for i in range(1, 10) if (i, b) not in ((4, 0), (8, 1))} for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        # Every broker paused out of phase (the fault matrix's all_slow, run 4's d22): in most
        # windows everyone waits; in two, broker 0 happened to wait less and was told apart. The
        # episode's usual reading is "everyone waits": those two do not make it broker 0's (they
        # did, and the cluster finding cleared mid-fault, then fired again).
        "everyone waits in most windows, two name broker 0: cluster-wide, not broker 0's",
        10,
        3,
        {b: {i: waiting(450.0) for i in range(1, 10) if b != 0 or i not in (4, 7)} for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        # The cluster finding's own hysteresis holds it through two windows naming one broker;
        # a broker finding is not raised new inside it either.
        "everyone waits, then the last two windows name broker 0: the cluster's finding holds alone",
        10,
        3,
        {b: {i: waiting(450.0) for i in range(1, 10) if b != 0 or i < 8} for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        # A stall confined to one window (a burst, the scheduler of a busy host, one long GC):
        # broker 2's own queue and its peers' waits above the line, then all in line. Two
        # families fire the early warning at once; a remediation acts only on a stall that
        # persists (slow_min_windows), and this one was over before any action could land.
        "broker 2 stalls in one window above the line, then is in line: an early warning, not remediable",
        8,
        3,
        {2: {6: paused(6)}, 0: {6: waiting(450.0)}, 1: {6: waiting(450.0)}},
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        # The first stall (its own work alone, one family) never fires and its score decays; a
        # second one eight windows later is a stall of its own, not the first one going on.
        "broker 2 stalls alone in one window, then in another far later: an early warning, not remediable",
        12,
        3,
        {2: {1: SLOW, 9: paused(9)}, 0: {9: waiting(450.0)}, 1: {9: waiting(450.0)}},
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        # Broker 2 paused four windows, then back; in the two windows after, broker 1 (the
        # follower beside it) stalls while their replication is re-established (fetch sessions,
        # the ISR, broker 2's catch-up reads): a broker coming back from a stall, as from a
        # restart. Broker 1's finding is not raised new while broker 2 comes back.
        "broker 2 paused, then back; broker 1 stalls in the two windows after: broker 2 alone",
        8,
        3,
        {
            2: {i: paused(i) for i in range(2, 6)},
            0: {i: waiting(450.0) for i in range(2, 8)},
            1: {i: waiting(450.0) for i in range(2, 6)} | {6: paused(6), 7: paused(7)},
        },
        {("slow_broker", "broker:2"): "requestQueue"},
    ),
    (
        "broker 2 stalls in two windows in a row: slow, remediable",
        8,
        3,
        {
            2: {5: paused(5), 6: paused(6)},
            0: {5: waiting(450.0), 6: waiting(450.0)},
            1: {5: waiting(450.0), 6: waiting(450.0)},
        },
        {("slow_broker", "broker:2"): "requestQueue"},
    ),
    (
        # The live e2e's shape on a quiet machine: broker 2 named once (Rule 9), then left out
        # below the line while 0 and 1 wait on it (its own remote too high for Rule 5's check),
        # or all three wait.
        # Its first window has two families of evidence against it (its own stage out of line,
        # its peers waiting on it), which fires at once; the windows after it leave it out or
        # have everyone waiting, and are its (held), not the cluster's: they continue its fault
        # above the line, so it is slow (remediable) from the second window on.
        "paused broker 2 named once, then left out or everyone waiting: broker 2, not cluster-wide",
        10,
        3,
        {
            0: {i: waiting(450.0) for i in range(2, 10)},
            1: {i: waiting(450.0) for i in range(2, 10)},
            2: {2: paused(2)} | {i: waiting(450.0) for i in (4, 6, 8)} | {i: LEFT_OUT for i in (3, 5, 7, 9)},
        },
        {("slow_broker", "broker:2"): "requestQueue"},
    ),
    (
        "named once, but the brokers left out vary (each slowed alike in turn): cluster-wide",
        10,
        3,
        {
            b: {i: waiting(450.0) for i in range(2, 10) if (i, b) not in ((3, 0), (5, 1), (7, 0), (9, 1))}
            | ({i: LEFT_OUT for i in range(3, 10) if (i, b) in ((3, 0), (5, 1), (7, 0), (9, 1))})
            | ({2: paused(2)} if b == 2 else {})
            for b in range(3)
        },
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        "idle consumers: every broker's fetches wait out their long poll (500 ms) in remote",
        8,
        3,
        {
            b: {i: {"request": "FetchConsumer", "p99": 500.0, "stage": "remote"} for i in range(8)}
            for b in range(3)
        },
        {},
    ),
    (
        # The fault matrix's soak (10 s windows): one broker's consumers waited out their polls
        # (FetchConsumer 520 ms, the wait in remote) while the others' fetches returned data.
        "one broker's consumers wait out their long poll, the others' get data: no finding",
        8,
        3,
        {
            b: {
                i: {"request": "FetchConsumer", "p99": 520.0 if b == 1 else 60.0, "stage": "remote"}
                for i in range(8)
            }
            for b in range(3)
        },
        {},
    ),
    (
        "two leaders slow on disk, not remote: cluster-wide",
        8,
        3,
        {0: slow_in(range(8)), 1: slow_in(range(8))},
        {("cluster_slow", "cluster:c1"): None},
    ),
    # -- Rule 8: degraded below the absolute threshold (shapes from the fault matrix) ---------
    (
        "degraded: CPU starved, queue 35 ms against 2 ms, total 120 against 78",
        8,
        3,
        {
            b: {
                i: BUSY
                | (
                    {"p99": 120.0, "stage_p99": {**BUSY_STAGES, "requestQueue": 35.0}}
                    if b == 2 and i >= 2
                    else {}
                )
                for i in range(8)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        # The fault matrix's CPU starvation: the queue out of line in most windows, and in one a
        # replication wait far larger (remote 240 against 70 ms) that outweighed them summed.
        "degraded: CPU starved, the queue in 5 windows, one replication outlier: the queue",
        8,
        3,
        {
            b: {i: {"p99": 40.0, "stage_p99": {**BUSY_STAGES, "remote": 30.0}} for i in range(8)}
            | (
                {
                    i: {"p99": 80.0, "stage_p99": {**BUSY_STAGES, "remote": 30.0, "requestQueue": 25.0}}
                    for i in range(2, 8)
                }
                | {5: {"p99": 250.0, "stage_p99": {**BUSY_STAGES, "remote": 200.0}}}
                if b == 2
                else {}
            )
            for b in range(3)
        },
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        "degraded: slow log appends, local 40 ms against 2.2 ms",
        8,
        3,
        {
            b: {
                i: BUSY | ({"p99": 125.0, "stage_p99": {**BUSY_STAGES, "local": 40.0}} if b == 1 else {})
                for i in range(8)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:1"): "local"},
    ),
    # -- A broker's own usual level (step 1): its layout is no warning, a departure is -------
    (
        # Broker 1 leads the heavy partitions: its appends always take 40 ms against its peers'
        # 2.2, under the line. Blamed by its peers alone over the lookback's first
        # usual_min_windows (no level yet), then that level is its usual: healthy after it.
        "no finding: above its peers in every window, under the line: its layout, not a warning",
        20,
        3,
        {
            b: {
                i: BUSY | ({"p99": 125.0, "stage_p99": {**BUSY_STAGES, "local": 40.0}} if b == 1 else {})
                for i in range(20)
            }
            for b in range(3)
        },
        {},
    ),
    (
        # The same 40 ms arriving after 12 windows in line: a departure from its own level too.
        "degraded: the same appends after 12 windows in line, a change",
        20,
        3,
        {
            b: {
                i: BUSY
                | ({"p99": 125.0, "stage_p99": {**BUSY_STAGES, "local": 40.0}} if b == 1 and i >= 12 else {})
                for i in range(20)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:1"): "local"},
    ),
    (
        # A departure is never its own level, however long it lasts within the lookback: 10
        # windows in line, then 20 of slow appends under the line, still a departure at the end.
        "degraded: a departure of 20 windows after 10 in line is not learnt as its level",
        30,
        3,
        {
            b: {
                i: BUSY
                | ({"p99": 125.0, "stage_p99": {**BUSY_STAGES, "local": 40.0}} if b == 1 and i >= 10 else {})
                for i in range(30)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:1"): "local"},
    ),
    (
        # A leader whose followers are far: its acks=all requests always wait 200 ms (over
        # wait_floor_ms, its total under the line) and no broker explains it (six brokers, none
        # told apart). Its usual wait, once learnt: nothing to warn about.
        "no finding: a leader's acks=all wait always over the floor, under the line: its layout",
        20,
        6,
        {0: {i: {"p99": 230.0, "stage": "remote", "waited": {"remote": 200.0}} for i in range(20)}},
        {},
    ),
    (
        "degraded: the same wait after 12 windows at 30 ms, nobody explaining it, a change",
        20,
        6,
        {
            0: {
                i: {
                    "p99": 230.0 if i >= 12 else 40.0,
                    "stage": "remote",
                    "waited": {"remote": 200.0 if i >= 12 else 30.0},
                }
                for i in range(20)
            }
        },
        {("degraded_broker", "broker:0"): "remote"},
    ),
    # -- Rule 11: the request queue backs up behind a slow disk ------------------------------
    (
        # The fault matrix's slow disk (flush on every message): the handlers block in the
        # append, and the requests behind them wait longer in the queue than the append takes.
        "degraded: slow log appends, the queue backs up behind them (queue 60 ms, local 16 ms)",
        8,
        3,
        {
            b: {
                i: BUSY
                | (
                    {"p99": 140.0, "stage_p99": {**BUSY_STAGES, "requestQueue": 60.0, "local": 16.0}}
                    if b == 2 and i >= 2
                    else {}
                )
                for i in range(8)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:2"): "local"},
    ),
    (
        # The same queue with local in line (3 ms against 2.2): a CPU or handler-thread cause.
        "degraded: the queue backs up, local in line: the queue",
        8,
        3,
        {
            b: {
                i: BUSY
                | (
                    {"p99": 140.0, "stage_p99": {**BUSY_STAGES, "requestQueue": 60.0, "local": 3.0}}
                    if b == 2 and i >= 2
                    else {}
                )
                for i in range(8)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        "slow disk above the line: the queue's excess is the disk's",
        8,
        3,
        {2: slow_in(range(3, 8), stage_p99={"requestQueue": 600.0, "local": 90.0})},
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "slow queue above the line, local in line: the queue",
        8,
        3,
        {2: slow_in(range(3, 8), stage_p99={"requestQueue": 600.0, "local": 5.0})},
        {("slow_broker", "broker:2"): "requestQueue"},
    ),
    ("degraded: normal jitter", 8, 3, {b: {i: jitter(b, i) for i in range(8)} for b in range(3)}, {}),
    (
        # The fault matrix's CPU starvation (run 4): 16.3 ms against 0.2 ms, under the old 20 ms floor.
        "degraded: a starved CPU's request queue, 16 ms against 0.2 ms",
        8,
        3,
        {
            b: {
                i: tiny(0.7)
                | {"stage_p99": {**tiny(0.7)["stage_p99"], "requestQueue": 16.3 if b == 2 else 0.2}}
                for i in range(8)
            }
            for b in range(3)
        },
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        "Rule 12: a paused leader serves few; the broker left out is healthy",
        16,
        3,
        {b: paused_900(b) for b in range(3)},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 12: a stalled follower under the line serves few, its leaders wait on it",
        16,
        3,
        {b: stalled_below_line(b) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "run 6's stalled follower: one leader above the line, the other waiting under it",
        16,
        3,
        {
            b: leaders_of_run6(b, RUN6_STALLED, {"p99": 47.0, "stage_p99": {**BUSY_STAGES, "remote": 0.0}})
            for b in range(3)
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 13, run 10's stalled follower: one leader degraded in remote, the other barely waits",
        16,
        3,
        {b: run10(b, RUN10_STALLED) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 13, run 10's leader paused 400/1000 ms: it leads and serves as usual, one leader waits",
        10,
        3,
        {b: run10(b, RUN10_PAUSE_400) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 13, run 9's leader paused 400/1000 ms: no leader degraded in the mixed p99, the"
        " leaders' acks=all requests wait 376-400 ms on it against its own 8-60 ms",
        14,
        3,
        {b: waits(b, RUN9_PAUSE_400) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 13, run 11's stalled follower: its leaders' acks=all requests wait 392-408 ms, it leads none",
        14,
        3,
        {b: waits(b, RUN11_STALLED) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "run 15's slow disk of its own (writes capped at 400/s, a flush per append): broker 2 serves"
        " a tenth of its requests, local 290 ms; its peers wait ~700 ms on it as their follower",
        14,
        3,
        {
            b: slow_disk(
                b,
                2,
                {
                    "count": 160,
                    "p99": 450.0,
                    "stage_p99": {"requestQueue": 102.0, "local": 290.0, "remote": 300.0},
                },
            )
            for b in range(3)
        },
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "a milder slow disk of its own: broker 2 under the line (local 120 ms), its peers above it"
        " waiting on it as their follower (Rule 5's suspect): its disk, local",
        14,
        3,
        {
            b: slow_disk(
                b,
                2,
                {
                    "count": 900,
                    "p99": 150.0,
                    "stage_p99": {"requestQueue": 20.0, "local": 120.0, "remote": 30.0},
                },
            )
            for b in range(3)
        },
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "the same follower paused instead, its own local unmoved: the stalled follower, remote",
        14,
        3,
        {
            b: slow_disk(
                b,
                2,
                {
                    "count": 900,
                    "p99": 150.0,
                    "stage_p99": {"requestQueue": 5.0, "local": 0.8, "remote": 30.0},
                },
            )
            for b in range(3)
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 13, run 22's leader paused 400/1000 ms: told apart, then one window where its own"
        " acks=all requests waited as long as its peers' (399, 399, 408 ms), then told apart again",
        11,
        3,
        {b: waits(b, RUN22_PAUSE_400) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 13 no false positive: told apart twice, the peers' waits back to normal between",
        11,
        3,
        {b: waits(b, RUN22_PAUSE_400_GAP) for b in range(3)},
        {},
    ),
    (
        # Run 22's paused broker 2: the all-waiting windows between are its (the lookback names it
        # alone), so its early warning holds through them; below the line, never remediated.
        "told apart twice, two all-waiting windows between: broker 2's early warning",
        12,
        3,
        {b: waits(b, RUN22_PAUSE_400_TWICE) for b in range(3)},
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        "run 22's handlers starved: request queue out of line, the total above the line then just"
        " under it: the early warning after two windows, requestQueue",
        6,
        3,
        {b: run22_handlers(b) for b in range(3)},
        {("degraded_broker", "broker:2"): "requestQueue"},
    ),
    (
        "above the line one window, its request queue in line the next: nothing",
        6,
        3,
        {b: run22_handlers(b) | ({5: run22_handlers(b)[1]} if b == 2 else {}) for b in range(3)},
        {},
    ),
    (
        "Rule 13 no false positive: the bursty soaks' windows nearest to telling one broker apart",
        14,
        3,
        {b: waits(b, SOAK_WAITED) for b in range(3)},
        {},
    ),
    (
        "Rule 13: no follower told apart (the other two alike): the leader keeps its degraded remote",
        10,
        3,
        {b: run10(b, tuple((f[0], 2, 100, 100, 100, 2) for f in RUN10_PAUSE_400)) for b in range(3)},
        {("degraded_broker", "broker:0"): "remote"},
    ),
    (
        "run 6's leader paused 400/1000 ms: its leaders wait, one of them under the line",
        16,
        3,
        {
            b: leaders_of_run6(
                b, RUN6_PAUSE_400, {"count": 100, "p99": 37.0, "stage_p99": {**BUSY_STAGES, "remote": 10.0}}
            )
            for b in range(3)
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        # The demo's paused leader when first found: one window out of line in its own stage
        # (Rule 9), one window its leaders wait on it (Rule 5). The agents' alert says remote.
        "paused broker named once by its own stage and once by its leaders: stage remote",
        8,
        3,
        {0: {i: waiting(450.0) for i in (6, 7)}, 1: {i: waiting(450.0) for i in (6, 7)}, 2: {6: paused(1)}},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        # Its peers' median is 100 ms (the other leader's 180, broker 2's 20): it is slow by Rule 1.
        # Leader 0 waits 370 ms, leader 1 120 ms, broker 2 3 ms: with every partition on all
        # three, the follower both wait on is the one that does not wait (told apart), not leader 0.
        "one leader above the line, the other waiting under the wait floor, broker 2 not: the follower is 2",
        16,
        3,
        {
            0: {i: waiting(380.0) for i in range(8, 16)},
            1: {i: waiting(180.0) | {"stage_p99": {**BUSY_STAGES, "remote": 120.0}} for i in range(8, 16)},
        },
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        "Rule 12: serving few with nobody waiting (leadership moved away) is nothing",
        16,
        3,
        {2: {i: FEW for i in range(8, 16)}},
        {},
    ),
    (
        # Serving a third of its peers' always is its baseline, not a stall (no serves-few
        # evidence); its peers' acks=all requests waiting 170 ms while its own do not still tell
        # it apart as the follower they wait on: an early warning, never remediated.
        "a broker that always serves a third of its peers' is not stopped; told apart, it is warned of",
        16,
        3,
        {
            2: {i: {"count": 33} for i in range(16)},
            **{b: {i: waiting(180.0) for i in range(8, 16)} for b in (0, 1)},
        },
        {("degraded_broker", "broker:2"): "remote"},
    ),
    (
        # The fault matrix's soak (run 4): consumers of two brokers waited out their polls, and
        # Rule 5 named the third as their stalled follower.
        "long polls on two brokers are no stalled follower",
        8,
        3,
        {b: {i: long_poll(500.0) if b < 2 else long_poll(20.0) for i in range(8)} for b in range(3)},
        {},
    ),
    (
        # Run 20's handlers starved: consumer fetches on the held broker wait in its request queue
        # and longer in purgatory too (the data they wait for comes late); the long poll, a wait
        # by design, is never the stage at fault, however large its excess.
        "consumer fetches above the line, the long poll's excess largest: the request queue",
        8,
        3,
        {
            b: {
                i: (
                    {
                        "request": "FetchConsumer",
                        "p99": 500.0,
                        "stage_p99": {**BUSY_STAGES, "requestQueue": 150.0, "remote": 240.0},
                    }
                    if b == 2 and i >= 3
                    else {
                        "request": "FetchConsumer",
                        "p99": 60.0,
                        "stage_p99": {**BUSY_STAGES, "remote": 50.0},
                    }
                )
                for i in range(8)
            }
            for b in range(3)
        },
        {("slow_broker", "broker:2"): "requestQueue"},
    ),
    (
        "degraded: 3x its peers, 2 ms against 0.7 ms",
        8,
        3,
        {b: {i: tiny(2.0 if b == 2 else 0.7) for i in range(8)} for b in range(3)},
        {},
    ),
    (
        "degraded: 8x its peers but only 5 ms above them",
        8,
        3,
        {b: {i: tiny(6.0 if b == 2 else 0.7) for i in range(8)} for b in range(3)},
        {},
    ),
    (
        "degraded: low traffic",
        8,
        3,
        {
            b: {
                i: BUSY | ({"count": 5, "stage_p99": {**BUSY_STAGES, "local": 40.0}} if b == 1 else {})
                for i in range(8)
            }
            for b in range(3)
        },
        {},
    ),
    (
        "degraded: one noisy window",
        8,
        3,
        {
            b: {
                i: BUSY | ({"stage_p99": {**BUSY_STAGES, "local": 40.0}} if (b, i) == (1, 7) else {})
                for i in range(8)
            }
            for b in range(3)
        },
        {},
    ),
    (
        "degraded: a fetch's long poll (remote) waits by design",
        8,
        3,
        {
            b: {
                i: {"request": "FetchConsumer"} | ({"p99": 260.0, "stage": "remote"} if b == 2 else {})
                for i in range(8)
            }
            for b in range(3)
        },
        {},
    ),
    (
        "one slow broker where everything is somewhat slow is still that broker",
        8,
        3,
        {b: {i: {"p99": 900.0 if b == 2 and i >= 3 else 200.0} for i in range(8)} for b in range(3)},
        {("slow_broker", "broker:2"): "local"},
    ),
    # -- Rules 5 and 6: decide cluster-wide before blaming one broker -----------------------
    (
        "all three paused alike: broker 2 under the threshold but waiting in remote too is no stalled follower",
        5,
        3,
        {
            0: slow_in(range(5), stage="remote"),
            1: slow_in(range(5), stage="remote"),
            2: {**{i: {"p99": 250.0, "stage": "remote"} for i in range(4)}, 4: SLOW | {"stage": "remote"}},
        },
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        "one broker slow in its own stages, the other leaders waiting on it in remote: that broker",
        8,
        3,
        {
            2: slow_in(range(2, 8), p99=900.0),
            0: slow_in(range(2, 8), p99=400.0, stage="remote"),
            1: {i: {"p99": 250.0, "stage": "remote"} for i in range(2, 8)},
        },
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "cluster slowing broker by broker: nobody blamed while the latest window is cluster-wide",
        8,
        3,
        {2: slow_in(range(2, 8)), 0: slow_in([7]), 1: slow_in([7])},
        {},
    ),
    (
        "cluster slowing broker by broker: a few windows later, one cluster-wide finding",
        10,
        3,
        {2: slow_in(range(2, 10)), 0: slow_in(range(6, 10)), 1: slow_in(range(6, 10))},
        {("cluster_slow", "cluster:c1"): None},
    ),
    # -- Rule 9: one broker out of line in its own stages, everyone waiting in remote ---------
    # Shapes from a real run (broker 2 SIGSTOPped 900 ms of every 1000 ms on a loaded machine,
    # 2 s windows): every broker above 300 ms and waiting in remote (broker 2 too: its own
    # acks=all requests wait on followers whose fetches it serves late), broker 2's total not 2×
    # its peers', but one of its own stages ~900 ms against its peers' ~20 ms.
    (
        "paused broker 2 while everyone waits in remote: broker 2, its own stage",
        10,
        3,
        {
            2: {i: paused(i) for i in range(3, 10)},
            0: {i: waiting(840.0) for i in range(3, 10)},
            1: {i: waiting(870.0) for i in range(3, 10)},
        },
        {("slow_broker", "broker:2"): "requestQueue"},
    ),
    (
        "paused broker 2, some windows too few requests to judge it (Rule 5) and some its own stage",
        10,
        3,
        {
            2: {i: paused(i) if i % 3 else {"p99": 40.0, "count": 12} for i in range(3, 10)},
            0: {i: waiting(840.0) for i in range(3, 10)},
            1: {i: waiting(870.0) for i in range(3, 10)},
        },
        # A paused JVM holds whichever stage its requests are in: two windows each of the request
        # and the response queue; the larger summed excess names it.
        {("slow_broker", "broker:2"): "responseQueue"},
    ),
    (
        "every broker paused alike, all waiting in remote: one cluster-wide finding, nobody blamed",
        10,
        3,
        {b: {i: paused(i) for i in range(3, 10)} for b in range(3)},
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        # The fault matrix's every-broker-paused run: broker 2 named once long ago (window 1),
        # later broker 1 named twice; the history alone names only broker 1.
        "everyone waits; broker 2 named before the history, broker 1 twice in it: cluster-wide",
        16,
        3,
        {
            b: {i: waiting(450.0) for i in range(1, 16)}
            | ({1: paused(1)} if b == 2 else {})
            | ({i: paused(i) for i in (6, 9)} if b == 1 else {})
            for b in range(3)
        },
        {("cluster_slow", "cluster:c1"): None},
    ),
    (
        # Also from that run: after the slowdown fired and faded, one leader waits on its
        # followers alone for four windows, nobody told apart: its own finding, stage remote,
        # follower unknown, which no remediation acts on (the policy's foreign stage).
        "cluster-wide slowdown fired, then one leader alone waits in remote: its wait, follower unknown",
        9,
        3,
        {b: {i: waiting(450.0) for i in range(5)} for b in range(3)}
        | {2: {i: waiting(450.0) for i in range(9)}},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        # The fault matrix's run 5: its warm-up read cluster-wide for two windows 90 s before a
        # leader was paused, and the stalled follower found 20 s after the onset was held back
        # (hold_windows was 12 windows, 120 s at 10 s windows).
        "a cluster-wide blip 8 windows before a stalled follower does not hold it back",
        12,
        3,
        {b: slow_in(range(2)) for b in range(3)}
        | {b: slow_in(range(2)) | {10: waiting(360.0), 11: waiting(370.0)} for b in (0, 1)},
        {("slow_broker", "broker:2"): "remote"},
    ),
    (
        # One slow window of its own is one window: never remediable alone. Its peers' acks=all
        # requests waiting 240-270 ms in every window while its own do not tell it apart as their
        # follower: an early warning.
        "loaded machine: one window in which one broker's request queue spikes, others waiting: warned of",
        10,
        3,
        {
            2: {7: paused(1)},
            0: {i: waiting(250.0) for i in range(3, 10)},
            1: {i: waiting(280.0) for i in range(3, 10)},
        },
        {("degraded_broker", "broker:2"): "remote"},
    ),
    # -- Rule 7: a slow client is the client's finding --------------------------------------
    (
        "slow consumer: FetchConsumer send on broker 1, the exemplars name the client",
        8,
        3,
        {
            b: {
                i: {"request": "FetchConsumer"}
                | (
                    SLOW | {"stage": "send", "clients": {"slow-reader": 790.0, "other": 310.0}}
                    if b == 1
                    else {}
                )
                for i in range(8)
            }
            for b in range(3)
        },
        {("slow_client", "client:slow-reader"): "send"},
    ),
    (
        "rolling restart shorter than a window: its JVM start time changed, nothing is raised new",
        14,
        3,
        sub_window_restart(jvm_restarts=True),
        {},
    ),
    (
        "the same rows with the same JVM: a stall, not a restart",
        14,
        3,
        sub_window_restart(jvm_restarts=False),
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        # The fault matrix's rolling restart, then a soak (run 3, d24-d25): broker 2 back with a
        # new JVM is slow while it catches up (windows 9-12), then serves a third of its peers
        # (its leadership comes back only with a preferred-leader election) with no evidence
        # against it. Held, its finding of the restart outlived the grace and was raised as
        # slow_broker when the grace ended; serving without evidence, it clears.
        "back from a restart, serving few without evidence: its restart's finding clears",
        30,
        3,
        {
            2: jvm(window(0) - 3_600_000, range(9))
            | jvm(
                window(9) + 2_000,
                range(9, 30),
                {i: SLOW | {"stage": "local"} for i in range(9, 13)}
                | {i: {"count": 30} for i in range(13, 30)},
            )
        },
        {},
    ),
    (
        "a cluster's first start inside the lookback is no restart",
        8,
        3,
        {
            0: jvm(window(0) + 1_000, range(8)),
            1: jvm(window(0) + 1_200, range(8)),
            2: jvm(window(0) + 1_500, range(8), slow_in(range(3, 8))),
        },
        {("slow_broker", "broker:2"): "local"},
    ),
    (
        "throttled client: the excess in throttle is the client's quota",
        8,
        3,
        {0: slow_in(range(8), stage="throttle")},
        {("slow_client", "client:unknown@broker:0"): "throttle"},
    ),
]


@pytest.mark.parametrize(
    ("windows", "brokers", "special", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_slow_broker_table(windows, brokers, special, expected) -> None:
    data = scenario(windows, brokers, special)
    findings = SlowBrokerDetector().detect(data, now_after(windows))
    # What a fresh engine raises: a provisional finding (Rule 6) is not raised new.
    raised = [f for f in findings if not f.evidence.get("provisional")]
    assert {(f.rule, f.subject): f.evidence.get("stage") for f in raised} == expected


def test_rule6_holds_a_new_finding_but_never_clears_an_active_one() -> None:
    """Broker 2 found slow; then one window reads cluster-wide: the finding stays active (no
    clear-and-raise-again, which would restore and demote the broker in turn). A broker first
    flagged in such a window is not raised."""
    from findings.tracker import FindingTracker

    detector, tracker = SlowBrokerDetector(), FindingTracker()
    alone = scenario(8, 3, {2: slow_in(range(2, 8))})
    first = tracker.update(detector.detect(alone, now_after(8)), now_after(8))
    assert [f.subject for f in first.appeared] == ["broker:2"]
    wide = scenario(8, 3, {2: slow_in(range(2, 8)), 0: slow_in([7]), 1: slow_in([7])})
    found = detector.detect(wide, now_after(8))
    assert [f.evidence.get("provisional") is not None for f in found if f.subject == "broker:2"] == [True]
    second = tracker.update(found, now_after(8) + 1)
    assert ([f.subject for f in second.ongoing], second.cleared, second.appeared) == (["broker:2"], [], [])
    fresh = FindingTracker()
    assert fresh.update(found, now_after(8)).appeared == [] and fresh.held == 1


def test_unfinished_window_is_not_judged() -> None:
    # Windows 6..7 slow, but window 7 is still open at `now`: only one slow window counts.
    data = scenario(8, 3, {2: slow_in([6, 7])})
    assert SlowBrokerDetector().detect(data, now_after(8) - 1) == []
    assert [f.subject for f in SlowBrokerDetector().detect(data, now_after(8))] == ["broker:2"]


def test_a_leaders_wait_goes_to_the_follower_whose_own_work_is_out_of_line() -> None:
    """Leader 0 waits in remote; broker 1's own local is out of line (under the line itself): the
    wait is broker 1's, its finding names the leader waiting on it, and leader 0 has none."""
    special = {0: slow_in(range(8), stage="remote"), 1: {i: {"p99": 120.0} for i in range(8)}}
    [finding] = SlowBrokerDetector().detect(scenario(8, 3, special), now_after(8))
    ev = finding.evidence
    assert (finding.rule, finding.subject, ev["stage"], ev["slow_follower"], ev["leaders_waiting"]) == (
        "slow_broker",
        "broker:1",
        "local",
        1,
        [0],
    )
    assert ev["families"] == ["own work", "peers wait on it"] and "disks of broker 1" in finding.action


def test_folded_leader_is_named_in_the_follower_finding() -> None:
    special = {3: slow_in(range(8)), 0: slow_in(range(8), stage="remote")}
    [finding] = SlowBrokerDetector().detect(scenario(8, 5, special), now_after(8))
    assert finding.evidence["leaders_waiting"] == [0]


def test_evidence_carries_values_baseline_windows() -> None:
    [f] = SlowBrokerDetector().detect(scenario(8, 3, {2: slow_in(range(3, 8))}), now_after(8))
    ev = f.evidence
    assert ev["values"]["p99_ms"] == [20.0] * 3 + [800.0] * 5
    assert ev["baseline"]["peers_median_p99_ms"] == [20.0] * 8
    assert ev["windows"] == [window(i) for i in range(8)]
    assert ev["slow_windows"] == [window(i) for i in range(3, 8)]
    # At max_score (5) and above twice the threshold (800 ms): critical.
    assert (f.severity, ev["score"]) == ("critical", 5)
    assert f.to_json()  # evidence must be JSON-serialisable to travel on linkwatch.findings


def test_score_rises_and_falls_with_consecutive_windows() -> None:
    cfg = SlowBrokerConfig()
    walked = [walk_score([True] * k, cfg) for k in range(1, 8)]
    assert walked == [(1, False), (2, True), (3, True), (4, True), (5, True), (5, True), (5, True)]
    # Hysteresis by evidence: active until clear_windows (3) healthy windows in a row.
    assert walk_score([True] * 6 + [False] * 2, cfg) == (3, True)
    assert walk_score([True] * 6 + [False] * 3, cfg) == (0, False)
    assert walk_score([True] * 6 + [False] * 2 + [True] + [False] * 2, cfg) == (2, True)  # no clear mid-fault
    assert walk_score([True, False] * 6, cfg) == (0, False)  # one noisy window at a time never fires
    # A window that is no evidence either way (None) holds the score and the healthy streak.
    assert walk_score([True, None, None, True], cfg) == (2, True)
    assert walk_score([True, None, False, None, True], cfg) == (1, False)
    assert walk_score([True, True, None, False, None], cfg) == (1, True)
    assert walk_score([True, True, False, None, False, None, False], cfg) == (0, False)


def test_scores_for_every_broker() -> None:
    scores = broker_scores(scenario(8, 3, {2: slow_in(range(3, 8))}), now_after(8), SlowBrokerConfig())
    assert scores == {
        (0, "Produce"): 0,
        (1, "Produce"): 0,
        (2, "Produce"): 5,
    }


def test_detect_then_measure_read_the_model_once_and_a_new_evaluation_anew(monkeypatch) -> None:
    """The engine calls detect, then measure, on the same data and time: one model for both,
    the same scores as computed alone; new data or a new time is a new model."""
    import analyzer.slow_broker as sb

    data, now = scenario(8, 3, {2: slow_in(range(3, 8))}), now_after(8)
    alone = broker_scores(data, now, SlowBrokerConfig())
    calls = []
    real = sb.evaluate
    monkeypatch.setattr(sb, "evaluate", lambda *a: calls.append(a[1]) or real(*a))
    det = SlowBrokerDetector()
    det.detect(data, now)
    gauges = det.measure(data, now)
    assert len(calls) == 1
    assert gauges["linkwatch_slow_broker_score"][(data.cluster, "2", "Produce")] == 5
    assert {(b, q): s for (_c, b, q), s in gauges["linkwatch_slow_broker_score"].items()} == {
        (str(b), q): s for (b, q), s in alone.items()
    }
    det.measure(data, now + 1)
    det.detect(scenario(8, 3, {}), now + 1)
    assert len(calls) == 3


def test_stalled_follower_names_the_waiting_leaders_and_clears() -> None:
    special = {0: slow_in(range(2, 6), stage="remote"), 1: slow_in(range(2, 6), stage="remote")}
    [f] = SlowBrokerDetector().detect(scenario(6, 3, special), now_after(6))
    ev = f.evidence
    assert (f.subject, ev["slow_follower"], ev["leaders_waiting"]) == ("broker:2", 2, [0, 1])
    assert ev["slow_windows"] == [window(i) for i in range(2, 6)]
    assert ev["values"]["p99_ms"] == [20.0] * 6 and ev["values"]["peers_remote_p99_ms"][2:] == [785.0] * 4
    assert f.to_json()
    # Fault removed: clear_windows (3) healthy windows later it clears, not before.
    assert len(SlowBrokerDetector().detect(scenario(8, 3, special), now_after(8))) == 1
    assert SlowBrokerDetector().detect(scenario(9, 3, special), now_after(9)) == []


def test_slow_client_names_the_slowest_client_and_is_never_remediated() -> None:
    fetch = {"request": "FetchConsumer"}
    slow = fetch | SLOW | {"stage": "send", "clients": {"other": 310.0, "slow-reader": 790.0}}
    special = {b: {i: slow if b == 1 else fetch for i in range(8)} for b in range(3)}
    [f] = SlowBrokerDetector().detect(scenario(8, 3, special), now_after(8))
    ev = f.evidence
    assert (f.rule, f.subject, ev["broker"], ev["client_id"]) == (
        "slow_client",
        "client:slow-reader",
        1,
        "slow-reader",
    )
    assert ev["clients"] == [
        {"client_id": "slow-reader", "exemplars": 24, "stage_ms_max": 790.0},
        {"client_id": "other", "exemplars": 24, "stage_ms_max": 310.0},
    ]
    assert "slow-reader" in f.action and "broker 1 is not at fault" in f.action and f.to_json()
    assert decide(f, FindingPolicyConfig(), can_remediate=True).action is not Action.REMEDIATE


def test_slow_client_without_exemplars_says_it_is_unknown() -> None:
    [f] = SlowBrokerDetector().detect(scenario(8, 3, {0: slow_in(range(8), stage="send")}), now_after(8))
    assert (f.subject, f.evidence["client_id"], f.evidence["clients"]) == (
        "client:unknown@broker:0",
        None,
        [],
    )
    assert "unknown client" in f.summary and "unknown client" in f.action


def test_degraded_finding_carries_the_stage_figures_and_is_never_remediated() -> None:
    special = {
        b: {
            i: BUSY | ({"p99": 125.0, "stage_p99": {**BUSY_STAGES, "local": 40.0}} if b == 1 else {})
            for i in range(8)
        }
        for b in range(3)
    }
    [f] = SlowBrokerDetector().detect(scenario(8, 3, special), now_after(8))
    ev = f.evidence
    assert (f.rule, f.subject, f.severity, ev["stage"]) == ("degraded_broker", "broker:1", "info", "local")
    assert ev["values"]["stage_p99_ms"] == [40.0] * 8
    assert ev["baseline"]["peers_median_stage_p99_ms"] == [2.2] * 8
    assert ev["families"] == ["own work"] and ev["signals"][-1]["signals"][0]["stage"] == "local"
    assert "local is out of line" in f.summary and "disks of broker 1" in f.action and f.to_json()
    assert decide(f, FindingPolicyConfig(), can_remediate=True).action is not Action.REMEDIATE
    # Even a policy row asking to remediate it only notifies: its severity is below warning.
    asks = FindingPolicyConfig(rules=[PolicyRule(rule="degraded_broker", action=Action.REMEDIATE)])
    assert decide(f, asks, can_remediate=True).action is Action.NOTIFY


def waited_on_broker_2(f: Finding, served_few: bool) -> list[float]:
    """Checks the early warning on broker 2 as the follower its peers wait on (stage remote, info,
    never remediated); returns the peers' waited remote p99 of the windows that named it."""
    ev = f.evidence
    assert (f.rule, f.subject, f.severity, ev["stage"], ev["served_few"]) == (
        "degraded_broker",
        "broker:2",
        "info",
        "remote",
        served_few,
    )
    assert decide(f, FindingPolicyConfig(), can_remediate=True).action is not Action.REMEDIATE
    return [x for x in ev["values"]["peers_remote_p99_ms"] if x is not None]


def test_a_follower_its_peers_wait_on_says_so_and_is_never_remediated() -> None:
    """Rule 12's early warning names the broker that serves few, with its peers' remote waits."""
    [f] = SlowBrokerDetector().detect(
        scenario(16, 3, {b: stalled_below_line(b) for b in range(3)}), now_after(16)
    )
    waited = waited_on_broker_2(f, served_few=True)
    assert waited and min(waited) >= 140.0 and f.evidence["baseline"]["own_remote_p99_ms"][-1] == 0.0
    assert "serves far fewer requests" in f.summary and "JVM pauses" in f.action
    # Stopped ratio configurable: at 0.5 the broker serving 55 % of its usual does not serve few;
    # its peers waiting on it still tell it apart.
    [g] = SlowBrokerDetector(SlowBrokerConfig(stopped_ratio=0.5)).detect(
        scenario(16, 3, {b: stalled_below_line(b) for b in range(3)}), now_after(16)
    )
    waited_on_broker_2(g, served_few=False)


def test_no_early_warning_follows_a_cleared_slow_finding() -> None:
    """Broker 2 slow on Produce (its request queue, above the line) in windows 2-5, and its consumer
    fetches' request queue out of line in windows 0-7 (their total is the long poll, above the
    line by design). The fetches' degraded score outlasts the Produce finding; within
    hold_windows of it, it is no new finding (run 22's handlers starved, replayed: a
    degraded_broker 38 s after the fault, once its slow_broker had cleared)."""
    produce = scenario(12, 3, {2: slow_in(range(2, 6), stage="requestQueue")})
    polls = {
        b: {
            i: long_poll(498.0) | {"stage_p99": {**BUSY_STAGES, "remote": 490.0, "requestQueue": 5.0}}
            for i in range(12)
        }
        for b in range(3)
    }
    for i in range(8):
        polls[2][i]["stage_p99"] = {**BUSY_STAGES, "remote": 490.0, "requestQueue": 300.0}
    fetches = scenario(12, 3, polls)
    data = Aggregates(
        cluster="c1", window_s=WINDOW_S, broker_stages=produce.broker_stages + fetches.broker_stages
    )
    during = SlowBrokerDetector().detect(data, now_after(6))
    assert [(f.rule, f.subject, f.evidence["stage"]) for f in during] == [
        ("slow_broker", "broker:2", "requestQueue")
    ]
    # One episode: the fetches' evidence (windows 6-7) keeps it as it was, and it clears after
    # clear_windows healthy windows; no early warning follows it.
    assert [f.rule for f in SlowBrokerDetector().detect(data, now_after(10))] == ["slow_broker"]
    assert SlowBrokerDetector().detect(data, now_after(11)) == []
    # The fetches alone (no slow finding before): the early warning, in their request queue.
    alone = SlowBrokerDetector().detect(fetches, now_after(10))
    assert [(f.rule, f.subject, f.evidence["stage"]) for f in alone] == [
        ("degraded_broker", "broker:2", "requestQueue")
    ]


def test_degraded_thresholds_are_configurable() -> None:
    special = {b: {i: tiny(6.0 if b == 2 else 0.7) for i in range(8)} for b in range(3)}
    cfg = SlowBrokerConfig(degraded_excess_ms=5.0)
    found = SlowBrokerDetector(cfg).detect(scenario(8, 3, special), now_after(8))
    assert [(f.rule, f.subject) for f in found] == [("degraded_broker", "broker:2")]
    strict = SlowBrokerConfig(degraded_excess_ms=5.0, degraded_ratio=10.0)
    assert SlowBrokerDetector(strict).detect(scenario(8, 3, special), now_after(8)) == []


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 5),
    seed_values=st.lists(
        st.floats(0.0, SlowBrokerConfig().degraded_excess_ms - 0.1), min_size=8 * 5 * 7, max_size=8 * 5 * 7
    ),
    totals=st.lists(st.floats(5.0, 250.0), min_size=8 * 5, max_size=8 * 5),
)
def test_healthy_spread_under_the_excess_floor_finds_nothing(brokers, seed_values, totals) -> None:
    """Any spread of stage p99s under degraded_excess_ms and totals under the threshold: silence."""
    values = iter(seed_values)
    special = {
        b: {i: {"p99": totals[b * 8 + i], "stage_p99": {s: next(values) for s in STAGES}} for i in range(8)}
        for b in range(brokers)
    }
    assert SlowBrokerDetector().detect(scenario(8, brokers, special), now_after(8)) == []


@settings(max_examples=40, deadline=None, derandomize=True)
@given(stage=st.sampled_from(STAGES), broker=st.integers(0, 2), start=st.integers(0, 4))
def test_excess_in_a_client_stage_is_never_a_slow_broker(stage, broker, start) -> None:
    data = scenario(8, 3, {broker: slow_in(range(start, 8), stage=stage)})
    found = SlowBrokerDetector().detect(data, now_after(8))
    rules = {(f.rule, f.evidence.get("stage")) for f in found}
    if stage in ("send", "throttle"):
        assert rules == {("slow_client", stage)}
    else:
        assert rules == {("slow_broker", stage)}


def test_the_follower_a_degraded_remote_waits_on_is_named_and_never_remediated() -> None:
    """The early warning names the follower, not the leader that waits on it, told apart by the
    waits (it does not serve few); the ratios are configurable."""
    data = scenario(16, 3, {b: run10(b, RUN10_STALLED) for b in range(3)})
    [f] = SlowBrokerDetector().detect(data, now_after(16))
    waited = waited_on_broker_2(f, served_few=False)
    assert max(waited) == 268.0 and set(f.evidence["baseline"]["own_remote_p99_ms"]) <= {None, 0.0}
    assert "wait on it as their follower" in f.summary
    # Nothing tells broker 2 apart at these ratios: the leader keeps its degraded remote.
    strict = SlowBrokerConfig(follower_remote_ratio=100.0, stopped_ratio=0.3)
    paused_400 = scenario(10, 3, {b: run10(b, RUN10_PAUSE_400) for b in range(3)})
    assert [f.subject for f in SlowBrokerDetector().detect(paused_400, now_after(10))] == ["broker:2"]
    [g] = SlowBrokerDetector(strict).detect(paused_400, now_after(10))
    assert (g.subject, g.evidence["stage"]) == (
        "broker:0",
        "remote",
    ) and "followers of the partitions" in g.action


def test_the_follower_the_leaders_acks_all_requests_wait_on_is_named_with_their_waits() -> None:
    """The leaders' waits are read over the requests that waited (acks=all): the finding carries
    the leaders' lowest waited remote p99 and the follower's own; the ratio is configurable."""
    data = scenario(14, 3, {b: waits(b, RUN9_PAUSE_400) for b in range(3)})
    [f] = SlowBrokerDetector().detect(data, now_after(14))
    assert waited_on_broker_2(f, served_few=False) == [392.0, 392.0, 392.0, 376.0, 392.0, 384.0]
    own = f.evidence["baseline"]["own_remote_p99_ms"]
    assert [x for x in own if x is not None] == [60.0, 56.0, 27.0, 19.0, 11.0, 8.0]
    assert "wait on it as their follower" in f.summary
    # At 10x asked, 392 against 60 and 56 ms does not tell it apart in the first two windows: the
    # finding starts later, from the third.
    strict = SlowBrokerConfig(follower_remote_ratio=10.0)
    [g] = [x for x in SlowBrokerDetector(strict).detect(data, now_after(14)) if x.subject == "broker:2"]
    assert g.evidence["slow_windows"] == [window(i) for i in range(10, 14)]


def test_a_leader_waiting_on_nobody_known_is_never_remediated() -> None:
    data = scenario(
        9,
        3,
        {b: {i: waiting(450.0) for i in range(5)} for b in range(3)}
        | {2: {i: waiting(450.0) for i in range(9)}},
    )
    [f] = SlowBrokerDetector().detect(data, now_after(9))
    assert (f.evidence["stage"], f.evidence["slow_follower"]) == ("remote", None)
    assert "no one follower explains the wait" in f.summary
    assert (
        decide(
            f,
            FindingPolicyConfig(rules=[PolicyRule(rule="slow_broker", action=Action.REMEDIATE)]),
            can_remediate=True,
        ).action
        is Action.NOTIFY
    )


def test_a_broker_going_down_or_coming_back_holds_new_findings() -> None:
    """A planned restart: broker 2 absent for three windows with nobody waiting on it (its
    leadership moved away), then back and catching up, slow at its disk: nothing is raised new
    until restart_grace_windows after it came back, and its own finding not until
    returning_grace_windows; a finding already active stays."""

    def restart(windows: int) -> dict:
        slow = {i: SLOW | {"stage": "local"} for i in range(11, windows)}
        return {2: {i: {"absent": True} for i in range(8, 11)} | slow}

    data = scenario(14, 3, restart(14))
    found = SlowBrokerDetector().detect(data, now_after(14))
    assert found and all("came back" in f.evidence.get("provisional", "") for f in found)
    mid = SlowBrokerDetector().detect(scenario(22, 3, restart(22)), now_after(22))
    assert [f.evidence.get("provisional", "").startswith("broker 2 was down") for f in mid] == [True]
    later = SlowBrokerDetector().detect(scenario(32, 3, restart(32)), now_after(32))
    assert [f.subject for f in later if not f.evidence.get("provisional")] == ["broker:2"]
    short = SlowBrokerConfig(restart_grace_windows=0, returning_grace_windows=0)
    assert [f.evidence.get("provisional") for f in SlowBrokerDetector(short).detect(data, now_after(14))] == [
        None
    ]


def test_a_restart_is_placed_in_the_window_its_jvm_started() -> None:
    """Start times as agents read them: the new JVM's start read a window late (its JMX
    endpoint comes up after it), a start after the newest window's end, a broker read with one
    JVM only (no restart), and a start before the lookback (no restart it sees)."""
    from analyzer.slow_broker import restarts

    windows = [window(i) for i in range(6)]
    starts = [
        BrokerStartWindow(broker=1, window_start_ms=window(0), started_ms=window(0) - 9_000_000),
        BrokerStartWindow(broker=1, window_start_ms=window(3), started_ms=window(2) + 7_000),  # read late
        BrokerStartWindow(broker=2, window_start_ms=window(0), started_ms=window(0) - 5_000_000),
        BrokerStartWindow(broker=2, window_start_ms=window(5), started_ms=window(6) + 1_000),  # after the end
        BrokerStartWindow(broker=3, window_start_ms=window(0), started_ms=window(1) + 2),  # its first JVM
        BrokerStartWindow(broker=4, window_start_ms=window(0), started_ms=window(0) - 9_000),
        BrokerStartWindow(
            broker=4, window_start_ms=window(1), started_ms=window(0) - 2_000
        ),  # before the lookback
    ]
    data = Aggregates(cluster="c1", window_s=WINDOW_S, broker_starts=starts)
    assert restarts(data, windows) == [frozenset(), frozenset(), {1}, frozenset(), frozenset(), {2}]
    assert restarts(data, []) == []


def test_a_broker_back_from_a_restart_serving_few_without_evidence_walks_healthy() -> None:
    """Broker 2 restarts (new JVM from window 9), is slow while it catches up (9-12), then serves
    a third of its usual requests with no evidence against it (its leadership not yet back).
    Serving few alone holds a broker's score; back from a restart it is read healthy, so the
    finding its restart left clears within clear_windows instead of being held until its own
    traffic baseline moves (and outliving the returning grace, as in run 3's d24-d25)."""
    special = {
        2: jvm(window(0) - 3_600_000, range(9))
        | jvm(
            window(9) + 2_000,
            range(9, 22),
            {i: SLOW | {"stage": "local"} for i in range(9, 13)} | {i: {"count": 30} for i in range(13, 22)},
        )
    }
    model = evaluate(scenario(22, 3, special), now_after(22), SlowBrokerConfig())
    steps = model.brokers[2]
    assert [s.state for s in steps[9:13]] == ["blamed"] * 4
    assert [s.state for s in steps[13:16]] == ["healthy"] * 3
    assert steps[12].active and not steps[15].active and not steps[-1].active


def two_request_types(
    n: int, produce: dict[int, dict[int, dict]], fetch: dict[int, dict[int, dict]], brokers: int = 3
) -> Aggregates:
    """Every broker reports Produce (BUSY) and consumer fetches (a long poll) in every window;
    ``produce`` / ``fetch`` override single brokers' windows of one type."""
    p = scenario(
        n, brokers, {b: {i: BUSY | produce.get(b, {}).get(i, {}) for i in range(n)} for b in range(brokers)}
    )
    f = scenario(
        n,
        brokers,
        {b: {i: long_poll(498.0) | fetch.get(b, {}).get(i, {}) for i in range(n)} for b in range(brokers)},
    )
    return dataclasses.replace(p, broker_stages=[*p.broker_stages, *f.broker_stages])


def queued(stage_p99: dict[str, float], ms: float) -> dict:
    return {"stage_p99": {**stage_p99, "responseQueue": ms}}


FETCH_STAGES = {**BUSY_STAGES, "remote": 493.0}


@pytest.mark.parametrize(
    ("produce", "fetch", "expected"),
    [
        # The soak: a produce burst releases the parked consumer fetches of one broker together and
        # their responses queue for its network threads, in the windows of the burst; its Produce
        # responses, on the same threads, do not wait. Nothing (run 4, seed 2039: three soaks).
        ({}, {2: {i: queued(FETCH_STAGES, 24.0) for i in (4, 5, 6)}}, {}),
        # Its network threads short (CPU starved, too few of them): every type's responses wait.
        (
            {2: {i: queued(BUSY_STAGES, 24.0) for i in (4, 5, 6, 7)}},
            {2: {i: queued(FETCH_STAGES, 24.0) for i in (4, 5, 6, 7)}},
            {("degraded_broker", "broker:2"): "responseQueue"},
        ),
    ],
    ids=["fetch responses queued alone: nothing", "every type's responses queued: degraded"],
)
def test_a_response_queue_is_the_brokers_when_every_request_type_waits_in_it(
    produce, fetch, expected
) -> None:
    findings = SlowBrokerDetector().detect(two_request_types(8, produce, fetch), now_after(8))
    raised = [f for f in findings if not f.evidence.get("provisional")]
    assert {(f.rule, f.subject): f.evidence.get("stage") for f in raised} == expected


def test_a_response_queue_out_of_line_in_the_one_type_reported_is_still_the_brokers() -> None:
    special = {
        b: {i: BUSY | (queued(BUSY_STAGES, 24.0) if b == 2 and i >= 4 else {}) for i in range(8)}
        for b in range(3)
    }
    findings = SlowBrokerDetector().detect(scenario(8, 3, special), now_after(8))
    assert {(f.rule, f.subject): f.evidence.get("stage") for f in findings} == {
        ("degraded_broker", "broker:2"): "responseQueue"
    }
