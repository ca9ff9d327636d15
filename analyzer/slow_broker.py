"""Slow broker rule, with the stage at fault and the cluster-wide case.

Rule 1 — a window is *slow* for broker b and request type r when b logged at least
``min_requests`` requests of r in it, its merged p99 of ``total`` exceeds ``p99_threshold_ms``
**and** is at least ``peer_ratio`` × the median p99 of its peers (other brokers with enough
requests in the same window). Logged, not served (``StageWindow.logged``): under sampled
capture the served count is an estimate several times larger, and the p99 of a few logged
requests is their maximum. Every rule's "enough requests" is this guard.

A broker whose time is a wait by design (``wait_stages``, as in Rule 3 below) is never slow.

Rule 2 — a score walks the windows in time order: +1 for a slow window, −1 otherwise, kept in
``[0, max_score]``. A broker becomes active when the score reaches ``fire_score`` and clears
when it falls to ``clear_score``. One noisy window never fires; a recovered broker clears
after a few windows; cold start (few windows) cannot fire.

Rule 3 — when more than ``cluster_wide_fraction`` of the reporting brokers are above the
absolute threshold in a window (scored like Rule 2), the finding is one cluster-wide slowdown,
and per-broker findings are withheld: a slow cluster is not N slow nodes.

Rule 5 — a stalled follower (e.g. a JVM paused by GC or SIGSTOP) is invisible in its own
request times: a request that arrives while it is stopped is timestamped only when it is
read. It shows on the *leaders* instead: with ``acks=all`` they wait in ``remote`` for it. In
a window where at least ``min_waiting_leaders`` brokers wait on replication — above the
threshold with ``remote`` carrying at least ``remote_share`` of their p99; when fewer than that
do but one does, those under the threshold with such a ``remote`` of at least ``wait_floor_ms``
count too (leaders waiting on one follower need not all cross the line: run 6 of the fault
matrix read 280 ms beside 370 ms) — and exactly one reporting broker does not (and is itself
below the threshold, or served too few requests to be judged — a stalled JVM serves few), that
broker is the suspected stalled follower, provided its own replication is fine: its own
``remote`` p99 (if it reported one) is at most ``suspect_remote_ratio`` × the waiting leaders'
median ``remote`` p99. A real stalled follower leads partitions whose followers are healthy, so
its own ``remote`` stays at the normal level; when every broker is paused alike, every leader
waits in ``remote``, the one under the threshold too, and that is Rule 3's case, not Rule 5's.
Such windows never count toward Rule 3's cluster-wide slowdown.
Those windows are scored like Rule 2; an active suspect gets the finding (stage ``remote``,
the waiting leaders named), and the leaders' own slowness is not reported again, nor as a
cluster-wide slowdown. (With exactly one non-waiting broker the rule fits small clusters and
clusters where every leader replicates to the stalled broker; larger clusters need the
partition → replica map.)

Rule 4 — stage attribution: over the broker's slow windows, the stage whose p99 exceeds the
peers' median p99 by the most carries the excess. ``remote`` means the leader waits for
followers; the follower that looks slowest itself is named, and a leader whose excess is only
waiting on a follower that is itself flagged is folded into that follower's finding.

Rule 6 — decide cluster-wide before blaming one broker: while the most recent judged window is
cluster-wide by Rule 3's test (``hold_while_cluster_wide``), the findings a remediation may act
on (``slow_broker``, the stalled follower) are marked provisional (evidence key
``provisional``), even before Rule 3's own score fires: the engine does not raise a provisional
finding that is not already active, and keeps an active one active. A cluster that slows down
broker by broker is then one ``cluster_slow`` finding a few windows later, never first a slow
broker whose leadership would be moved; and a broker already found is not cleared and found
again (restored and demoted in turn) because one window read cluster-wide. They stay provisional
for ``hold_windows`` windows after Rule 3's score was last active (its walk starts
``attribute_lookback_windows`` back): every broker paused in turn leaves, once the slowdown has
faded, one leader waiting on its followers alone for a few windows.

Rule 7 — a slow client is the client's finding: when Rule 4 puts a flagged broker's excess in a
``client_stages`` stage (``send``: the client does not read its socket promptly; ``throttle``:
its quota holds it back), the finding is ``slow_client``, naming the client from the agents'
slow-request exemplars in the slow windows (``Aggregates.client_windows``), or saying it is
unknown when no exemplar names one. It is never a ``slow_broker`` finding.

Rule 9 — one broker out of line in its own stages is one cause: in a window where exactly one
broker above the threshold has an own stage (``requestQueue``, ``local``, ``responseQueue``:
its own work, not replication, not a client's stages) whose p99 is at least ``degraded_ratio`` ×
the peers' median p99 of that stage and at least ``culprit_excess_ms`` above it, and every other
broker above the threshold spends its time waiting in ``remote`` (``remote_share``), that broker
is the window's *culprit*. The window is slow for it even when its total is not ``peer_ratio``
× its peers' (Rule 1: its peers are slow too, waiting on it), and it does not count toward Rule
3's cluster-wide slowdown. The shape is a broker paused most of the time while it leads and
follows: a request it has read waits out the pause in whatever stage it is in, while its peers'
acks=all requests wait for it as their follower, and it too waits for followers whose fetches
it serves late — everyone above 300 ms, everyone's excess in ``remote`` but its own. When every
broker is paused alike, no one stage is out of line with its peers' and the case stays Rule 3's.

Rule 10 — a window where every broker above the threshold waits in ``remote`` and none stands
out (no Rule 5 suspect, no Rule 9 culprit) could be every broker slowed alike or every broker
waiting on one of them: a broker paused in a duty cycle makes its own acks=all requests wait for
followers whose fetches it serves late, so in some windows all three wait in ``remote``. Such a
window is *attributed* to a broker when, over the request type's history windows, Rules 5 and 9
named exactly one broker, in at least ``attribute_min_windows`` windows: it then does not count
toward Rule 3's cluster-wide slowdown (nor hold findings back by Rule 6). It does not count as
the broker's slow window either: only the windows that name it do (on a loaded machine one
broker is now and then out of line in its own stages, and the all-waiting windows around it
must not turn that into a finding); it holds the named broker's Rule 5 score, neither up nor
down (as a Rule 12 window does), so its finding neither fires nor clears on it. With no cause
named, or causes naming different brokers (every broker paused in turn), it stays Rule 3's.
Windows that leave the named broker out (it is the one broker below the threshold and not
waiting while the others wait: Rule 5's shape, but its own ``remote`` too high for Rule 5's
check, as a paused broker's own acks=all requests wait out its pauses too) count toward
``attribute_min_windows`` as well (``attribute_left_out``);
they never name a broker by themselves, and those leaving out another broker are not counted.
A broker named in the history does not attribute when another was named in the windows before
it, within ``attribute_lookback_windows``: brokers paused in turn are each named now and then.
Also for Rule 3: a broker whose time for a request type is spent in a stage that waits by design
(``wait_stages``: a consumer fetch's long poll in purgatory, up to ``fetch.max.wait.ms``) carrying
``remote_share`` of its p99 is not counted above the threshold: idle consumers on every broker
are not a cluster-wide slowdown.

Rule 8 — a degraded broker below the absolute threshold: a window is *degraded* for broker b and
request r when b served at least ``min_requests`` of r and in one of its own stages (``stages``
minus ``client_stages`` and the waits by design of ``wait_stages``; with its ``total`` p99 above
``p99_threshold_ms``, only ``culprit_stages``, its own work) its p99 is at least
``degraded_ratio`` × the peers' median p99 of that stage **and** at least ``degraded_excess_ms``
above it (both: a ratio alone fires on 2 ms against 0.7 ms). Scored like Rule 2; an active
broker with no other finding gets a ``degraded_broker`` finding of severity ``info`` (an early
warning, never remediated by the default policy): a broker hovering at the line (fault-matrix
run 22's handlers held: Produce 478, 296, 340 ms) is warned of after two windows, before Rule
1's two slow windows in a row. None for a broker whose slow-broker finding (Rules 1, 5) was
active within the last ``hold_windows`` windows: its degraded score outlasts that finding and
would only follow it after the fault. When more than ``cluster_wide_fraction`` of the brokers
are degraded at once, none is reported.

Rule 11 — the request queue backs up behind the disk: I/O handler threads blocked in a slow log
append (``local``) leave the requests behind them waiting in ``requestQueue``, often longer than
the append itself. So where Rules 4 and 8 would name ``requestQueue`` while the broker's
``local`` p99 is itself out of line (at least ``degraded_ratio`` × its peers' median and
``queue_behind_local_ms`` above it, in at least half of the windows read), they name ``local``:
the queue is the symptom, the disk the cause. A starved CPU or too few handler threads leave
``local`` in line, and the stage stays ``requestQueue``.

Rule 12 — the broker that serves few: a JVM paused most of the time serves a fraction of its
requests, while its own times stay short (a request is timed from when it is read) or wait in
``remote`` like its peers' (its own acks=all requests wait out its pauses too), so Rule 5's
"the one broker not waiting" may be a healthy one. In a window, a broker's *throughput* is its
logged requests of r against its own baseline (the median over the earlier windows of the
lookback, ``attribute_lookback_windows``, at least ``stopped_baseline_windows`` of them and
``min_requests`` at the median); it has *stopped* when that is at most ``stopped_ratio`` × the
median of its peers' throughputs (bursts and quiet spells move every broker alike; leading fewer
partitions sets a broker's baseline, not its throughput). With exactly one stopped broker and
another broker waiting in ``remote`` (Rule 5's *waiting*), the stopped broker is the window's
suspect, whatever Rule 5 said; and a peer's ``remote`` degraded below the line (Rule 8) in that
window is the stopped broker's degraded window (stage ``remote``: the peers wait on it), not the
peer's. A window in which it has stopped but nobody waits on it is no evidence either way: its
scores hold (Rule 2 walks it as neither slow nor healthy). A stall longer than about half the
lookback becomes its own baseline; Rules 5 and 8 alone judge it then.

Rule 13 — the follower a degraded ``remote`` waits on: a leader's ``remote`` is its wait for its
followers, never its own work. So in a window where one or more brokers are degraded in
``remote`` (Rule 8) and no broker has stopped (Rule 12), the follower they wait on is named
when exactly one other broker is told apart: (a) the one broker whose ``remote`` p99 every other
broker's is at least ``follower_remote_ratio`` × and ``degraded_excess_ms`` above (it leads
partitions whose followers are healthy, or none, while the others replicate to it), else (b)
the one broker, the degraded ones left out, whose throughput (Rule 12's) is at most
``follower_few_ratio`` × its peers' median (a follower paused part of the time serves fewer
requests, if not few enough for Rule 12). The leaders' degraded ``remote`` is then that
broker's degraded window, stage ``remote``, not theirs. A follower stalled 400 of every 1000 ms
(fault-matrix run 10) left broker 1 degraded in ``remote`` while broker 3 waited a little (4-44
ms against broker 2's 0) and broker 2 served 0.54-0.58 of its usual against its peers' 0.76-0.92:
before this rule, broker 1 was the finding's subject. When no one broker is told apart, the
leader keeps the window, and its finding says the follower is unknown.

Rule 13 reads each broker's ``remote`` p99 of the requests that waited at all
(:attr:`StageWindow.nonzero_p99_ms`), not the mixed p99: a Produce with acks 0 or 1 never waits
(remote 0), one with acks=all waits for its followers, and where most requests are acks=1 the
mixed p99 shows that wait only now and then. With it, a window with no leader degraded is judged
too: the one broker whose waited ``remote`` p99 every other broker's is at least
``follower_remote_ratio`` × and ``follower_waited_excess_ms`` above is the follower they wait on
(its degraded window, stage ``remote``, as above). Fault-matrix runs 8-11, the 400/1000 leader
pause and the stalled follower: the leaders' acks=all requests waited 361-416 ms against the
follower's 0-81 ms in every window (311-399 ms above it), while their mixed p99 was 2-308 ms; in
the 15-minute bursty soaks and every window outside a follower stall, the gap was at most 25 ms.
A window that tells no one apart right after one that named a follower holds its score for that
window when the others still wait (:func:`still_waiting`): a paused leader's own acks=all
requests wait out its pauses too, now and then as long as its peers'.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import Field

from analyzer.base import BarChart, Chart, Detector, DetectorConfig, DetectorGauge, GaugeValues, LineChart
from analyzer.probe_evidence import probe_evidence
from linkwatch.aggregates import Aggregates, ClientWindow, StageWindow
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, Finding

RULE = "slow_broker"
CLUSTER_RULE = "cluster_slow"
CLIENT_RULE = "slow_client"
PROVISIONAL = "provisional"  # evidence key: see Rule 6 and analyzer.engine.FindingTracker
DEGRADED_RULE = "degraded_broker"

STAGE_MEANING = {
    "requestQueue": (
        "requests wait in the request queue for I/O handler threads",
        "check CPU and RequestHandlerAvgIdlePercent / num.io.threads on broker {b}; move leadership away if it persists",
    ),
    "local": (
        "the leader's local work (log append/read on disk) is slow",
        "check the disks of broker {b} (io util, log flush time, page cache); consider demoting its leadership",
    ),
    "remote": (
        "the leader waits for replication (acks=all) or fetch purgatory",
        "check follower broker {f} (disks, network, GC pauses) and replication throttles",
    ),
    "responseQueue": (
        "responses wait for network threads",
        "check NetworkProcessorAvgIdlePercent and num.network.threads on broker {b}",
    ),
    "send": (
        "sending responses is slow: a slow client or network path",
        "check clients that fetch slowly and the network of broker {b}",
    ),
    "throttle": (
        "requests are held back by quotas",
        "check client quotas applied on broker {b}",
    ),
}


class SlowBrokerConfig(DetectorConfig):
    requests: list[str] = Field(default_factory=lambda: [PRODUCE, FETCH_CONSUMER])
    p99_threshold_ms: float = Field(300.0, gt=0)
    peer_ratio: float = Field(2.0, ge=1.0)
    min_requests: int = Field(20, ge=1)
    history_windows: int = Field(12, ge=1)
    fire_score: int = Field(2, ge=1)
    clear_score: int = Field(1, ge=0)
    max_score: int = Field(5, ge=1)
    cluster_wide_fraction: float = Field(0.5, gt=0, le=1)
    stages: list[str] = Field(
        default_factory=lambda: ["requestQueue", "local", "remote", "responseQueue", "send", "throttle"]
    )
    remote_share: float = Field(0.5, gt=0, le=1)  # Rule 5: remote p99 / total p99 of a waiting leader
    min_waiting_leaders: int = Field(2, ge=1)
    # Rule 5: a leader under the slow line waits on replication too when its remote p99 is at
    # least this (and remote_share of its total), beside one waiting above the line. The soaks of
    # the fault matrix's runs 4-6 read 74 ms at most; a stalled follower's leaders 99-370 ms.
    wait_floor_ms: float = Field(150.0, ge=0)
    # Rule 5: a suspect's own remote p99 / the waiting leaders' median remote p99, at most.
    suspect_remote_ratio: float = Field(0.25, gt=0, le=1)
    hold_while_cluster_wide: bool = True  # Rule 6
    # Rule 6: hold also while Rule 3's score was active in any of the last hold_windows windows
    # (counted within history_windows: a larger value acts as history_windows).
    hold_windows: int = Field(6, ge=1)
    client_stages: list[str] = Field(default_factory=lambda: ["send", "throttle"])  # Rule 7
    # Rule 8: stage p99 ≥ degraded_ratio × the peers' median and ≥ degraded_excess_ms above it.
    degraded_ratio: float = Field(5.0, ge=1.0)
    degraded_excess_ms: float = Field(10.0, ge=0)
    # Rule 9: an own stage's p99 at least this many ms above its peers' median (and degraded_ratio ×).
    culprit_excess_ms: float = Field(150.0, ge=0)
    culprit_stages: list[str] = Field(default_factory=lambda: ["requestQueue", "local", "responseQueue"])
    # Rule 10: windows naming the one cause (Rules 5, 9) before an all-waiting window is its.
    attribute_min_windows: int = Field(2, ge=1)
    # Rule 10: windows that leave the same broker out (Rule 5's shape) point at it as well.
    attribute_left_out: bool = True
    # Rule 10: no other broker named in this many windows (the history's and those before it).
    attribute_lookback_windows: int = Field(18, ge=1)
    # Stages that wait by design per request type (a fetch's long poll in purgatory): never slowness.
    wait_stages: dict[str, list[str]] = Field(
        default_factory=lambda: {FETCH_CONSUMER: ["remote"], FETCH_FOLLOWER: ["remote"]}
    )
    # Rule 11: a request-queue excess is the disk's when ``local`` is itself out of line: at
    # least degraded_ratio × its peers' median and this many ms above it.
    queue_behind_local_ms: float = Field(5.0, ge=0)
    # Rule 12: a broker's logged requests / its own baseline, at most this × its peers' median
    # of the same ratio: it serves few (a paused JVM). Healthy brokers of the fault matrix's
    # runs read 0.73 at the lowest (0.90 in a 15-minute bursty soak).
    stopped_ratio: float = Field(0.65, gt=0, lt=1)
    stopped_baseline_windows: int = Field(3, ge=1)
    # Rule 13: the follower a degraded remote waits on: every other broker's remote p99 at least
    # this × its own (and degraded_excess_ms above it), or else its throughput at most
    # follower_few_ratio × its peers' median. Run 10's stalled follower: 4-268 ms against 0 ms,
    # throughput 0.54-0.58 against 0.76-0.92; in no window of runs 8-10 outside a stall did
    # a broker's degraded remote occur for either to read.
    follower_remote_ratio: float = Field(3.0, ge=1.0)
    follower_few_ratio: float = Field(0.85, gt=0, lt=1)
    # Rule 13 with no leader degraded: the follower whose waited remote p99 (the requests that
    # waited at all) every other broker's is at least follower_remote_ratio × and this far above.
    # Fault-matrix runs 8-11: 311-399 ms above it in every window of the 400/1000 leader pause
    # and the stalled follower, 832-895 ms in all but one of the 900/1000 pause; at most 25 ms
    # in the 15-minute bursty soaks and in every window outside a stall.
    follower_waited_excess_ms: float = Field(50.0, gt=0)


@dataclass(frozen=True)
class WindowVerdict:
    window_start_ms: int
    count: int
    p99_ms: float | None
    peers_median_p99_ms: float | None
    slow: bool


@dataclass(frozen=True)
class Score:
    """Outcome of the score walk over one subject's windows."""

    score: int
    active: bool
    windows: tuple[WindowVerdict, ...]


def walk_states(slow_flags: Iterable[bool | None], cfg: SlowBrokerConfig) -> list[tuple[int, bool]]:
    """Rule 2: the saturating score and the hysteresis state after each window. A flag of None
    is a window that is no evidence either way (Rule 12): the score holds."""
    score, active, states = 0, False, []
    for slow in slow_flags:
        if slow is not None:
            score = min(cfg.max_score, score + 1) if slow else max(0, score - 1)
        if score >= cfg.fire_score:
            active = True
        elif score <= cfg.clear_score:
            active = False
        states.append((score, active))
    return states


def walk_score(slow_flags: Iterable[bool | None], cfg: SlowBrokerConfig) -> tuple[int, bool]:
    """Rule 2: the saturating score and the hysteresis state after the last window."""
    states = walk_states(slow_flags, cfg)
    return states[-1] if states else (0, False)


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class WindowCause:
    """One window of one request type as Rules 1, 3, 5, 9 and 10 read it, computed once."""

    usable: dict[int, StageWindow]  # total rows with at least ``min_requests``
    above: frozenset[int]  # of those, above the absolute threshold
    waiting: tuple[int, ...]  # of those, spending ``remote_share`` of their p99 in ``remote``
    suspect: int | None  # Rule 5: the stalled follower the waiting leaders point at
    culprit: tuple[int, str] | None  # Rule 9: (broker, its own stage out of line, or "")
    left_out: int | None = None  # Rule 5's shape without its replication check (Rule 10)
    stopped: int | None = None  # Rule 12: the one broker serving few requests
    # Rule 5: under the threshold, waiting in ``remote`` at least ``wait_floor_ms``
    waiting_below: tuple[int, ...] = ()

    @property
    def culprit_broker(self) -> int | None:
        return self.culprit[0] if self.culprit is not None else None

    @property
    def named(self) -> int | None:
        """The one broker Rule 9 or Rule 5 names as the window's cause, or None."""
        return self.culprit[0] if self.culprit is not None else self.suspect


class _Table:
    """Rows indexed by (request, stage) → window → broker, and each window's cause."""

    def __init__(self, rows: Iterable[StageWindow]) -> None:
        self.rows: dict[tuple[str, str], dict[int, dict[int, StageWindow]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        self.causes: dict[tuple[str, int], WindowCause] = {}
        self._throughputs: dict[tuple[str, int], dict[int, float]] = {}  # Rules 12 and 13 read them
        for r in rows:
            if r.broker is not None:
                self.rows[(r.request, r.stage)][r.window_start_ms][r.broker] = r

    def cause(self, request: str, w: int, cfg: SlowBrokerConfig) -> WindowCause:
        """Rules 5 and 9 in window ``w`` (one config per table)."""
        key = (request, w)
        if key not in self.causes:
            usable = self.usable(request, "total", w, cfg.min_requests)
            above = frozenset(b for b, r in usable.items() if (r.p99_ms or 0.0) > cfg.p99_threshold_ms)
            remote = self.usable(request, "remote", w, 1)
            remote_ms = {
                b: remote[b].p99_ms or 0.0
                for b in usable
                if b in remote and (remote[b].p99_ms or 0.0) >= cfg.remote_share * (usable[b].p99_ms or 0.0)
            }  # the brokers whose p99 is mostly the wait for their followers (Rule 5's share)
            waiting = tuple(sorted(b for b in above if b in remote_ms))
            below = tuple(
                sorted(b for b, ms in remote_ms.items() if b not in above and ms >= cfg.wait_floor_ms)
            )
            culprit = _window_culprit(self, request, w, cfg, usable, above, set(waiting))
            left_out, suspect = _window_suspect(
                self, request, w, cfg, usable, list(waiting), list(below), culprit
            )
            stopped = self.stopped(request, w, cfg)
            # A long poll in remote (wait_stages) is no leader waiting on a follower: no request
            # type whose remote waits by design names a stalled follower (Rules 5 and 12). The
            # fault matrix's soak raised one on FetchConsumer: consumers waiting out their polls.
            if "remote" in cfg.wait_stages.get(request, []):
                suspect = None
            # Rule 12: the broker serving few is what the waiting brokers wait on.
            elif (
                stopped is not None
                and any(b != stopped for b in waiting)
                and (culprit is None or culprit[0] == stopped)
            ):
                suspect = stopped
            self.causes[key] = WindowCause(
                usable, above, waiting, suspect, culprit, left_out, stopped, waiting_below=below
            )
        return self.causes[key]

    def throughputs(self, request: str, w: int, cfg: SlowBrokerConfig) -> dict[int, float]:
        """Rule 12's throughput in window ``w``: each broker's logged requests against its own
        baseline (brokers without a baseline are left out)."""
        if (request, w) in self._throughputs:
            return self._throughputs[(request, w)]
        by_window = self.rows.get((request, "total"), {})
        earlier = sorted(x for x in by_window if x < w)[-cfg.attribute_lookback_windows :]
        throughput: dict[int, float] = {}
        for b, row in by_window.get(w, {}).items():
            base = [by_window[x][b].logged for x in earlier if b in by_window[x]]
            baseline = _median(base) if len(base) >= cfg.stopped_baseline_windows else None
            if baseline is not None and baseline >= cfg.min_requests:
                throughput[b] = row.logged / baseline
        self._throughputs[(request, w)] = throughput
        return throughput

    def stopped(self, request: str, w: int, cfg: SlowBrokerConfig) -> int | None:
        """Rule 12 in window ``w``: the one broker whose throughput (logged requests against its
        own baseline) is at most ``stopped_ratio`` × its peers' median throughput, or None."""
        low = _serving_less(self.throughputs(request, w, cfg), cfg.stopped_ratio, set())
        return low[0] if len(low) == 1 else None

    def known(self, request: str) -> set[int]:
        """Brokers with a total row for ``request`` in any window of the table."""
        return {b for by_broker in self.rows.get((request, "total"), {}).values() for b in by_broker}

    def windows(self, request: str, stage: str, now_ms: int, window_s: int, limit: int) -> list[int]:
        done = [w for w in self.rows[(request, stage)] if w + window_s * 1000 <= now_ms]
        return sorted(done)[-limit:]

    def lookback(self, request: str, now_ms: int, window_s: int, cfg: SlowBrokerConfig) -> list[int]:
        """The request type's finished windows Rules 6 and 10 read, the newest last: the longer
        of the history and ``attribute_lookback_windows``; the history is its last
        ``history_windows``."""
        span = max(cfg.history_windows, cfg.attribute_lookback_windows)
        return self.windows(request, "total", now_ms, window_s, span)

    def usable(self, request: str, stage: str, window: int, min_requests: int) -> dict[int, StageWindow]:
        by_broker = self.rows.get((request, stage), {}).get(window, {})
        # ``logged``, not ``count``: under sampled capture a count is an estimate, and a p99 is
        # only as good as the logged requests it is read from.
        return {b: r for b, r in by_broker.items() if r.logged >= min_requests and r.p99_ms is not None}


def _serving_less(throughput: dict[int, float], ratio: float, leave_out: set[int]) -> list[int]:
    """The brokers (``leave_out`` aside) whose throughput is at most ``ratio`` × the median of
    every other broker's (Rules 12 and 13)."""
    return [
        b
        for b, t in throughput.items()
        if b not in leave_out
        and len(throughput) >= 2
        and t <= ratio * (_median([x for p, x in throughput.items() if p != b]) or 0.0)
    ]


def _waited_remote(
    table: _Table, request: str, w: int, cfg: SlowBrokerConfig, mixed: bool
) -> dict[int, float]:
    """Each broker's ``remote`` p99 of the requests that waited at all
    (:attr:`StageWindow.nonzero_p99_ms`). A row without it reads 0 when its p99 is 0 (nothing
    waited); else (a row built without it) its mixed p99 if ``mixed``, or it is left out."""
    out = {}
    for b, r in table.usable(request, "remote", w, cfg.min_requests).items():
        if r.nonzero_p99_ms is not None:
            out[b] = r.nonzero_p99_ms
        elif mixed or not r.p99_ms:
            out[b] = r.p99_ms or 0.0
    return out


def _told_apart(
    remote: dict[int, float], leave_out: Sequence[int], ratio: float, excess_ms: float
) -> list[int]:
    """The brokers (``leave_out`` aside) whose ``remote`` every other broker's is at least
    ``ratio`` × and ``excess_ms`` above."""
    return [
        s
        for s, own in remote.items()
        if s not in leave_out
        and len(remote) >= 2
        and all(ms >= ratio * own and ms - own >= excess_ms for b, ms in remote.items() if b != s)
    ]


def waited_follower(
    table: _Table, request: str, w: int, cfg: SlowBrokerConfig
) -> tuple[int, float, float] | None:
    """Rule 13 in a window with no leader degraded: ``(broker, the others' lowest waited remote
    p99, its own)`` for the one broker every other broker's acks=all requests wait on, told apart
    by ``follower_remote_ratio`` and ``follower_waited_excess_ms``; else None."""
    remote = _waited_remote(table, request, w, cfg, mixed=False)
    found = _told_apart(remote, (), cfg.follower_remote_ratio, cfg.follower_waited_excess_ms)
    if len(found) != 1:
        return None
    s = found[0]
    return s, min(ms for b, ms in remote.items() if b != s), remote[s]


def followed_broker(
    table: _Table, request: str, w: int, leaders: Sequence[int], cfg: SlowBrokerConfig
) -> int | None:
    """Rule 13 in window ``w``: the one follower that ``leaders`` (degraded in ``remote``) wait on,
    or None when no one broker is told apart.

    (a) reads each broker's ``remote`` p99 of the requests that waited at all
    (:attr:`StageWindow.nonzero_p99_ms`): acks=1 Produce never waits, and where most requests
    are acks=1 the mixed p99 shows the acks=all wait only now and then (fault matrix run 8: the
    leaders' 361-400 ms against the follower's 6-20 ms, where the mixed p99 read 4-67 ms against
    2-5 ms) (:func:`_waited_remote`)."""
    remote = _waited_remote(table, request, w, cfg, mixed=True)
    lowest = _told_apart(remote, leaders, cfg.follower_remote_ratio, cfg.degraded_excess_ms)
    if len(lowest) == 1:
        return lowest[0]
    few = _serving_less(table.throughputs(request, w, cfg), cfg.follower_few_ratio, set(leaders))
    return few[0] if len(few) == 1 else None


def still_waiting(
    table: _Table, request: str, w: int, follower: int, lowest_ms: float, cfg: SlowBrokerConfig
) -> bool:
    """Rule 13's hold, in a window that tells no follower apart right after one that named
    ``follower`` (the others' lowest waited ``remote`` p99 then ``lowest_ms``): every other
    broker's acks=all requests still wait at least half as long. A broker paused in a duty cycle
    makes its own acks=all requests wait out its pauses too, so now and then its waited p99 is
    as high as its peers' (fault-matrix run 22's 400/1000 pause: 399, 408 and 399 ms, between
    windows of 384 and 327 ms against its 24 ms): no sign of recovery, and its score holds,
    neither up nor down, for that one window (no hold follows a hold)."""
    remote = _waited_remote(table, request, w, cfg, mixed=False)
    others = [ms for b, ms in remote.items() if b != follower]
    return bool(others) and min(others) >= lowest_ms / 2


def _peer_median(usable: dict[int, StageWindow], broker: int) -> float | None:
    return _median([r.p99_ms for b, r in usable.items() if b != broker and r.p99_ms is not None])


def broker_scores(
    data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, table: _Table | None = None
) -> dict[tuple[int, str], Score]:
    """Rules 1–2 for every (broker, request type) seen; also feeds the score gauge."""
    table = table if table is not None else _Table(data.broker_stages)
    out: dict[tuple[int, str], Score] = {}
    for request in cfg.requests:
        windows = table.windows(request, "total", now_ms, data.window_s, cfg.history_windows)
        brokers = {b for w in windows for b in table.rows[(request, "total")][w]}
        for b in sorted(brokers):
            verdicts = []
            for w in windows:
                usable = table.usable(request, "total", w, cfg.min_requests)
                row = table.rows[(request, "total")][w].get(b)
                peers = _peer_median(usable, b)
                mine = usable.get(b)
                slow = (
                    mine is not None
                    and peers is not None
                    and mine.p99_ms is not None
                    and mine.p99_ms > cfg.p99_threshold_ms
                    and (
                        mine.p99_ms >= cfg.peer_ratio * peers
                        or table.cause(request, w, cfg).culprit_broker == b
                    )
                    # A consumer's long poll (fetch.max.wait.ms in purgatory) is no slowness: the
                    # fault matrix's bursty soak raised slow_broker on FetchConsumer (stage remote)
                    # for the broker whose consumers happened to wait out their polls.
                    and not _waits_by_design(table, request, w, b, mine, cfg)
                )
                verdicts.append(
                    WindowVerdict(w, row.count if row else 0, row.p99_ms if row else None, peers, bool(slow))
                )
            score, active = walk_score((v.slow for v in verdicts), cfg)
            out[(b, request)] = Score(score, active, tuple(verdicts))
    return out


def cluster_score(
    data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, request: str, table: _Table | None = None
) -> tuple[Score, list[dict]]:
    """Rule 3 for one request type: the fraction of brokers above the absolute threshold.

    The evidence has one entry per history window; ``cluster_active`` is Rule 3's state after
    the window, walked from the start of the longer lookback (``attribute_lookback_windows``),
    which Rule 6 reads: a slowdown that fired stays in view after its history has scrolled on."""
    table = table if table is not None else _Table(data.broker_stages)
    lookback = table.lookback(request, now_ms, data.window_s, cfg)
    windows = lookback[-cfg.history_windows :]
    early = lookback[: len(lookback) - len(windows)]
    attributed = attributed_windows(table, request, windows, cfg, lookback)
    # The windows before the history as they were judged with the lookback as their history.
    early_attributed = attributed_windows(table, request, lookback, cfg) if early else {}
    early_flags = [_cluster_wide(table, request, w, cfg, early_attributed)[0] for w in early]
    flags, evidence = [], []
    for w in windows:
        flag, above, usable, cause = _cluster_wide(table, request, w, cfg, attributed)
        flags.append(flag)
        evidence.append(
            {
                "window_start_ms": w,
                "cluster_wide": flag,
                "brokers_above": above,
                "brokers_reporting": len(usable),
                "brokers_waiting_remote": list(cause.waiting),
                "culprit": None
                if cause.culprit is None
                else {"broker": cause.culprit[0], "stage": cause.culprit[1]},
                "attributed_to": attributed.get(w),
            }
        )
    for e, (_, active) in zip(evidence, walk_states(early_flags + flags, cfg)[len(early) :], strict=True):
        e["cluster_active"] = active
    score, active = walk_score(flags, cfg)
    return Score(score, active, ()), evidence


def _cluster_wide(
    table: _Table, request: str, w: int, cfg: SlowBrokerConfig, attributed: dict[int, int]
) -> tuple[bool, list[int], dict[int, StageWindow], WindowCause]:
    """Rule 3's test of one window: (cluster-wide, brokers above, usable rows, the cause)."""
    usable = table.usable(request, "total", w, cfg.min_requests)
    # Waits by design (a long poll) are not slowness: not counted above the threshold.
    above = sorted(
        b
        for b, r in usable.items()
        if (r.p99_ms or 0.0) > cfg.p99_threshold_ms and not _waits_by_design(table, request, w, b, r, cfg)
    )
    fraction = len(above) / len(usable) if len(usable) >= 2 else 0.0
    cause = table.cause(request, w, cfg)
    # Leaders waiting on one stalled follower (Rule 5) are not a cluster-wide slowdown, even
    # in the windows before Rule 5's own score has fired.
    # Nor is one broker slow in its own stages with the other slow ones only waiting on
    # replication (remote): the leaders wait on that broker as their follower, one cause.
    own = [b for b in above if b not in cause.waiting]
    single_cause = len(own) == 1 and len(cause.waiting) >= 1
    # Nor is one broker out of line in its own stages with the others waiting in remote,
    # whether or not it waits in remote too (Rule 9).
    flag = (
        fraction > cfg.cluster_wide_fraction
        and cause.suspect is None
        and not single_cause
        and cause.culprit is None
        and w not in attributed  # Rule 10
    )
    return flag, above, usable, cause


def _window_culprit(
    table: _Table,
    request: str,
    w: int,
    cfg: SlowBrokerConfig,
    usable: dict[int, StageWindow],
    above: frozenset[int],
    waiting: set[int],
) -> tuple[int, str] | None:
    """Rule 9 in one window: ``(broker, stage)`` of the one broker above the threshold whose own
    stage is far out of line with its peers', when every other broker above the threshold waits
    in ``remote``; or ``(broker, "")`` when no own stage stands out anywhere but exactly one
    broker above the threshold does not wait in ``remote`` while the others above it do; else
    None."""
    if len(usable) < 2:
        return None
    out_of_line: dict[int, tuple[str, float]] = {}
    for stage in cfg.culprit_stages:
        rows = table.usable(request, stage, w, 1)
        for b in above:
            mine, peers = rows.get(b), _peer_median(rows, b)
            if mine is None or mine.p99_ms is None or peers is None:
                continue
            excess = mine.p99_ms - peers
            far = mine.p99_ms >= cfg.degraded_ratio * peers and excess >= cfg.culprit_excess_ms
            if far and (b not in out_of_line or excess > out_of_line[b][1]):
                out_of_line[b] = (stage, excess)
    if len(out_of_line) == 1:
        ((b, (stage, _)),) = out_of_line.items()
        return (b, stage) if above - {b} <= waiting else None
    if not out_of_line:
        # The same cause when no stage stands out: the one broker above the threshold that does
        # not wait in remote, while the others above it do (their time is spent waiting on it).
        own = above - waiting
        if len(own) == 1 and len(above) >= 2:
            return (next(iter(own)), "")
    return None


def _waits_by_design(
    table: _Table, request: str, w: int, b: int, row: StageWindow, cfg: SlowBrokerConfig
) -> bool:
    """Broker ``b``'s time for ``request`` in window ``w`` is a wait by design: a ``wait_stages``
    stage carries at least ``remote_share`` of its total p99 (``row``)."""
    for stage in cfg.wait_stages.get(request, []):
        r = table.usable(request, stage, w, 1).get(b)
        if r is not None and (r.p99_ms or 0.0) >= cfg.remote_share * (row.p99_ms or 0.0):
            return True
    return False


def attributed_windows(
    table: _Table, request: str, windows: list[int], cfg: SlowBrokerConfig, lookback: list[int] | None = None
) -> dict[int, int]:
    """Rule 10 over ``windows`` (a request type's history): window -> broker, for the windows in
    which every broker above the threshold waits in ``remote`` (at least two) and no cause is
    named, when Rules 5 and 9 named exactly one broker over the windows, in at least
    ``attribute_min_windows`` of them, and no other broker over ``lookback`` (the longer span of
    ``attribute_lookback_windows`` ending with ``windows``; default: ``windows``)."""
    causes = [table.cause(request, w, cfg) for w in windows]
    named = [c.named for c in causes if c.named is not None]
    # Every broker paused in turn names each of them now and then: a cause named in the history
    # alone, with another named just before it, is no cause of the all-waiting windows.
    earlier = [table.cause(request, w, cfg).named for w in (lookback or [])[: -len(windows) or None]]
    if any(b is not None and b not in named for b in earlier):
        return {}
    # The windows in which the same broker is left out (below the threshold, not waiting, while
    # the others wait) point at it too: a paused broker's own acks=all requests wait out its
    # pauses as well, so Rule 5's replication check often rejects it.
    # They add to the count of the one broker Rules 5 and 9 named; they never name one alone.
    if len(set(named)) != 1:
        return {}
    left_out = [c for c in causes if c.named is None and c.left_out == named[0]]
    if len(named) + (len(left_out) if cfg.attribute_left_out else 0) < cfg.attribute_min_windows:
        return {}
    return {
        w: named[0]
        for w, c in zip(windows, causes, strict=True)
        if c.named is None and len(c.above) >= 2 and c.above <= set(c.waiting)
    }


def queue_behind_local(
    table: _Table, broker: int, request: str, windows: Sequence[int], cfg: SlowBrokerConfig
) -> bool:
    """Rule 11: the broker's ``local`` p99 out of line (``degraded_ratio`` × its peers' median and
    ``queue_behind_local_ms`` above it) in at least half of the ``windows`` it was measured in."""
    out_of_line = measured = 0
    for w in windows:
        usable = table.usable(request, "local", w, cfg.min_requests)
        mine, peers = usable.get(broker), _peer_median(usable, broker)
        if mine is None or mine.p99_ms is None or peers is None:
            continue
        measured += 1
        excess = mine.p99_ms - peers
        out_of_line += mine.p99_ms >= cfg.degraded_ratio * peers and excess >= cfg.queue_behind_local_ms
    return measured > 0 and 2 * out_of_line >= measured


def attribute_stage(
    table: _Table, broker: int, request: str, windows: Sequence[int], cfg: SlowBrokerConfig
) -> dict[str, float]:
    """Rule 4: stage → mean excess of the broker's stage p99 over its peers' median, in ms. A
    stage that waits by design for ``request`` (``wait_stages``: a consumer fetch's long poll) is
    never the stage at fault: with its handler threads held, broker 2's consumer fetches waited
    longer in purgatory too (the data they wait for came late), and fault-matrix run 20 named
    that wait (``remote``, with a "slow follower") on a broker whose request queue was at fault."""
    excess: dict[str, float] = {}
    waits = set(cfg.wait_stages.get(request, ()))
    for stage in (s for s in cfg.stages if s not in waits):
        diffs = []
        for w in windows:
            usable = table.usable(request, stage, w, 1)
            mine, peers = usable.get(broker), _peer_median(usable, broker)
            if mine is not None and mine.p99_ms is not None and peers is not None:
                diffs.append(mine.p99_ms - peers)
        if diffs:
            excess[stage] = statistics.fmean(diffs)
    return excess


@dataclass(frozen=True)
class StalledFollower:
    """Rule 5 outcome for one suspect and request type."""

    broker: int
    request: str
    score: Score
    leaders_waiting: tuple[int, ...]
    leader_p99_ms: tuple[float | None, ...]  # per window: the worst waiting leader's p99
    # Per window: the own stage that made it the window's culprit (Rule 9), or None.
    culprit_stages: tuple[str | None, ...] = ()
    # Its own local p99 out of line in at least half of its slow windows (Rule 11's test): slow
    # at its disk, it appends slowly as a follower too and serves its followers' fetches late.
    disk_bound: bool = False

    @property
    def own_stage(self) -> str | None:
        """The own stage it was out of line in most often, when Rule 9's windows outnumber Rule
        5's (it stalls while serving, not only as a follower); else None (stage ``remote``). A
        tie is ``remote``, as on the Prometheus path, whose alert names ``remote`` while the
        leaders wait on the broker (the demo's paused leader: one window each way when found)."""
        stages = [x for x in self.culprit_stages if x]  # "": a culprit with no stage out of line
        suspect_windows = sum(v.slow for v in self.score.windows) - len(stages)
        if not stages or len(stages) <= suspect_windows:
            return None
        return max(sorted(set(stages)), key=stages.count)


def _window_suspect(
    table: _Table,
    request: str,
    w: int,
    cfg: SlowBrokerConfig,
    usable: dict[int, StageWindow],
    waiting: list[int],
    below: list[int],
    culprit: tuple[int, str] | None,
) -> tuple[int | None, int | None]:
    """Rule 5 in one window: ``(left out, suspect)``. *Left out*: the one reporting broker not
    waiting, below the threshold (or with too few requests to judge), while at least
    ``min_waiting_leaders`` wait above the threshold; the *suspect* is that broker when its own
    replication is fine and no other broker is the window's culprit (Rule 9). With fewer waiting
    above the threshold but at least one, the brokers under it waiting at least
    ``wait_floor_ms`` in ``remote`` (``below``) count as waiting leaders too. Not when enough
    wait above it: a broker paused in a duty cycle waits under the line itself (its own acks=all
    requests wait out its pauses), and it is then the one left out, not a waiting leader.

    The suspect is the one reporting broker that is not waiting. It may have served too few
    requests to be judged itself (a stalled JVM serves few): then it is a suspect whatever its
    p99; with enough requests its p99 must be below the threshold (else it is slow itself)."""
    # A broker seen in the history but silent in this window counts as reporting: a stalled JVM
    # may log nothing for a window (or its agent's row arrives late), and it is then the best
    # suspect, not a reason to read the waiting leaders as a cluster-wide slowdown.
    reporting = set(table.usable(request, "total", w, 1)) | table.known(request)
    leaders = waiting if len(waiting) >= cfg.min_waiting_leaders or not waiting else waiting + below
    others = [b for b in reporting if b not in leaders]
    if len(leaders) < cfg.min_waiting_leaders or len(others) != 1:
        return None, None
    b = others[0]
    if b in usable and (usable[b].p99_ms or 0.0) > cfg.p99_threshold_ms:
        return None, None
    remote = table.usable(request, "remote", w, 1)
    suspect = b if _replicates_fine(remote, b, leaders, cfg) else None
    # A waiting broker far out of line in its own stages (Rule 9) is what the others wait on;
    # the one broker not waiting is then only the one it does not lead for.
    if culprit is not None and culprit[0] != suspect:
        suspect = None
    return b, suspect


def _replicates_fine(
    remote: dict[int, StageWindow], b: int, waiting: list[int], cfg: SlowBrokerConfig
) -> bool:
    """Rule 5's check on a suspect: its own ``remote`` p99 (when it reported one) is clearly
    below the waiting leaders' median, so it is not itself a leader waiting on replication."""
    mine = remote.get(b)
    leaders = _median([remote[x].p99_ms or 0.0 for x in waiting])
    if mine is None or mine.p99_ms is None or leaders is None:
        return True
    return mine.p99_ms <= cfg.suspect_remote_ratio * leaders


def stalled_followers(
    data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, table: _Table | None = None
) -> list[StalledFollower]:
    """Rule 5 for every request type: suspects whose score is active now or was in one of the
    last ``hold_windows`` windows (``score.active`` tells which; the latter only withhold Rule 8's
    early warning, see :func:`recently_active`). A window in which a suspect is instead the
    culprit (Rule 9: stalled while serving, so waiting in ``remote`` too) is one of its windows
    as well: a broker paused most of the time shows one shape or the other from window to window,
    and is one cause throughout."""
    table = table if table is not None else _Table(data.broker_stages)
    out = []
    for request in cfg.requests:
        lookback = table.lookback(request, now_ms, data.window_s, cfg)
        windows = lookback[-cfg.history_windows :]
        causes = [table.cause(request, w, cfg) for w in windows]
        attributed = attributed_windows(table, request, windows, cfg, lookback) if windows else {}
        # Per window: the worst waiting leader's p99.
        worst = tuple(max((c.usable[x].p99_ms or 0.0 for x in c.waiting), default=None) for c in causes)
        for b in sorted({c.suspect for c in causes if c.suspect is not None}):
            own = tuple(c.culprit[1] if c.culprit is not None and c.culprit[0] == b else None for c in causes)
            verdicts = tuple(
                WindowVerdict(
                    w,
                    row.count if row else 0,
                    row.p99_ms if row else None,
                    worst_p99,
                    c.suspect == b or x is not None,
                )
                for w, c, x, worst_p99 in zip(windows, causes, own, worst, strict=True)
                for row in [c.usable.get(b)]
            )
            # Rule 12: a window in which it serves few and nobody waits on it holds its score.
            # So does a window Rule 10 attributes to it (every broker waiting, itself too: a
            # paused broker's own acks=all requests wait out its pauses): not a slow window of
            # its own, but no sign of recovery either. Counted as healthy, one such window
            # cleared the finding and the next raised it again (a demotion undone and redone).
            flags = [
                v.slow or (None if c.stopped == b or attributed.get(w) == b else False)
                for w, v, c in zip(windows, verdicts, causes, strict=True)
            ]
            states = walk_states(flags, cfg)
            score, active = states[-1] if states else (0, False)
            if any(a for _, a in states[-cfg.hold_windows :]):
                leaders = {
                    x
                    for c, o in zip(causes, own, strict=True)
                    if c.suspect == b or o
                    for x in (*c.waiting, *c.waiting_below)
                }
                slow = [v.window_start_ms for v in verdicts if v.slow]
                out.append(
                    StalledFollower(
                        b,
                        request,
                        Score(score, active, verdicts),
                        tuple(sorted(leaders - {b})),
                        worst,
                        own,
                        disk_bound=bool(slow) and queue_behind_local(table, b, request, slow, cfg),
                    )
                )
    return out


def recently_active(score: Score, cfg: SlowBrokerConfig) -> bool:
    """Rule 1's walk (Rule 2) was active in one of the last ``hold_windows`` windows."""
    return any(a for _, a in walk_states((v.slow for v in score.windows), cfg)[-cfg.hold_windows :])


def slowest_peer(scores: dict[tuple[int, str], Score], broker: int) -> int | None:
    """The peer that looks slowest itself: highest score, then highest recent p99 ratio."""

    def badness(item: tuple[tuple[int, str], Score]) -> tuple[int, float]:
        (_, _), s = item
        ratios = [
            v.p99_ms / v.peers_median_p99_ms for v in s.windows[-3:] if v.p99_ms and v.peers_median_p99_ms
        ]
        return s.score, max(ratios, default=0.0)

    peers = [item for item in scores.items() if item[0][0] != broker]
    if not peers:
        return None
    return max(peers, key=badness)[0][0]


def rank_clients(
    rows: Iterable[ClientWindow], broker: int, request: str, stage: str, windows: Iterable[int]
) -> list[dict]:
    """Rule 7: the clients the exemplars name in ``windows`` on ``broker``, slowest in ``stage``
    first: ``{"client_id", "exemplars", "stage_ms_max"}``. Exemplars without a client id or
    without time in ``stage`` name nobody."""
    wanted = set(windows)
    by_client: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for r in rows:
        ms = r.send_ms_max if stage == "send" else r.throttle_ms_max if stage == "throttle" else 0.0
        if (
            r.broker == broker
            and r.request == request
            and r.window_start_ms in wanted
            and r.client_id
            and ms > 0
        ):
            acc = by_client[r.client_id]
            acc[0], acc[1] = acc[0] + r.count, max(acc[1], ms)
    ranked = sorted(by_client.items(), key=lambda kv: (-kv[1][1], -kv[1][0], kv[0]))
    return [{"client_id": c, "exemplars": int(n), "stage_ms_max": ms} for c, (n, ms) in ranked]


def own_stages(cfg: SlowBrokerConfig, request: str) -> list[str]:
    """Rule 8: the stages that are the broker's own work for ``request`` (not a client's, not a
    wait by design)."""
    skip = set(cfg.client_stages) | set(cfg.wait_stages.get(request, ()))
    return [s for s in cfg.stages if s not in skip]


def degraded_stage(
    table: _Table, request: str, w: int, b: int, cfg: SlowBrokerConfig
) -> tuple[str, float, float] | None:
    """Rule 8 in one window: ``(stage, b's p99, peers' median p99)`` of the degraded stage with the
    largest excess, or None (too few requests, nothing degraded). Above the threshold only the
    broker's own work counts (``culprit_stages``): a leader's ``remote`` above it is Rules 5, 12
    and 13's to judge."""
    total = table.usable(request, "total", w, cfg.min_requests).get(b)
    if total is None:
        return None
    above = (total.p99_ms or 0.0) > cfg.p99_threshold_ms
    best: tuple[str, float, float] | None = None
    for stage in own_stages(cfg, request):
        if above and stage not in cfg.culprit_stages:
            continue
        usable = table.usable(request, stage, w, cfg.min_requests)
        mine, peers = usable.get(b), _peer_median(usable, b)
        if mine is None or mine.p99_ms is None or peers is None:
            continue
        excess = mine.p99_ms - peers
        degraded = mine.p99_ms >= cfg.degraded_ratio * peers and excess >= cfg.degraded_excess_ms
        if degraded and (best is None or excess > best[1] - best[2]):
            best = (stage, mine.p99_ms, peers)
    if best is not None and best[0] == "requestQueue" and queue_behind_local(table, b, request, [w], cfg):
        usable = table.usable(request, "local", w, cfg.min_requests)
        best = ("local", usable[b].p99_ms or 0.0, _peer_median(usable, b) or 0.0)  # Rule 11
    return best


@dataclass(frozen=True)
class Degraded:
    """Rule 8 outcome for one broker and request type."""

    broker: int
    request: str
    score: Score
    per_window: tuple[tuple[str, float, float] | None, ...]
    # Per window: degraded as the broker its peers wait on (Rules 12 and 13), not in its own stage
    # times: per_window then holds ("remote", the peers' remote p99, its own remote p99).
    waited_on: tuple[bool, ...] = ()
    # Per window: the broker served few then (Rule 12), not only waited on (Rule 13).
    served_few: tuple[bool, ...] = ()

    @property
    def stage(self) -> str:
        """The stage degraded in the most windows; of those, the one with the largest summed
        excess. One window's outlier (a replication wait of 240 ms in one window of a broker
        whose request queue is out of line in most) does not name the stage."""
        windows: dict[str, int] = defaultdict(int)
        excess: dict[str, float] = defaultdict(float)
        for x in self.per_window:
            if x is not None:
                windows[x[0]] += 1
                excess[x[0]] += x[1] - x[2]
        return max(excess, key=lambda s: (windows[s], excess[s]))


def waited_on_stage(
    table: _Table, request: str, w: int, s: int, cfg: SlowBrokerConfig
) -> tuple[str, float, float] | None:
    """Rule 12 with Rule 8: ``("remote", peers' median remote p99, s's own)`` when broker ``s``
    serves few in window ``w`` and its peers wait on it, their median ``remote`` p99 at least
    ``degraded_ratio`` × its own and ``degraded_excess_ms`` above it (and under the threshold:
    above it, Rules 5 and 12 judge the window); else None."""
    remote = table.usable(request, "remote", w, cfg.min_requests)
    peers = _peer_median(remote, s)
    mine = remote.get(s)
    own = mine.p99_ms if mine is not None and mine.p99_ms is not None else 0.0
    if peers is None or peers > cfg.p99_threshold_ms:
        return None
    if peers >= cfg.degraded_ratio * own and peers - own >= cfg.degraded_excess_ms:
        return ("remote", peers, own)
    return None


def degraded_brokers(
    data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, table: _Table | None = None
) -> list[Degraded]:
    """Rule 8 for every request type: active degraded brokers, none where more than
    ``cluster_wide_fraction`` of the brokers are active at once."""
    table = table if table is not None else _Table(data.broker_stages)
    out: list[Degraded] = []
    for request in cfg.requests:
        windows = table.windows(request, "total", now_ms, data.window_s, cfg.history_windows)
        brokers = sorted({b for w in windows for b in table.rows[(request, "total")][w]})
        found = []
        per_broker = {b: [degraded_stage(table, request, w, b, cfg) for w in windows] for b in brokers}
        stopped = [table.cause(request, w, cfg).stopped for w in windows]
        waited_on = {b: [False] * len(windows) for b in brokers}
        served_few = {b: [False] * len(windows) for b in brokers}
        held: list[int | None] = [None] * len(windows)  # Rule 13's hold: that broker's score holds
        named: tuple[int, float] | None = None  # told apart in the window before (follower, lowest)
        for i, (w, s) in enumerate(zip(windows, stopped, strict=True)):
            before, named = named, None
            leaders = [b for b in brokers if (per_broker[b][i] or ("",))[0] == "remote"]
            stage: tuple[str, float, float] | None = None
            if s is not None:  # Rule 12
                stage = waited_on_stage(table, request, w, s, cfg) if s in per_broker else None
            elif leaders and "remote" not in cfg.wait_stages.get(request, []):  # Rule 13
                # The leaders' degraded (mixed) remote p99, as the alert rules' value.
                s = followed_broker(table, request, w, leaders, cfg)
                waits = [x[1] for b in leaders if b != s and (x := per_broker[b][i]) is not None]
                own = table.usable(request, "remote", w, cfg.min_requests).get(s) if s is not None else None
                stage = ("remote", max(waits), (own.p99_ms or 0.0) if own else 0.0) if waits else None
            elif "remote" not in cfg.wait_stages.get(request, []):  # Rule 13, no leader degraded
                told = waited_follower(table, request, w, cfg)
                s, stage = (told[0], ("remote", told[1], told[2])) if told else (None, None)
                if told:
                    named = (told[0], told[1])
                elif before is not None and still_waiting(table, request, w, *before, cfg):
                    held[i] = before[0]
            if s is None or s not in per_broker:
                continue
            # Rules 12, 13: the peers' remote degraded waits on that broker; it is its window.
            for b in leaders:
                if b != s:
                    per_broker[b][i] = None
            if per_broker[s][i] is None:
                per_broker[s][i] = stage
                waited_on[s][i] = stage is not None
                served_few[s][i] = stage is not None and stopped[i] == s
        for b in brokers:
            per = tuple(per_broker[b])
            rows = [table.rows[(request, "total")][w].get(b) for w in windows]
            verdicts = tuple(
                WindowVerdict(w, r.count if r else 0, r.p99_ms if r else None, None, x is not None)
                for w, r, x in zip(windows, rows, per, strict=True)
            )
            flags = [
                v.slow or (None if b in (s, h) else False)
                for v, s, h in zip(verdicts, stopped, held, strict=True)
            ]
            score, active = walk_score(flags, cfg)
            if active:
                found.append(
                    Degraded(
                        b,
                        request,
                        Score(score, active, verdicts),
                        per,
                        tuple(waited_on[b]),
                        tuple(served_few[b]),
                    )
                )
        if len(brokers) >= 2 and len(found) / len(brokers) <= cfg.cluster_wide_fraction:
            out += found
    return out


def _one_per_broker(degraded: Sequence[Degraded]) -> list[Degraded]:
    """The highest-scoring request type of each degraded broker, by broker."""
    best: dict[int, Degraded] = {}
    for d in degraded:
        if d.broker not in best or d.score.score > best[d.broker].score.score:
            best[d.broker] = d
    return [best[b] for b in sorted(best)]


class SlowBrokerDetector(Detector[SlowBrokerConfig]):
    name = "slow_broker"
    rule = RULE
    Config = SlowBrokerConfig
    gauges = (
        DetectorGauge(
            "linkwatch_slow_broker_score",
            "consecutive-window slow-broker score",
            ("cluster", "broker", "request"),
        ),
    )

    def measure(self, data: Aggregates, now_ms: int) -> GaugeValues:
        """Rule 2's score of every (broker, request type) seen."""
        scores = broker_scores(data, now_ms, self.config)
        return {
            "linkwatch_slow_broker_score": {
                (data.cluster, str(b), request): s.score for (b, request), s in scores.items()
            }
        }

    def charts(self, data: Aggregates, findings: Sequence[Finding]) -> list[Chart]:
        """p99 total time per broker over time with the threshold, per request type; the stage
        excess of every slow broker found."""
        cfg = self.config
        out: list[Chart] = []
        for request in cfg.requests:
            series: dict[str, list[tuple[int, float]]] = defaultdict(list)
            for r in data.broker_stages:
                if r.request == request and r.stage == "total" and r.p99_ms is not None:
                    series[f"broker {r.broker}"].append((r.window_start_ms, r.p99_ms))
            title = f"{request}: p99 total time per broker"
            out.append(LineChart(title, "ms", dict(series), cfg.p99_threshold_ms))
        for f in findings:
            excess = f.evidence.get("stage_excess_ms")
            if f.rule == RULE and excess:
                out.append(BarChart(f"{f.subject}: stage p99 above peers' median", "ms", excess))
        return out

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        cfg = self.config
        table = _Table(data.broker_stages)  # one index and one Rule 5 pass for every rule
        scores = broker_scores(data, now_ms, cfg, table)
        stalled: dict[int, StalledFollower] = {}
        followers = stalled_followers(data, now_ms, cfg, table)
        for sf in (sf for sf in followers if sf.score.active):
            if sf.broker not in stalled or sf.score.score > stalled[sf.broker].score.score:
                stalled[sf.broker] = sf
        # Rule 8's early warning is withheld from a broker found slow within the last
        # hold_windows windows: its score, raised by the same windows, outlasts the slow finding
        # by a window or two and would only follow it as a lesser finding after the fault.
        recent = {sf.broker for sf in followers} | {
            b for (b, _), s in scores.items() if recently_active(s, cfg)
        }
        explained = {b for sf in stalled.values() for b in sf.leaders_waiting} | set(stalled)
        if stalled:  # Rule 5 explains the leaders' slowness: report the follower, not them.
            scores = {key: s for key, s in scores.items() if key[0] not in explained}
        cluster = [(r, *cluster_score(data, now_ms, cfg, r, table)) for r in cfg.requests]
        wide = [] if stalled else [(r, s, ev) for r, s, ev in cluster if s.active]
        active = {key: s for key, s in scores.items() if s.active}
        brokers = {b for b, _ in scores}
        flagged = {b for b, _ in active}
        if wide or (
            not stalled and len(brokers) >= 2 and len(flagged) / len(brokers) > cfg.cluster_wide_fraction
        ):
            return [self._cluster_finding(data, now_ms, cfg, wide, sorted(flagged))]
        per_broker, clients = self._attribute(table, scores, active, cfg)
        # Rule 6: the most recent window reads cluster-wide, or Rule 3's score was active within
        # the last hold_windows windows (at most the history's: the evidence covers no more):
        # what remediation may act on is only provisional — the engine does not raise it new,
        # but an already active one stays active (withdrawing it would clear and re-raise it,
        # and restore and demote a broker in turn).
        hold = cfg.hold_while_cluster_wide and any(
            ev and (ev[-1]["cluster_wide"] or any(e["cluster_active"] for e in ev[-cfg.hold_windows :]))
            for _, _, ev in cluster
        )
        actable = [self._stalled_finding(data, now_ms, cfg, sf) for _, sf in sorted(stalled.items())]
        actable += [self._broker_finding(data, now_ms, cfg, b, ev) for b, ev in sorted(per_broker.items())]
        if hold:
            why = "the latest window reads cluster-wide (Rule 6): not raised new until it does not"
            actable = [dataclasses.replace(f, evidence={**f.evidence, PROVISIONAL: why}) for f in actable]
        found = actable + [
            self._client_finding(data, now_ms, cfg, b, r, info) for (b, r), info in sorted(clients.items())
        ]
        taken = explained | set(per_broker) | {b for b, _ in clients} | flagged | recent
        degraded = [d for d in degraded_brokers(data, now_ms, cfg, table) if d.broker not in taken]
        return found + [self._degraded_finding(data, now_ms, cfg, d) for d in _one_per_broker(degraded)]

    def _attribute(
        self,
        table: _Table,
        scores: dict[tuple[int, str], Score],
        active: dict[tuple[int, str], Score],
        cfg: SlowBrokerConfig,
    ) -> tuple[dict[int, dict], dict[tuple[int, str], dict]]:
        """Rule 4 for every active (broker, request): per-broker evidence, and apart from it the
        (broker, request) pairs whose excess is a client's stage (Rule 7)."""
        per_broker: dict[int, dict] = {}
        clients: dict[tuple[int, str], dict] = {}
        for (b, request), s in sorted(active.items()):
            slow_windows = [v.window_start_ms for v in s.windows if v.slow] or [s.windows[-1].window_start_ms]
            excess = attribute_stage(table, b, request, slow_windows, cfg)
            stage = max(excess, key=excess.__getitem__) if excess else None
            if stage == "requestQueue" and queue_behind_local(table, b, request, slow_windows, cfg):
                stage = "local"  # Rule 11
            info = {"score": s.score, "stage": stage, "stage_excess_ms": excess, "windows": s.windows}
            if stage in cfg.client_stages:
                clients[(b, request)] = info | {"slow_windows": slow_windows}
                continue
            follower = slowest_peer(scores, b) if stage == "remote" else None
            ev = per_broker.setdefault(b, {"requests": {}, "leaders_waiting": []})
            ev["requests"][request] = info | {"follower": follower}
        # Fold a leader that only waits on a flagged follower into the follower's finding.
        for b, ev in list(per_broker.items()):
            waits = [r["follower"] for r in ev["requests"].values() if r["stage"] == "remote"]
            if waits and len(waits) == len(ev["requests"]) and all(f in per_broker and f != b for f in waits):
                for f in set(waits):
                    per_broker[f]["leaders_waiting"].append(b)
                del per_broker[b]
        return per_broker, clients

    def _client_finding(
        self, data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, b: int, request: str, info: dict
    ) -> Finding:
        stage = info["stage"]
        windows: tuple[WindowVerdict, ...] = info["windows"]
        ranked = rank_clients(data.client_windows, b, request, stage, info["slow_windows"])
        top = ranked[0]["client_id"] if ranked else None
        who = f"client {top}" if top else "an unknown client (no slow-request exemplar names one)"
        meaning = STAGE_MEANING[stage][0] if stage in STAGE_MEANING else stage
        slow = [v for v in windows if v.slow]
        worst = max((v.p99_ms for v in slow if v.p99_ms is not None), default=0.0)
        client = (
            f"client {top}"
            if top
            else f"the unknown client (find it in broker {b}'s request log by sendTimeMs)"
        )
        if stage == "throttle":
            action = f"check the quota of {client} on broker {b} and its request rate"
        else:
            action = (
                f"check {client}: it reads its responses from broker {b} slowly (a stalled poll loop, a "
                f"blocked consumer thread, its host or network)"
            )
        return self.finding(
            data,
            now_ms,
            rule=CLIENT_RULE,
            subject=f"client:{top}" if top else f"client:unknown@broker:{b}",
            severity="warning",
            summary=(
                f"{who} is slow, not broker {b}: {request} p99 {worst:.0f} ms on broker {b} in {len(slow)} of "
                f"{len(windows)} windows, the excess in stage {stage} ({meaning})"
            ),
            evidence={
                "request": request,
                "stage": stage,
                "stage_meaning": meaning,
                "broker": b,
                "client_id": top,
                "clients": ranked,
                "stage_excess_ms": {k: round(v, 3) for k, v in info["stage_excess_ms"].items()},
                "score": info["score"],
                "values": {"p99_ms": [v.p99_ms for v in windows], "count": [v.count for v in windows]},
                "baseline": {
                    "peers_median_p99_ms": [v.peers_median_p99_ms for v in windows],
                    "p99_threshold_ms": cfg.p99_threshold_ms,
                    "peer_ratio": cfg.peer_ratio,
                },
                "windows": [v.window_start_ms for v in windows],
                "slow_windows": [v.window_start_ms for v in slow],
            },
            action=action + f"; broker {b} is not at fault: do not move its leadership",
        )

    def _degraded_finding(self, data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, d: Degraded) -> Finding:
        windows = d.score.windows
        hits = [(v, x) for v, x in zip(windows, d.per_window, strict=True) if x is not None]
        stage = d.stage
        mine = [x[1] for _, x in hits if x[0] == stage]
        peers = [x[2] for _, x in hits if x[0] == stage]
        meaning, action = STAGE_MEANING.get(stage, ("", "inspect broker {b}"))
        if stage == "remote":  # which follower is not known from stage timings alone
            action = "check the followers of the partitions broker {b} leads (disks, network, GC pauses)"
        waited = [x for x, on in zip(d.per_window, d.waited_on, strict=False) if on and x is not None]
        if stage == "remote" and 2 * len(waited) >= len(hits):  # Rule 12: its peers wait on it
            return self._waited_on_finding(data, now_ms, cfg, d, waited)
        ratio = statistics.fmean(mine) / max(statistics.fmean(peers), 1e-9)
        return self.finding(
            data,
            now_ms,
            rule=DEGRADED_RULE,
            subject=f"broker:{d.broker}",
            severity="info",
            summary=(
                f"broker {d.broker} is degraded: {d.request} stage {stage} p99 {max(mine):.0f} ms against its "
                f"peers' {statistics.median(peers):.1f} ms ({ratio:.0f}×) in {len(hits)} of {len(windows)} "
                f"windows, total p99 still under {cfg.p99_threshold_ms:.0f} ms; {meaning}"
            ),
            evidence={
                "request": d.request,
                "stage": stage,
                "stage_meaning": meaning,
                "score": d.score.score,
                "values": {
                    "stage_p99_ms": [x[1] if x else None for x in d.per_window],
                    "p99_ms": [v.p99_ms for v in windows],
                    "count": [v.count for v in windows],
                },
                "baseline": {
                    "peers_median_stage_p99_ms": [x[2] if x else None for x in d.per_window],
                    "degraded_ratio": cfg.degraded_ratio,
                    "degraded_excess_ms": cfg.degraded_excess_ms,
                    "p99_threshold_ms": cfg.p99_threshold_ms,
                },
                "windows": [v.window_start_ms for v in windows],
                "slow_windows": [v.window_start_ms for v, _ in hits],
            },
            action="early warning below the slow-broker threshold: "
            + action.format(b=d.broker, f="(unknown)"),
        )

    def _waited_on_finding(
        self,
        data: Aggregates,
        now_ms: int,
        cfg: SlowBrokerConfig,
        d: Degraded,
        waited: list[tuple[str, float, float]],
    ) -> Finding:
        """Rules 12 and 13's early warning: its peers wait on it in remote (and it serves few)."""
        windows = d.score.windows
        mine = [x if x and on else None for x, on in zip(d.per_window, d.waited_on, strict=False)]
        few = any(d.served_few)
        how = (
            f"serves few {d.request} requests while its peers wait on it as their follower"
            if few
            else f"is the follower its peers' {d.request} requests wait on (acks=all)"
        )
        return self.finding(
            data,
            now_ms,
            rule=DEGRADED_RULE,
            subject=f"broker:{d.broker}",
            severity="info",
            summary=(
                f"broker {d.broker} {how}: "
                f"their remote p99 {max(x[1] for x in waited):.0f} ms against its own "
                f"{statistics.median(x[2] for x in waited):.1f} ms in {len(waited)} of {len(windows)} "
                f"windows, under {cfg.p99_threshold_ms:.0f} ms; a follower stalled part of the time "
                "(GC, a paused JVM, a starved host)"
            ),
            evidence={
                "request": d.request,
                "stage": "remote",
                "stage_meaning": "its peers wait for it to replicate (acks=all): it stalls",
                "score": d.score.score,
                "served_few": few,
                "values": {
                    "peers_remote_p99_ms": [x[1] if x else None for x in mine],
                    "count": [v.count for v in windows],
                },
                "baseline": {
                    "own_remote_p99_ms": [x[2] if x else None for x in mine],
                    "stopped_ratio": cfg.stopped_ratio,
                    "follower_remote_ratio": cfg.follower_remote_ratio,
                    "follower_few_ratio": cfg.follower_few_ratio,
                    "degraded_ratio": cfg.degraded_ratio,
                    "degraded_excess_ms": cfg.degraded_excess_ms,
                },
                "windows": [v.window_start_ms for v in windows],
                "slow_windows": [v.window_start_ms for v, x in zip(windows, d.per_window, strict=True) if x],
            },
            action=(
                f"early warning below the slow-broker threshold: check broker {d.broker} for GC or "
                "process pauses, CPU steal and its disks; it may leave the ISR"
            ),
        )

    def _stalled_finding(
        self, data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, sf: StalledFollower
    ) -> Finding:
        windows = sf.score.windows
        slow = [v for v in windows if v.slow]
        worst = max((p for p in sf.leader_p99_ms if p is not None), default=0.0)
        meaning = (
            "leaders wait in replication (remote) for this broker while its own request times "
            "look normal: it stalls as a follower (GC or process pauses, a hung fetcher, its network)"
        )
        leaders = ", ".join(map(str, sf.leaders_waiting))
        summary = (
            f"brokers {leaders} wait on broker {sf.broker} as follower: their {sf.request} p99 up to "
            f"{worst:.0f} ms > {cfg.p99_threshold_ms:.0f} ms, spent in stage remote, in {len(slow)} of "
            f"{len(windows)} windows; broker {sf.broker}'s own p99 stays normal"
        )
        stage = sf.own_stage or "remote"
        if sf.own_stage:  # Rule 9's windows outnumber Rule 5's: it stalls while serving too
            own = sum(1 for x in sf.culprit_stages if x)
            meaning = (
                f"broker {sf.broker} stalls: its own {stage} p99 is far above its peers' while they wait "
                "on it in replication (remote) — a process that pauses (GC, SIGSTOP, CPU starvation)"
            )
            summary = (
                f"broker {sf.broker} stalls: in {own} of {len(windows)} windows its {sf.request} {stage} p99 "
                f"is far above its peers' while brokers {leaders} wait on it in remote (their p99 up to "
                f"{worst:.0f} ms > {cfg.p99_threshold_ms:.0f} ms); slow in {len(slow)} of {len(windows)} windows"
            )
        elif sf.disk_bound:
            # The follower they wait on is slow at its disk: the wait is its disk's (the alert
            # rules name local too).
            stage = "local"
            meaning = (
                f"broker {sf.broker} is slow at its disk: its own log appends (local) are out of line "
                "with its peers', and its peers wait on it in replication (remote) as their follower"
            )
            summary = (
                f"broker {sf.broker} is slow at its disk: its {sf.request} local p99 is out of line with its "
                f"peers' while brokers {leaders} wait on it as follower (their p99 up to {worst:.0f} ms > "
                f"{cfg.p99_threshold_ms:.0f} ms) in {len(slow)} of {len(windows)} windows"
            )
        return self.finding(
            data,
            now_ms,
            subject=f"broker:{sf.broker}",
            severity="critical" if sf.score.score >= cfg.max_score else "warning",
            summary=summary,
            evidence={
                "request": sf.request,
                "stage": stage,
                "stage_meaning": meaning,
                "culprit_stages": list(sf.culprit_stages),
                "slow_follower": sf.broker,
                "leaders_waiting": list(sf.leaders_waiting),
                "score": sf.score.score,
                "values": {
                    "leaders_p99_ms": list(sf.leader_p99_ms),
                    "own_p99_ms": [v.p99_ms for v in windows],
                    "count": [v.count for v in windows],
                },
                "baseline": {"p99_threshold_ms": cfg.p99_threshold_ms, "remote_share": cfg.remote_share},
                "windows": [v.window_start_ms for v in windows],
                "slow_windows": [v.window_start_ms for v in slow],
                "probe": probe_evidence(data, sf.broker, [v.window_start_ms for v in windows]),
            },
            action=(
                STAGE_MEANING["local"][1].format(b=sf.broker)
                + f"; leaders {leaders} recover when it keeps up"
                if stage == "local"
                else f"check broker {sf.broker} for JVM pauses (GC log, safepoints), its replica fetcher "
                f"threads and its network; leaders {leaders} recover when it keeps up"
            ),
        )

    def _broker_finding(
        self, data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, b: int, ev: dict
    ) -> Finding:
        request, top = max(ev["requests"].items(), key=lambda kv: kv[1]["score"])
        stage = top["stage"]
        meaning, action = STAGE_MEANING.get(stage or "", ("no single stage stands out", "inspect broker {b}"))
        slow = [v for v in top["windows"] if v.slow]
        p99s = [v.p99_ms for v in slow if v.p99_ms is not None]
        worst = max(p99s, default=0.0)
        severity = (
            "critical" if top["score"] >= cfg.max_score and worst >= 2 * cfg.p99_threshold_ms else "warning"
        )
        summary = (
            f"broker {b} {request} p99 {worst:.0f} ms > {cfg.p99_threshold_ms:.0f} ms and "
            f"{cfg.peer_ratio:g}× its peers in {len(slow)} of {len(top['windows'])} windows; "
            f"stage {stage}: {meaning}"
        )
        if top["follower"] is not None:
            summary += f"; slow follower: broker {top['follower']}"
        evidence = {
            "request": request,
            "stage": stage,
            "stage_meaning": meaning,
            "stage_excess_ms": {k: round(v, 3) for k, v in top["stage_excess_ms"].items()},
            "slow_follower": top["follower"],
            "leaders_waiting": sorted(set(ev["leaders_waiting"])),
            "score": top["score"],
            "values": {
                "p99_ms": [v.p99_ms for v in top["windows"]],
                "count": [v.count for v in top["windows"]],
            },
            "baseline": {
                "peers_median_p99_ms": [v.peers_median_p99_ms for v in top["windows"]],
                "p99_threshold_ms": cfg.p99_threshold_ms,
                "peer_ratio": cfg.peer_ratio,
            },
            "windows": [v.window_start_ms for v in top["windows"]],
            "slow_windows": [v.window_start_ms for v in slow],
            "scores": {r: x["score"] for r, x in ev["requests"].items()},
            "probe": probe_evidence(data, b, [v.window_start_ms for v in top["windows"]]),
        }
        return self.finding(
            data,
            now_ms,
            subject=f"broker:{b}",
            severity=severity,
            summary=summary,
            evidence=evidence,
            action=action.format(b=b, f=top["follower"]),
        )

    def _cluster_finding(
        self,
        data: Aggregates,
        now_ms: int,
        cfg: SlowBrokerConfig,
        wide: list[tuple[str, Score, list[dict]]],
        flagged: list[int],
    ) -> Finding:
        request, _score, per_window = wide[0] if wide else (cfg.requests[0], None, [])
        cluster_p99 = sorted(
            (r.window_start_ms, r.p99_ms)
            for r in data.cluster_stages
            if r.request == request and r.stage == "total"
        )
        evidence = {
            "request": request,
            "flagged_brokers": flagged,
            "values": {
                "cluster_p99_ms": [p for _, p in cluster_p99][-cfg.history_windows :],
                "per_window": per_window,
            },
            "baseline": {
                "p99_threshold_ms": cfg.p99_threshold_ms,
                "cluster_wide_fraction": cfg.cluster_wide_fraction,
            },
            "windows": [w for w, _ in cluster_p99][-cfg.history_windows :],
        }
        return self.finding(
            data,
            now_ms,
            rule=CLUSTER_RULE,
            subject=f"cluster:{data.cluster}",
            severity="critical",
            summary=f"{request} p99 above {cfg.p99_threshold_ms:.0f} ms on most brokers: a cluster-wide slowdown, "
            "not individual slow nodes",
            evidence=evidence,
            action="look for a shared cause (network, storage, a client surge, controller trouble); "
            "do not remediate single brokers",
        )
