"""Slow brokers, the stage at fault, slow clients and the cluster-wide case: one blame model.

Each window is read by :mod:`analyzer.blame` (common mode apart, each broker's time decomposed
into its own work, waiting on replication and the client's; waits passed along wait-for edges to
the broker that explains them; the probe's view of every leader as evidence of its own). This
module walks those readings over time and writes the findings:

* **Evidence accumulates.** Per broker, a score rises by the window's weight when evidence
  points at it (1; 2 when two independent families agree, e.g. its own timers and the probe,
  or its peers waiting on it and it serving few), falls by 1 in a window that shows it healthy
  (no evidence, serving in line with its peers or answering its probes as they do: a broker
  fenced during a stall leads less until the next preferred-leader election), and holds in a
  window that says nothing (it is silent, serves few with nobody waiting and no probe answered
  in line, or an all-waiting window the lookback attributes to it). It fires at
  ``fire_score``, capped at ``max_score``.
* **Hysteresis by evidence, not by score.** An active finding clears only after
  ``clear_windows`` windows in a row show the broker healthy: a fault that leaves evidence at
  least that often never clears mid-fault, and a recovered broker clears ``clear_windows``
  windows after its last evidence.
* **Severity follows the impact, and acting its persistence.** The finding is ``slow_broker``
  (remediable) once a second walk over the windows whose impact is above ``p99_threshold_ms`` —
  its own p99 at least ``peer_ratio`` × its peers', the p99 of the leaders waiting on it, or the
  probe's — fires in the episode and at least ``slow_min_windows`` of its windows had that
  impact (an all-waiting window attributed to it with its waiters above the line counts: the
  fault going on, seen less clearly); it stays so until the episode clears. Until then it is
  ``degraded_broker`` (``info``, an early warning, raised as fast as before). A stall confined
  to one window (a burst, a busy host's scheduler, one long GC) is over before an action could
  land, and demoting for it moves leadership off a healthy broker; a fault to remediate lasts.
* **The stage** is the one the episode's evidence names most: its own stage where its own work
  was out of line in more than half of its blamed windows (a request queue behind an
  out-of-line disk is the disk's: ``local``), else ``remote`` (its peers wait on it), else
  ``unseen`` where the probe's acks=1 produce to it was out of line in more than half of its
  blamed windows (its own process or path, whatever replication wait it keeps beside: its
  followers' fetches travel the same path), else ``remote`` (it waits on a follower nobody
  names), else ``unseen`` (only the probe sees it: a stall before its timers start, or its
  network).
* **The cluster.** Windows read as common mode walk a cluster score of their own; while it is
  active there is a ``cluster_slow`` finding (the findings policy stands remediation down while
  it is). While the newest window reads common or that finding is active, a broker finding is
  ``provisional``: kept if already active, not raised new (a cluster slowing broker by broker is
  not a slow broker).
* **Brokers going down and coming back.** A broker known in the lookback with no row in a window
  and nobody waiting on it is down (a clean shutdown moves its leadership away first; a crash),
  not slow. A broker whose JVM start time (read by its agent over JMX,
  :class:`~linkwatch.aggregates.BrokerStartWindow`) changes restarted, however short its downtime:
  a restart shorter than a window leaves rows in every window, and while it rejoins the ISR
  and takes its leadership back its peers wait on it. For ``restart_grace_windows`` after one
  goes down, comes back or restarts, broker findings are provisional too (its peers carry its
  load), and the returning broker's own for ``returning_grace_windows`` (it catches up:
  replicas, a cold page cache, a JVM compiling): a planned rolling restart is nothing to
  remediate. Meanwhile it serves less than its peers until its leadership comes back, so a
  window showing it serving with no evidence counts as healthy, not as a hold: the evidence of
  its restart clears instead of outliving the grace. A broker that stalls keeps its JVM, so a
  stall is never read as a restart; but one coming back from a stall (slow within
  ``clear_windows``, not blamed in the newest window) is coming back all the same: while it
  does, another broker's finding is provisional (its peers resync with it).
* **Slow clients.** A broker above the line whose largest excess is a client's stage (``send``,
  ``throttle``) walks a score of its own per request type; the finding names the client from
  the slow-request exemplars and is never a broker's.

What it cannot see: a broker that serves nothing and is waited on by nobody (leadership moved
away, a quiet cluster) says nothing, and a fault that leaves evidence less often than every
``clear_windows`` windows reads as separate episodes.
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import Field

from analyzer.base import BarChart, Chart, Detector, DetectorConfig, DetectorGauge, GaugeValues, LineChart
from analyzer.blame import FEW, OWN, PROBE, UNSEEN, WAITED_ON, WAITS, Reading, Rows, Signal, read_windows
from analyzer.probe_evidence import ProbeThresholds, probe_evidence
from linkwatch.aggregates import Aggregates, ClientWindow
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, Finding

RULE = "slow_broker"
CLUSTER_RULE = "cluster_slow"
CLIENT_RULE = "slow_client"
DEGRADED_RULE = "degraded_broker"
PROVISIONAL = "provisional"  # evidence key: see the cluster bullet above and analyzer.engine

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
    UNSEEN: (
        "clients wait on it before it reads their requests (its own timers start only then): a "
        "stalled process (GC, safepoints, a paused JVM) or a slow network path to it",
        "check broker {b} for JVM pauses (GC log, safepoints), CPU steal and the network path to it",
    ),
}


class SlowBrokerConfig(DetectorConfig):
    requests: list[str] = Field(default_factory=lambda: [PRODUCE, FETCH_CONSUMER])
    p99_threshold_ms: float = Field(300.0, gt=0)  # the line: above it a window is slow
    peer_ratio: float = Field(2.0, ge=1.0)  # own timers: total p99 ≥ this × the peers' median
    min_requests: int = Field(20, ge=1)  # logged requests in a window for its p99 to count
    history_windows: int = Field(12, ge=1)  # windows a finding's evidence shows
    fire_score: int = Field(2, ge=1)
    # Windows of the episode with impact above the line before it is slow_broker (remediable).
    slow_min_windows: int = Field(2, ge=1)
    max_score: int = Field(5, ge=1)
    clear_windows: int = Field(3, ge=1)  # healthy windows in a row that clear a finding
    cluster_wide_fraction: float = Field(0.5, gt=0, le=1)  # more than this of the brokers: common
    stages: list[str] = Field(
        default_factory=lambda: ["requestQueue", "local", "remote", "responseQueue", "send", "throttle"]
    )
    own_stages: list[str] = Field(default_factory=lambda: ["requestQueue", "local", "responseQueue"])
    client_stages: list[str] = Field(default_factory=lambda: ["send", "throttle"])
    # Stages that wait by design per request type (a fetch's long poll in purgatory): never slowness.
    wait_stages: dict[str, list[str]] = Field(
        default_factory=lambda: {FETCH_CONSUMER: ["remote"], FETCH_FOLLOWER: ["remote"]}
    )
    # A broker whose wait by design carries this share of its p99 is not above the line.
    remote_share: float = Field(0.5, gt=0, le=1)
    # A stage is out of line: p99 ≥ degraded_ratio × the peers' median and degraded_excess_ms above.
    degraded_ratio: float = Field(5.0, ge=1.0)
    degraded_excess_ms: float = Field(10.0, ge=0)
    # Below the line, a stage out of line with its peers' is evidence only when it also left the
    # broker's own usual level: p99 ≥ own_change_ratio × its median in the earlier windows it was
    # in line (at least usual_min_windows of them) and degraded_excess_ms above it. A broker that
    # leads the heavy partitions is always above its peers; that is no early warning. A level is
    # usual once it held for half the baseline lookback: a departure present from the lookback's
    # first window is judged by the peers alone until then.
    own_change_ratio: float = Field(2.0, ge=1.0)
    usual_min_windows: int = Field(9, ge=1)
    # A request-queue excess is the disk's when local is out of line by at least this much.
    queue_behind_local_ms: float = Field(5.0, ge=0)
    # A leader whose acks=all requests wait this long waits on a follower: replication within a
    # cluster completes in tens of ms unless a follower fetches late.
    wait_floor_ms: float = Field(150.0, gt=0)
    # The follower told apart: every other broker's wait at least this × its own.
    follower_remote_ratio: float = Field(3.0, ge=1.0)
    # Serves few: logged requests / own baseline ≤ this × the peers' median of the same ratio.
    stopped_ratio: float = Field(0.65, gt=0, lt=1)
    # Below this × the peers' median, a window does not show the broker healthy.
    healthy_throughput_ratio: float = Field(0.85, gt=0, lt=1)
    stopped_baseline_windows: int = Field(3, ge=1)
    baseline_windows: int = Field(18, ge=1)  # the lookback: baselines and attribution
    # An all-waiting window is the broker the lookback names (alone) in this many windows.
    attribute_min_windows: int = Field(2, ge=1)
    hold_while_cluster_wide: bool = True
    # After a broker went down (absent, nobody waiting on it: a clean shutdown, a crash) or came
    # back, this many windows in which no broker finding is raised new: its peers carry its load,
    # and a returning broker catches up as a follower.
    restart_grace_windows: int = Field(9, ge=0)
    # A broker that was down catches up for longer (replicas fetched back, a cold page cache, a
    # JVM compiling): its own findings stay provisional this many windows after it came back.
    returning_grace_windows: int = Field(18, ge=0)
    # The probe: decided probes per leader in a window to judge it; its p99 ≥ probe_ratio × the
    # peers' median and ≥ probe_floor_ms, or availability probe_availability_gap below theirs.
    probe_min_probes: int = Field(10, ge=1)
    probe_ratio: float = Field(3.0, ge=1.0)
    probe_floor_ms: float = Field(100.0, ge=0)
    probe_availability_gap: float = Field(0.05, ge=0, le=1)


# --- the walk -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """A subject's state after one window."""

    window_start_ms: int
    state: str  # blamed / healthy / hold
    score: int
    active: bool
    slow: bool  # the episode reached slow_broker
    episode_start: int | None  # index of the window the episode fired in


def walk(
    states: Iterable[tuple[str, int, int]],
    windows: Sequence[int],
    cfg: SlowBrokerConfig,
    persists: Sequence[bool] = (),
) -> list[Step]:
    """The score walk over ``(state, weight, slow weight)`` per window (the module's docstring).
    ``persists``: per window, whether it continues the subject's fault above the line without
    evidence of its own (an all-waiting window step 3 attributes to it, whose waiting leaders
    are above the line); it counts toward ``slow_min_windows`` and leaves the score alone."""
    score = slow_score = streak = slow_windows = 0
    active = slow = False
    start: int | None = None
    out = []
    for i, ((state, weight, slow_weight), w) in enumerate(zip(states, windows, strict=True)):
        if state == "blamed":
            score = min(cfg.max_score, score + weight)
            slow_score = min(cfg.max_score, slow_score + slow_weight)
            slow_windows += slow_weight > 0
            streak = 0
        elif state == "healthy":
            score, slow_score, streak = max(0, score - 1), max(0, slow_score - 1), streak + 1
        if i < len(persists) and persists[i] and state != "blamed":
            slow_windows += 1
        if not active and score == 0:
            slow_windows = 0  # the evidence decayed: a later stall starts its own count
        if not active and score >= cfg.fire_score:
            active, start = True, i
        if active and slow_score >= cfg.fire_score and slow_windows >= cfg.slow_min_windows:
            slow = True
        if active and streak >= cfg.clear_windows:
            active, slow, start, score, slow_score, slow_windows = False, False, None, 0, 0, 0
        out.append(Step(w, state, score, active, slow and active, start))
    return out


def walk_score(flags: Iterable[bool | None], cfg: SlowBrokerConfig) -> tuple[int, bool]:
    """The walk over plain flags (True: evidence of weight 1, False: healthy, None: hold)."""
    flags = list(flags)
    states = [
        ("blamed", 1, True) if f else ("healthy", 0, False) if f is False else ("hold", 0, False)
        for f in flags
    ]
    steps = walk(states, list(range(len(flags))), cfg)
    return (steps[-1].score, steps[-1].active) if steps else (0, False)


@dataclass(frozen=True)
class Model:
    """One evaluation: the readings of the lookback and every subject's walk over them."""

    rows: Rows
    readings: list[Reading]
    brokers: dict[int, list[Step]]
    cluster: list[Step]
    # Per reading: a broker went down, came back or restarted within restart_grace_windows.
    changing: list[bool]
    restarted: list[frozenset[int]]  # per reading: the brokers whose JVM started in its window

    @property
    def windows(self) -> list[int]:
        return [r.window_start_ms for r in self.readings]


def evaluate(data: Aggregates, now_ms: int, cfg: SlowBrokerConfig) -> Model:
    rows = Rows(data.broker_stages, data.probes)
    windows = rows.windows(now_ms, data.window_s, cfg.requests)[
        -(cfg.baseline_windows + cfg.history_windows) :
    ]
    readings = read_windows(rows, windows, cfg)
    brokers = sorted(
        {b for r in readings for b in (*r.signals, *r.healthy)} | {b for r in readings for b, _ in r.p99_ms}
    )
    restarted = restarts(data, windows)
    # Per window: the brokers down or restarted within returning_grace_windows (back, catching up).
    back = [set(r.absent) | set(restarted[i]) for i, r in enumerate(readings)]
    returning = [
        set().union(*back[max(0, i - cfg.returning_grace_windows) : i + 1]) for i in range(len(readings))
    ]

    serving = [{b for b, _ in r.p99_ms} for r in readings]

    def state(i: int, r: Reading, b: int) -> str:
        # A broker back from a restart serves less than its peers until its leadership returns
        # (a preferred-leader election, minutes later): serving with no evidence against it (a
        # hold is never blamed), it is healthy, not held, or the evidence of its restart would
        # keep its finding for ever.
        s = r.state(b)
        if s == "hold" and b in returning[i] and b in serving[i] and not r.common:
            return "healthy"
        return s

    # Per reading, the brokers an all-waiting window is attributed to (step 3: their fault seen
    # less clearly) with its waiting leaders above the line: their fault goes on, at the impact
    # that makes it slow. Once per reading, not per broker.
    persisting = [
        {
            t
            for q, t in r.attributed.items()
            if any(r.p99_ms.get((x, q), 0.0) > cfg.p99_threshold_ms for x in r.explained.get(q, ()))
        }
        for r in readings
    ]
    walks = {
        b: walk(
            [(state(i, r, b), r.weight(b), r.slow_weight(b)) for i, r in enumerate(readings)],
            windows,
            cfg,
            [b in p for p in persisting],
        )
        for b in brokers
    }
    cluster_states = [
        ("blamed", 1, 1) if r.common else ("healthy", 0, 0) if r.reporting else ("hold", 0, 0)
        for r in readings
    ]
    transitions = [
        (i > 0 and r.absent != readings[i - 1].absent) or bool(restarted[i]) for i, r in enumerate(readings)
    ]
    changing = [
        any(transitions[max(0, i - cfg.restart_grace_windows + 1) : i + 1]) for i in range(len(readings))
    ]
    return Model(rows, readings, walks, walk(cluster_states, windows, cfg), changing, restarted)


def _recovering(model: Model, cfg: SlowBrokerConfig) -> set[int]:
    """Brokers coming back from a stall: slow (remediable, so it lasted) within the last
    ``clear_windows`` windows and not blamed in the newest. A stalled broker resuming is a
    broker coming back, as after a restart: its fetch sessions and its ISR membership are
    re-established and its peers serve its catch-up reads, so for a moment leaders wait on a
    follower that is not at fault (a whole-suite run named broker 1, beside a broker 2 paused
    90 % of the time, in the windows right after the pauses ended)."""
    out = set()
    for b, steps in model.brokers.items():
        tail = steps[-cfg.clear_windows - 1 :]
        if tail and tail[-1].state != "blamed" and any(s.slow for s in tail):
            out.add(b)
    return out


def restarts(data: Aggregates, windows: Sequence[int]) -> list[frozenset[int]]:
    """Per window of ``windows`` (window starts, oldest first): the brokers that restarted in it.
    A restart is a JVM start time read in the lookback that is newer than another read for the
    same broker (the JVM before it): a cluster's first start, or an analyzer started beside
    running brokers, is none. A start is placed in the window it falls in (it is often read a
    window late: the JMX endpoint comes up after the JVM); one after the newest window's end in
    the newest window."""
    if not windows:
        return []
    out: list[set[int]] = [set() for _ in windows]
    starts: dict[int, set[int]] = defaultdict(set)
    for s in data.broker_starts:
        starts[s.broker].add(s.started_ms)
    for broker, times in starts.items():
        for t in sorted(times)[1:]:
            if t >= windows[0]:
                out[bisect.bisect_right(windows, t) - 1].add(broker)
    return [frozenset(b) for b in out]


def broker_scores(
    data: Aggregates, now_ms: int, cfg: SlowBrokerConfig, model: Model | None = None
) -> dict[tuple[int, str], int]:
    """The score of every (broker, request type) seen, walking only that request's evidence
    (and the probe's): the ``linkwatch_slow_broker_score`` gauge. ``model``: ``evaluate(data,
    now_ms, cfg)`` when the caller has it."""
    model = model if model is not None else evaluate(data, now_ms, cfg)
    out = {}
    for request in cfg.requests:
        for b in model.brokers:
            if not any((b, request) in r.p99_ms for r in model.readings):
                continue
            states = []
            for r in model.readings:
                sigs = [s for s in r.blamed().get(b, []) if s.request in (request, None)]
                fams = {s.family for s in sigs}
                state = "blamed" if sigs else r.state(b) if r.state(b) != "blamed" else "hold"
                slow = {s.family for s in sigs if s.slow and s.family != FEW}
                states.append((state, min(len(fams), 2), min(len(slow), 2)))
            steps = walk(states, model.windows, cfg)
            out[(b, request)] = steps[-1].score if steps else 0
    return out


def explain(data: Aggregates, now_ms: int, cfg: SlowBrokerConfig) -> list[str]:
    """One line per window of the lookback as the model reads it: what a person reads when a
    finding surprises them (the tests print it on failure)."""
    model = evaluate(data, now_ms, cfg)
    lines = []
    for r in model.readings:
        p99 = {f"{b}/{q}": round(v) for (b, q), v in sorted(r.p99_ms.items())}
        blamed = {b: sorted({f"{s.family}:{s.stage}" for s in ss}) for b, ss in sorted(r.blamed().items())}
        lines.append(
            f"{r.window_start_ms}: p99 {p99} common={r.common} targets={r.targets} "
            f"unexplained={r.unexplained} attributed={r.attributed} blamed={blamed} healthy={sorted(r.healthy)}"
        )
    return lines


# --- the findings ---------------------------------------------------------------------------


def _episode(model: Model, steps: list[Step]) -> list[tuple[Reading, Step]]:
    last = steps[-1]
    start = last.episode_start or 0
    return list(zip(model.readings[start:], steps[start:], strict=True))


def finding_stage(episode: Sequence[tuple[Reading, list[Signal]]]) -> tuple[str, dict[str, float]]:
    """The stage the episode's evidence names (module docstring), and its own stages' summed
    excess over the peers (for the chart)."""
    blamed = [sigs for _, sigs in episode if sigs]

    def names_own(s: Signal, sigs: list[Signal]) -> bool:
        # A broker that itself waits on followers nobody explains: its time is the wait, and an
        # own stage a little out of line beside it (below its own slowness) does not name it.
        return s.family == OWN and (s.slow or not any(x.family == WAITS for x in sigs))

    own = [s for sigs in blamed for s in sigs if names_own(s, sigs)]
    excess: dict[str, float] = defaultdict(float)
    for s in own:
        excess[s.stage] += max(s.excess_ms.get(s.stage, 0.0), 0.0)
    windows_own = sum(1 for sigs in blamed if any(names_own(s, sigs) for s in sigs))
    if own and 2 * windows_own > len(blamed):
        votes = Counter(s.stage for s in own)
        order = {s: -i for i, s in enumerate(("requestQueue", "local", "responseQueue"))}
        top = max(votes, key=lambda s: (votes[s], round(excess[s], 3), order.get(s, -9)))
        return top, dict(excess)
    families = {s.family for sigs in blamed for s in sigs}
    if WAITED_ON in families:
        return "remote", dict(excess)
    # The probe's acks=1 produce holds no replication: out of line, only the leader's own process
    # or path moves it. A replication wait the leader keeps beside it, with no follower to
    # explain it, is the same path seen by its followers' fetches (their responses travel it).
    alone = sum(1 for sigs in blamed if any(s.family == PROBE and s.leader_alone for s in sigs))
    if WAITS in families and 2 * alone <= len(blamed):
        return "remote", dict(excess)
    if PROBE in families:
        return UNSEEN, dict(excess)
    return (own[0].stage if own else "remote"), dict(excess)


class SlowBrokerDetector(Detector[SlowBrokerConfig]):
    name = "slow_broker"
    rule = RULE
    Config = SlowBrokerConfig
    gauges = (
        DetectorGauge(
            "linkwatch_slow_broker_score",
            "evidence score of the blame model per broker and request type",
            ("cluster", "broker", "request"),
        ),
    )

    def __init__(self, config: SlowBrokerConfig | None = None) -> None:
        super().__init__(config)
        # The last evaluation's model: the engine calls detect, then measure, on the same data
        # and time, and the model is most of either's cost (~95 % of an evaluation at 200
        # brokers); one entry, replaced by the next evaluation.
        self._last: tuple[Aggregates, int, Model] | None = None

    def model(self, data: Aggregates, now_ms: int) -> Model:
        """``evaluate(data, now_ms, self.config)``, once per ``data`` object and time."""
        last = self._last
        if last is not None and last[0] is data and last[1] == now_ms:
            return last[2]
        model = evaluate(data, now_ms, self.config)
        self._last = (data, now_ms, model)
        return model

    def measure(self, data: Aggregates, now_ms: int) -> GaugeValues:
        scores = broker_scores(data, now_ms, self.config, self.model(data, now_ms))
        return {
            "linkwatch_slow_broker_score": {
                (data.cluster, str(b), request): s for (b, request), s in scores.items()
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
            out.append(
                LineChart(f"{request}: p99 total time per broker", "ms", dict(series), cfg.p99_threshold_ms)
            )
        for f in findings:
            excess = f.evidence.get("stage_excess_ms")
            if f.rule == RULE and excess:
                out.append(BarChart(f"{f.subject}: stage p99 above peers' median", "ms", excess))
        return out

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        cfg = self.config
        model = self.model(data, now_ms)
        if not model.readings:
            return []
        found = [self._cluster_finding(data, now_ms, model)] if model.cluster[-1].active else []
        hold = ""
        if cfg.hold_while_cluster_wide and model.readings[-1].common:
            hold = "the latest window reads common mode (the cluster's): not raised new"
        elif cfg.hold_while_cluster_wide and model.cluster[-1].active:
            # The cluster finding has its own hysteresis: while it holds, a window naming one
            # broker is read inside a cluster-wide slowdown (one broker served a little less that
            # window), not as a slow broker of its own.
            hold = "the cluster-wide finding is active (a slowdown of the cluster's): not raised new"
        elif model.changing[-1]:
            hold = (
                "a broker went down, came back or restarted within restart_grace_windows (a restart, "
                "the others carrying its load, a returning broker catching up): not raised new"
            )
        recent = slice(-cfg.returning_grace_windows - 1, None)
        returning = {b for r in model.readings[recent] for b in r.absent} | {
            b for bs in model.restarted[recent] for b in bs
        }
        recovering = _recovering(model, cfg)

        def provisional(b: int) -> str:
            """Why broker ``b``'s finding is not raised new ("" if it is)."""
            if hold:
                return hold
            if others := sorted(recovering - {b}):
                return (
                    f"broker {others[0]} is coming back from a stall (slow within clear_windows, "
                    "not blamed now): its peers resync with it, not raised new"
                )
            if b in returning:
                return (
                    f"broker {b} was down or restarted within returning_grace_windows: it is catching "
                    "up, not raised new"
                )
            return ""

        for b, steps in sorted(model.brokers.items()):
            if steps and steps[-1].active:
                f = self._broker_finding(data, now_ms, model, b, steps)
                why = provisional(b)
                if why:
                    f = dataclasses.replace(f, evidence={**f.evidence, PROVISIONAL: why})
                found.append(f)
        return found + self._client_findings(data, now_ms, model)

    # -- brokers --------------------------------------------------------------------------

    def _broker_finding(
        self, data: Aggregates, now_ms: int, model: Model, b: int, steps: list[Step]
    ) -> Finding:
        cfg = self.config
        episode = [(r, r.blamed().get(b, [])) for r, _ in _episode(model, steps)]
        stage, excess = finding_stage(episode)
        sigs = [s for _, ss in episode for s in ss]
        request = Counter(s.request for s in sigs if s.request).most_common(1)
        request_name = request[0][0] if request else cfg.requests[0]
        families = sorted({s.family for s in sigs})
        leaders = sorted({x for s in sigs if s.family == WAITED_ON for x in s.waiting})
        waited_on = any(s.family == WAITED_ON for s in sigs)
        unknown_wait = not waited_on and any(s.family == WAITS for s in sigs)
        last = steps[-1]
        history = model.readings[-cfg.history_windows :]
        blamed_windows = [r.window_start_ms for r in history if r.blamed().get(b)]
        worst = max((s.impact_ms for s in sigs if s.family not in (FEW,)), default=0.0)
        slow = last.slow
        meaning, action = STAGE_MEANING.get(stage, ("", "inspect broker {b}"))
        follower = b if (waited_on and stage in ("remote", "local")) else None

        def waited(r: Reading, attr: str) -> float | None:
            hit = [s for s in r.blamed().get(b, []) if s.family == WAITED_ON and s.request == request_name]
            return getattr(hit[0], attr) if hit else None

        stage_rows = [model.rows.usable(request_name, stage, r.window_start_ms, 1) for r in history]
        evidence = {
            "request": request_name,
            "stage": stage,
            "stage_meaning": meaning,
            "stage_excess_ms": {k: round(v, 3) for k, v in excess.items()},
            "slow_follower": follower,
            "leaders_waiting": leaders,
            "served_few": FEW in families,
            "score": last.score,
            "confidence": _confidence(episode, families),
            "families": families,
            "signals": [
                {"window_start_ms": r.window_start_ms, "signals": [s.to_json() for s in ss]}
                for r, ss in episode
                if ss
            ][-cfg.history_windows :],
            "values": {
                "p99_ms": [r.p99_ms.get((b, request_name)) for r in history],
                "count": [r.count.get((b, request_name), 0) for r in history],
                "stage_p99_ms": [x[b].p99_ms if b in x else None for x in stage_rows],
                "peers_remote_p99_ms": [waited(r, "value_ms") for r in history],
            },
            "baseline": {
                "peers_median_p99_ms": [_peers_median(r, b, request_name) for r in history],
                "peers_median_stage_p99_ms": [
                    _median_of(v.p99_ms for p, v in x.items() if p != b) for x in stage_rows
                ],
                "own_remote_p99_ms": [waited(r, "baseline_ms") for r in history],
                "p99_threshold_ms": cfg.p99_threshold_ms,
                "peer_ratio": cfg.peer_ratio,
            },
            "windows": [r.window_start_ms for r in history],
            "slow_windows": blamed_windows,
            # The probe's verdict over the episode by the model's own probe thresholds (step 4),
            # so the evidence never reads "corroborates" by a laxer line than the model's.
            "probe": probe_evidence(data, b, [r.window_start_ms for r in history], probe_thresholds(cfg)),
        }
        how = self._how(b, stage, families, leaders, unknown_wait)
        if not slow:
            return self.finding(
                data,
                now_ms,
                rule=DEGRADED_RULE,
                subject=f"broker:{b}",
                severity="info",
                summary=f"broker {b} is degraded: {how}; worst {worst:.0f} ms, under {cfg.p99_threshold_ms:.0f} ms "
                f"(blamed in {len(blamed_windows)} windows)",
                evidence=evidence,
                action="early warning below the slow-broker threshold: "
                + self._action(b, stage, action, follower, unknown_wait),
            )
        severity = (
            "critical" if last.score >= cfg.max_score and worst >= 2 * cfg.p99_threshold_ms else "warning"
        )
        return self.finding(
            data,
            now_ms,
            subject=f"broker:{b}",
            severity=severity,
            summary=f"broker {b} is slow: {how}; up to {worst:.0f} ms > {cfg.p99_threshold_ms:.0f} ms "
            f"(blamed in {len(blamed_windows)} windows; stage {stage}: {meaning})",
            evidence=evidence,
            action=self._action(b, stage, action, follower, unknown_wait),
        )

    @staticmethod
    def _how(b: int, stage: str, families: list[str], leaders: list[int], unknown_wait: bool) -> str:
        parts = []
        if OWN in families:
            parts.append(f"its own {stage} is out of line with its peers'")
        if WAITED_ON in families:
            parts.append(f"brokers {', '.join(map(str, leaders))} wait on it as their follower (remote)")
        if PROBE in families:
            parts.append("the probe's produce/end-to-end latency to it is out of line with its peers'")
        if FEW in families:
            parts.append("it serves far fewer requests than its baseline")
        if unknown_wait:
            parts.append("it waits on replication (remote) and no one follower explains the wait")
        return "; ".join(parts) or f"broker {b}"

    @staticmethod
    def _action(b: int, stage: str, action: str, follower: int | None, unknown_wait: bool) -> str:
        if unknown_wait:
            return f"check the followers of the partitions broker {b} leads (disks, network, GC pauses)"
        if follower is not None and stage == "remote":
            return (
                f"check broker {b} for JVM pauses (GC log, safepoints), its replica fetcher threads and "
                "its network; its leaders recover when it keeps up"
            )
        return action.format(b=b, f=follower if follower is not None else "(unknown)")

    # -- the cluster ----------------------------------------------------------------------

    def _cluster_finding(self, data: Aggregates, now_ms: int, model: Model) -> Finding:
        cfg = self.config
        history = model.readings[-cfg.history_windows :]
        request = next((q for q in cfg.requests if any(q in r.reporting for r in history)), cfg.requests[0])
        cluster_p99 = {
            r.window_start_ms: r.p99_ms
            for r in data.cluster_stages
            if r.request == request and r.stage == "total"
        }
        flagged = sorted(
            {b for r in history if r.common for b in r.signals}
            | {b for r in history if r.common for q in r.above for b in r.above[q]}
        )
        evidence = {
            "request": request,
            "flagged_brokers": flagged,
            "values": {
                "cluster_p99_ms": [cluster_p99.get(r.window_start_ms) for r in history],
                "per_window": [
                    {
                        "window_start_ms": r.window_start_ms,
                        "cluster_wide": r.common,
                        "brokers_above": sorted(r.above.get(request, set())),
                        "brokers_reporting": r.reporting.get(request, 0),
                        "brokers_waiting_remote": list(r.unexplained.get(request, ())),
                    }
                    for r in history
                ],
            },
            "baseline": {
                "p99_threshold_ms": cfg.p99_threshold_ms,
                "cluster_wide_fraction": cfg.cluster_wide_fraction,
            },
            "windows": [r.window_start_ms for r in history],
            "score": model.cluster[-1].score,
        }
        return self.finding(
            data,
            now_ms,
            rule=CLUSTER_RULE,
            subject=f"cluster:{data.cluster}",
            severity="critical",
            summary=f"{request} p99 above {cfg.p99_threshold_ms:.0f} ms on most brokers, or most brokers out of "
            "line at once: a cluster-wide slowdown, not individual slow nodes",
            evidence=evidence,
            action="look for a shared cause (network, storage, a client surge, controller trouble); "
            "do not remediate single brokers",
        )

    # -- clients --------------------------------------------------------------------------

    def _client_findings(self, data: Aggregates, now_ms: int, model: Model) -> list[Finding]:
        cfg = self.config
        keys = sorted({(c.broker, c.request) for r in model.readings for c in r.clients})
        out = []
        for b, request in keys:
            states = []
            for r in model.readings:
                hit = [c for c in r.clients if c.broker == b and c.request == request]
                reporting = (b, request) in r.p99_ms
                states.append(
                    ("blamed", 1, True) if hit else ("healthy", 0, False) if reporting else ("hold", 0, False)
                )
            steps = walk(states, model.windows, cfg)
            if steps and steps[-1].active:
                out.append(self._client_finding(data, now_ms, model, b, request, steps))
        return out

    def _client_finding(
        self, data: Aggregates, now_ms: int, model: Model, b: int, request: str, steps: list[Step]
    ) -> Finding:
        cfg = self.config
        history = model.readings[-cfg.history_windows :]
        hits = [c for r in history for c in r.clients if c.broker == b and c.request == request]
        stage = Counter(c.stage for c in hits).most_common(1)[0][0]
        windows = [
            r.window_start_ms
            for r in history
            if any(c.broker == b and c.request == request for c in r.clients)
        ]
        ranked = rank_clients(data.client_windows, b, request, stage, windows)
        top = ranked[0]["client_id"] if ranked else None
        who = f"client {top}" if top else "an unknown client (no slow-request exemplar names one)"
        meaning = STAGE_MEANING[stage][0] if stage in STAGE_MEANING else stage
        worst = max(c.p99_ms for c in hits)
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
        excess: dict[str, float] = defaultdict(float)
        for c in hits:
            for s, x in c.excess_ms.items():
                excess[s] = max(excess[s], x)
        return self.finding(
            data,
            now_ms,
            rule=CLIENT_RULE,
            subject=f"client:{top}" if top else f"client:unknown@broker:{b}",
            severity="warning",
            summary=(
                f"{who} is slow, not broker {b}: {request} p99 {worst:.0f} ms on broker {b} in {len(windows)} "
                f"windows, the excess in stage {stage} ({meaning})"
            ),
            evidence={
                "request": request,
                "stage": stage,
                "stage_meaning": meaning,
                "broker": b,
                "client_id": top,
                "clients": ranked,
                "stage_excess_ms": {k: round(v, 3) for k, v in excess.items()},
                "score": steps[-1].score,
                "values": {
                    "p99_ms": [r.p99_ms.get((b, request)) for r in history],
                    "count": [r.count.get((b, request), 0) for r in history],
                },
                "baseline": {
                    "peers_median_p99_ms": [_peers_median(r, b, request) for r in history],
                    "p99_threshold_ms": cfg.p99_threshold_ms,
                    "peer_ratio": cfg.peer_ratio,
                },
                "windows": [r.window_start_ms for r in history],
                "slow_windows": windows,
            },
            action=action + f"; broker {b} is not at fault: do not move its leadership",
        )


def probe_thresholds(cfg: SlowBrokerConfig) -> ProbeThresholds:
    """The probe evidence's thresholds: the model's own (step 4's ratio, floor and gap)."""
    return ProbeThresholds(
        peer_ratio=cfg.probe_ratio,
        min_latency_ms=cfg.probe_floor_ms,
        availability_gap=cfg.probe_availability_gap,
    )


def _confidence(episode: Sequence[tuple[Reading, list[Signal]]], families: list[str]) -> float:
    """Share of the episode's windows that blamed the broker, discounted when one family of
    evidence stands alone (0.7) — a figure to read, not a threshold anything acts on."""
    if not episode:
        return 0.0
    share = sum(1 for _, s in episode if s) / len(episode)
    independent = len([f for f in families if f != FEW]) >= 2 or (FEW in families and len(families) >= 2)
    return round(share * (1.0 if independent else 0.7), 3)


def _median_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _peers_median(r: Reading, b: int, request: str) -> float | None:
    peers = [p for (x, q), p in r.p99_ms.items() if q == request and x != b]
    return statistics.median(peers) if peers else None


def rank_clients(
    rows: Iterable[ClientWindow], broker: int, request: str, stage: str, windows: Iterable[int]
) -> list[dict]:
    """The clients the exemplars name in ``windows`` on ``broker``, slowest in ``stage`` first:
    ``{"client_id", "exemplars", "stage_ms_max"}``. Exemplars without a client id or without
    time in ``stage`` name nobody."""
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
