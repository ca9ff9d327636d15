"""One window read by the blame model: who is slow, who only waits on whom, and what is common.

The model (the detector in :mod:`analyzer.slow_broker` walks its readings over time):

1. **Peers, its own usual level and the line.** In a window, for a request type, every broker
   with at least ``min_requests`` logged requests is *usable*. A stage of a broker is *out of
   line* when its p99 is at least ``degraded_ratio`` × its peers' median p99 of that stage and
   ``degraded_excess_ms`` above it, and it left the broker's own *usual level* (:class:`Usual`:
   at least ``own_change_ratio`` × its median in the earlier windows of the lookback it was not
   out of line, once there are ``usual_min_windows`` of them, and ``degraded_excess_ms`` above
   it). Comparing with peers removes what every broker shares (a burst, the machine): a
   common-mode slowdown moves the peers' median too. Comparing with itself removes what is the
   broker's by its layout (it leads the heavy partitions, its followers are far): in a fleet
   some brokers always sit above their peers. The same holds for a leader's acks=all wait
   (step 3) when nobody explains it. Above the line nothing is excused: a level that costs the
   clients is slow however usual.
2. **Decompose each broker's time.** Its *own work* is ``own_stages`` (request queue, local,
   response queue); ``remote`` is its *wait on replication* (an acks=all produce waits for the
   followers), read as the p99 of the requests that waited at all; ``send`` and ``throttle`` are
   the *client's* (a client that reads late, a quota). Stages that wait by design for the request
   type (``wait_stages``: a consumer fetch's long poll) are nobody's fault. A stage served by
   threads every request type shares (:data:`SHARED_STAGES`: the response queue, the network
   threads) is out of line only when it is in every request type that reports it.
3. **Blame flows along wait-for edges.** A leader whose acks=all requests wait at least
   ``wait_floor_ms`` (or whose ``remote`` is out of line) waits on a follower. The wait is passed
   to the one broker that explains it: the candidate (a broker not itself waiting) with the most
   evidence of being stalled — it is *told apart* (every other broker's wait is at least
   ``follower_remote_ratio`` × and ``degraded_excess_ms`` above its own: it leads partitions whose
   followers are healthy), it *serves few* (its logged requests against its own baseline at most
   ``stopped_ratio`` × its peers'; a stopped JVM serves little) or is *absent* (logs nothing), its
   own work is out of line, or the probe finds it slow. No single such broker: the wait stays the
   leader's (follower unknown); but an all-waiting window within an episode naming one broker
   as the one waited on (windows no more than ``clear_windows`` apart, one broker named, at
   least once by this step, in ``attribute_min_windows`` windows, and not outnumbered by the
   all-waiting windows around them) is that broker's (a paused leader's own acks=all requests
   wait out its pauses too) and moves nobody's score.
4. **Clients wait on leaders: the probe.** Kafka starts a request's clock when the broker reads
   it, so a stalled process or a slow path to it is invisible in its own timers. The probe's
   produce / end-to-end p99 per leader (at least ``probe_min_probes`` decided in the window) at
   least ``probe_ratio`` × its peers' median and above ``probe_floor_ms`` — its p90 out of line
   too: several probes, not its slowest one or two — or an availability
   ``probe_availability_gap`` below its peers', blames the leader (stage ``unseen`` when its own
   timers show nothing). A record is read back once replicated, so in step 3 the probe is
   evidence of a *waiting* leader's own stall only when its produce p99 alone is out of line.
5. **Common mode.** When the brokers that are blamed (by the probe too), wait on nobody known,
   are above the line with nothing explaining it, or *stall for their clients against their own
   usual level* are more than ``cluster_wide_fraction`` of the reporting brokers, the window is
   the cluster's: no broker is blamed in it. The last is the probe's acks=1 produce p90 (no
   replication in it; several probes) at least ``probe_ratio`` × the leader's usual level and
   above ``probe_floor_ms``: every leader stalling at once stands out from no peer, and a leader
   waiting on a stalled follower keeps its acks=1 produce fast, so only its own stall moves it.
6. **Down is not slow.** A broker known in the lookback with no row in the window and nobody
   waiting on it is ``absent``: shut down (its leadership moved away first) or crashed.

Each blamed broker carries :class:`Signal` records of the *families* of evidence that point at
it (own timers, peers waiting on it, the probe; serving few only adds to another). Two families
agreeing in one window are independent evidence and weigh double in the walk. A signal's
``impact_ms`` is the latency it causes (its own p99, the waiting leaders' p99, the probe's): above
``p99_threshold_ms`` the window is *slow* (remediable), else *degraded* (an early warning).

Everything here is a pure function of rows and thresholds.
"""

from __future__ import annotations

import heapq
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from linkwatch.aggregates import ProbeBrokerWindow, StageWindow

if TYPE_CHECKING:
    from analyzer.slow_broker import SlowBrokerConfig

# Families of evidence (Signal.family).
OWN = "own work"
WAITED_ON = "peers wait on it"
PROBE = "probe"
FEW = "serves few"
WAITS = "waits on an unknown follower"  # the leader keeps a wait nobody explains
FAMILIES = (OWN, WAITED_ON, PROBE, FEW, WAITS)

UNSEEN = "unseen"  # the stage of a slowness only the probe sees (before the broker reads a request)
# Stages served by threads every request type shares: a broker's network processors pick up the
# responses of produce and fetch alike. Below the line, such a stage is the broker's own work only
# when it is out of line in every request type that reports it in the window: a response queue
# delayed in one type alone is that type's completion pattern (parked consumer fetches released
# together by a produce burst) or one busy connection's processor, not the broker's threads.
SHARED_STAGES = ("responseQueue",)


@dataclass(frozen=True)
class Signal:
    """One piece of evidence against one broker in one window."""

    family: str
    request: str | None  # None: the probe's (every request type)
    stage: str
    value_ms: float | None  # what was seen
    baseline_ms: float | None  # what it was compared with
    impact_ms: float  # the latency it causes (its own p99, the waiting leaders', the probe's)
    slow: bool  # the impact is above the line: the window is slow, not only degraded
    waiting: tuple[int, ...] = ()  # WAITED_ON: the leaders waiting on it
    # PROBE: its produce p99 alone is out of line too (acks=1: the leader's own work, no
    # replication in it). A record is read back once replicated, so a leader waiting on a
    # follower is slow end to end by that wait alone; only this says the leader itself stalls.
    leader_alone: bool = True
    excess_ms: dict[str, float] = field(default_factory=dict)  # OWN: each stage over its peers'
    # OWN below the line: its clients queue where no timer runs (:func:`queued_clients`): the
    # connections it served back to back, and its peers' median of them.
    saturated: tuple[int, float] | None = None

    def to_json(self) -> dict:
        out: dict = {
            "family": self.family,
            "request": self.request,
            "stage": self.stage,
            "value_ms": _round(self.value_ms),
            "baseline_ms": _round(self.baseline_ms),
            "impact_ms": _round(self.impact_ms),
            "slow": self.slow,
        }
        if self.waiting:
            out["leaders_waiting"] = list(self.waiting)
        if self.saturated is not None:
            out["saturated_connections"], out["peers_saturated_connections"] = self.saturated
        return out


@dataclass(frozen=True)
class ClientSignal:
    """A broker above the line whose largest excess is a client's stage (send, throttle)."""

    broker: int
    request: str
    stage: str
    p99_ms: float
    peers_median_p99_ms: float
    excess_ms: dict[str, float]


@dataclass
class Reading:
    """One window as the model reads it (see the module's docstring)."""

    window_start_ms: int
    signals: dict[int, list[Signal]]  # broker -> the evidence against it
    healthy: set[int]  # brokers shown healthy: they serve in line with their peers, no evidence
    above: dict[str, set[int]]  # request -> brokers above the line (not by a wait by design)
    explained: dict[str, set[int]]  # request -> waiting leaders whose wait a target explains
    targets: dict[str, int]  # request -> the one broker its waiting leaders wait on
    unexplained: dict[str, tuple[int, ...]]  # request -> leaders waiting on nobody known
    reporting: dict[str, int]  # request -> brokers with a usable total row
    clients: list[ClientSignal]
    p99_ms: dict[tuple[int, str], float]  # (broker, request) -> total p99 (usable rows)
    count: dict[tuple[int, str], int]
    attributed: dict[str, int] = field(default_factory=dict)  # request -> broker (step 3's hold)
    _blamed: dict[int, list[Signal]] | None = field(default=None, repr=False)
    # Brokers known in the lookback with no row of any request type in this window and nobody
    # waiting on them: down (a clean shutdown moves its leadership away first; a crash), not slow.
    absent: frozenset[int] = frozenset()
    # request -> the one broker below the line while every other waits above it: supports an
    # attribution to it (step 3), never names it alone (brokers slowed alike in turn do this too)
    left_out: dict[str, int] = field(default_factory=dict)
    # Leaders whose acks=1 produce, as the probe sees it, left their own usual level (step 5)
    stalling: frozenset[int] = frozenset()
    common: bool = False

    def blamed(self) -> dict[int, list[Signal]]:
        """Brokers with evidence against them. Serving few alone is none (clients leave and
        leadership moves too); nobody is blamed in the cluster's window. Kept once the reading
        is final (:func:`read_windows`): the walks ask it for every broker."""
        if self._blamed is not None:
            return self._blamed
        if self.common:
            return {}
        return {b: s for b, s in self.signals.items() if any(x.family != FEW for x in s)}

    def freeze(self) -> None:
        self._blamed = None
        self._blamed = self.blamed()

    def weight(self, broker: int) -> int:
        """0; 1; or 2 when two independent families agree (serving few counts beside another)."""
        fams = {s.family for s in self.blamed().get(broker, [])}
        return min(len(fams), 2)

    def slow_weight(self, broker: int) -> int:
        """As :meth:`weight`, counting only the families whose impact is above the line."""
        fams = {s.family for s in self.blamed().get(broker, []) if s.slow and s.family != FEW}
        return min(len(fams), 2)

    def state(self, broker: int) -> str:
        """``blamed``, ``healthy`` or ``hold`` (this window says nothing either way)."""
        if self.weight(broker):
            return "blamed"
        return "healthy" if broker in self.healthy and not self.common else "hold"


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _median(values: Iterable[float]) -> float | None:
    vs = list(values)
    return statistics.median(vs) if vs else None


class Usual:
    """Each broker's usual level of a measure (a stage's p99, its acks=all wait), learnt from the
    windows read so far, oldest first: the median of the last ``windows`` values it had in
    windows where it was not out of line, once there are ``min_windows`` of them (else None).

    A window in which the measure departed from a known level (out of line with the peers *and*
    changed from its usual level) is left out, so a fault never becomes its own baseline however
    long it lasts within the lookback. A window read before any level existed is kept whatever it
    showed: with only the peers to go by it cannot tell a broker heavy by its layout from one
    that is slow, and leaving such windows out would leave the heavy broker without a level for
    ever. The cost: a below-the-line departure that began before the lookback's first windows
    is that broker's level (an early warning is about a change; above the line the level itself
    is judged)."""

    def __init__(self, windows: int, min_windows: int) -> None:
        self.windows = windows
        self.min_windows = min_windows
        self._values: dict[tuple[int, str, str], list[float]] = defaultdict(list)

    def level(self, key: tuple[int, str, str]) -> float | None:
        values = self._values.get(key, ())
        return statistics.median(values) if len(values) >= self.min_windows else None

    def changed(self, key: tuple[int, str, str], value: float, ratio: float, excess_ms: float) -> bool:
        """``value`` left the usual level (True when there is none yet)."""
        usual = self.level(key)
        return usual is None or (value >= ratio * usual and value - usual >= excess_ms)

    def note(self, key: tuple[int, str, str], value: float, departed: bool) -> None:
        """Keep this window's ``value`` unless it departed from a known level."""
        values = self._values[key]
        if departed and len(values) >= self.min_windows:  # a level is known (as :meth:`level`)
            return
        values.append(value)
        del values[: -self.windows]


class Rows:
    """Stage rows indexed (request, stage) → window → broker; probe rows by window → broker."""

    def __init__(self, rows: Iterable[StageWindow], probes: Iterable[ProbeBrokerWindow] = ()) -> None:
        self.rows: dict[tuple[str, str], dict[int, dict[int, StageWindow]]] = defaultdict(
            lambda: defaultdict(dict)
        )
        for r in rows:
            if r.broker is not None:
                self.rows[(r.request, r.stage)][r.window_start_ms][r.broker] = r
        self.probes: dict[int, dict[int, ProbeBrokerWindow]] = defaultdict(dict)
        for p in probes:
            self.probes[p.window_start_ms][p.broker] = p

    def windows(self, now_ms: int, window_s: int, requests: Sequence[str]) -> list[int]:
        """Finished windows holding a total row of any of ``requests``, oldest first."""
        done = {w for r in requests for w in self.rows.get((r, "total"), {}) if w + window_s * 1000 <= now_ms}
        return sorted(done)

    def usable(self, request: str, stage: str, w: int, min_requests: int) -> dict[int, StageWindow]:
        # ``logged``, not ``count``: under sampled capture a count is an estimate, and a p99 is
        # only as good as the logged requests it is read from.
        by_broker = self.rows.get((request, stage), {}).get(w, {})
        return {b: r for b, r in by_broker.items() if r.logged >= min_requests and r.p99_ms is not None}

    def known(self, request: str, windows: Iterable[int]) -> set[int]:
        by_window = self.rows.get((request, "total"), {})
        return {b for w in windows for b in by_window.get(w, {})}

    def throughputs(
        self, request: str, w: int, earlier: Sequence[int], cfg: SlowBrokerConfig
    ) -> dict[int, float]:
        """Each broker's logged requests in ``w`` against its own baseline (the median over
        ``earlier`` windows, at least ``stopped_baseline_windows`` of them and ``min_requests``
        at the median); a broker known before and silent now reads 0."""
        by_window = self.rows.get((request, "total"), {})
        out: dict[int, float] = {}
        for b in self.known(request, earlier):
            base = [by_window[x][b].logged for x in earlier if b in by_window.get(x, {})]
            baseline = _median(base) if len(base) >= cfg.stopped_baseline_windows else None
            if baseline is not None and baseline >= cfg.min_requests:
                row = by_window.get(w, {}).get(b)
                out[b] = (row.logged if row else 0) / baseline
        return out


def peer_medians(values: dict[int, float]) -> dict[int, float]:
    """For each broker, the median of every other broker's value (as ``statistics.median``: the
    mean of the two middle values of an even count); O(n log n), not O(n²), for large fleets."""
    items = sorted(values.items(), key=lambda kv: kv[1])
    xs = [v for _, v in items]
    m = len(xs) - 1  # the others' count
    if m < 1:
        return {}
    out = {}
    for i, (b, _) in enumerate(items):
        k = m // 2
        hi = xs[k] if k < i else xs[k + 1]
        if m % 2:
            out[b] = hi
        else:
            lo = xs[k - 1] if k - 1 < i else xs[k]
            out[b] = (lo + hi) / 2
    return out


def _below_peers(throughput: dict[int, float], ratio: float) -> set[int]:
    """Brokers whose throughput is at most ``ratio`` × the median of every other broker's."""
    return {b for b, med in peer_medians(throughput).items() if throughput[b] <= ratio * med}


def _waited(r: StageWindow) -> float:
    """A ``remote`` row's p99 of the requests that waited at all (acks=all produce waits for its
    followers, acks 0/1 never), else its p99."""
    return r.nonzero_p99_ms if r.nonzero_p99_ms is not None else (r.p99_ms or 0.0)


def _told_apart(
    remote: dict[int, float],
    f: int,
    ratio: float,
    excess_ms: float,
    lowest: list[tuple[float, int]] | None = None,
) -> bool:
    """Every other broker's wait is at least ``ratio`` × and ``excess_ms`` above ``f``'s.
    ``lowest``: the two lowest (wait, broker) of ``remote``, when the caller asks for many ``f``
    (else found here)."""
    own = remote.get(f)
    if own is None or len(remote) < 2:
        return False
    two = lowest if lowest is not None else heapq.nsmallest(2, ((ms, b) for b, ms in remote.items()))
    lowest_other = two[1][0] if two[0][1] == f else two[0][0]
    return lowest_other >= ratio * own and lowest_other - own >= excess_ms


def own_stages(cfg: SlowBrokerConfig, request: str) -> list[str]:
    """The stages that are a broker's own work for ``request``."""
    by_design = set(cfg.wait_stages.get(request, ()))
    return [s for s in cfg.own_stages if s not in by_design]


@dataclass(frozen=True)
class _Stages:
    """One request type's usable rows in one window, each stage's p99 per broker and its peers'
    medians, computed once for every broker judged."""

    usable: dict[int, StageWindow]
    total_peers: dict[int, float]
    p99: dict[str, dict[int, float]]  # stage -> broker -> p99
    peers: dict[str, dict[int, float]]  # stage -> broker -> its peers' median p99
    saturated_peers: dict[int, float]  # broker -> its peers' median of saturated connections

    @classmethod
    def read(
        cls, rows: Rows, request: str, w: int, usable: dict[int, StageWindow], cfg: SlowBrokerConfig
    ) -> _Stages:
        p99, peers = {}, {}
        for s in cfg.stages:
            values = {
                b: r.p99_ms or 0.0
                for b, r in rows.usable(request, s, w, cfg.min_requests).items()
                if b in usable
            }
            p99[s], peers[s] = values, peer_medians(values)
        return cls(
            usable,
            peer_medians({b: r.p99_ms or 0.0 for b, r in usable.items()}),
            p99,
            peers,
            peer_medians({b: float(r.saturated_connections) for b, r in usable.items()}),
        )


def queued_clients(b: int, request: str, st: _Stages, usual: Usual | None) -> tuple[int, float] | None:
    """Broker ``b``'s clients of ``request`` queue where no broker timer runs: it served more of
    their connections back to back than its peers' median and than its own usual level (by one
    connection at least), so ``(saturated connections, the peers' median)``; else None.

    The mechanism: a broker reads one request per connection at a time, and a client that
    pipelines (a producer with several requests in flight, records batching behind them) waits
    for every request ahead of its own; the broker's clock starts only when it reads each one. A
    connection served for ≥ 0.9 of the window was served back to back, so its client's next
    request was already waiting: its clients wait longer than any stage says, up to their request
    timeout (a slow disk under pipelining producers: each produce served in a few hundred ms,
    under the line, while the clients time out at 30 s). Against the peers, as every figure: a
    host too busy for every broker saturates connections on all of them at once; against its own
    level: a client that always sends faster than one broker can serve it (one hot partition's
    producer) is that broker's layout, not a fault. Noted every window (:class:`Usual`), departed
    windows left out of the level."""
    mine = st.usable[b].saturated_connections
    peer = st.saturated_peers.get(b)
    new = mine >= 1 and peer is not None and mine > peer
    if usual is not None:
        key = (b, request, "saturated_connections")
        new = new and usual.changed(key, float(mine), 1.0, 1.0)
        usual.note(key, float(mine), departed=new)
    return (mine, peer) if new and peer is not None else None


def _own_signal(
    rows: Rows,
    request: str,
    w: int,
    b: int,
    st: _Stages,
    cfg: SlowBrokerConfig,
    usual: Usual | None = None,
    shared_out: frozenset[str] | None = None,
) -> tuple[Signal | None, ClientSignal | None, dict[str, float]]:
    """Step 2 for one broker: its own work out of line (a Signal), or its excess a client's.
    ``usual``: its own levels (step 1), noted here for the windows after this one.
    ``shared_out``: the :data:`SHARED_STAGES` out of line with its peers in every request type
    that reports them for this broker in ``w`` (None: not checked)."""
    usable = st.usable
    total = usable[b].p99_ms or 0.0
    peer_total = st.total_peers.get(b)
    if peer_total is None:
        return None, None, {}
    excess: dict[str, float] = {}
    out_of_line: dict[str, float] = {}
    by_design = set(cfg.wait_stages.get(request, ()))
    own = own_stages(cfg, request)
    for s in cfg.stages:
        mine, peer = st.p99[s].get(b), st.peers[s].get(b)
        if mine is None or peer is None:
            continue
        excess[s] = mine - peer
        if s not in own:
            continue
        beside_peers = _beside_peers(mine, peer, cfg)
        left_usual = True
        if usual is not None:
            key = (b, request, s)
            left_usual = usual.changed(key, mine, cfg.own_change_ratio, cfg.degraded_excess_ms)
            usual.note(key, mine, departed=beside_peers and left_usual)
        if beside_peers and left_usual and (shared_out is None or s not in SHARED_STAGES or s in shared_out):
            out_of_line[s] = mine - peer
    above = total >= cfg.peer_ratio * peer_total and b in _above(rows, request, w, {b: usable[b]}, cfg)
    judged = {s: x for s, x in excess.items() if s not in by_design and x >= cfg.degraded_excess_ms}
    top = max(judged, key=judged.__getitem__) if judged else None
    if above and top in cfg.client_stages:
        return None, ClientSignal(b, request, top, total, peer_total, excess), excess
    # A client's stage above the line on its own, out of line with its peers': a client reads its
    # responses late (or its quota holds it), whatever else the request type's total holds (a
    # consumer fetch's total also holds its long poll, from other requests than the client's).
    for s in cfg.client_stages:
        mine, peer = st.p99[s].get(b), st.peers[s].get(b)
        if (
            mine is not None
            and peer is not None
            and mine > cfg.p99_threshold_ms
            and mine >= cfg.degraded_ratio * peer
            and mine - peer >= cfg.degraded_excess_ms
        ):
            return None, ClientSignal(b, request, s, mine, peer, excess), excess
    # Slow by its own work: above the line, its peers' ``peer_ratio`` ×, the excess its own; or
    # out of line below it with its clients queued behind it (the impact no stage shows).
    queued = queued_clients(b, request, st, usual)
    slow = above and top in own
    if not out_of_line and not slow:
        return None, None, excess
    if out_of_line and not slow and queued is not None:
        slow = True
    else:
        queued = None
    candidates = out_of_line or {top: judged[top]} if top else out_of_line
    stage = max(candidates, key=candidates.__getitem__)
    if (
        stage == "requestQueue"
        and "local" in out_of_line
        and out_of_line["local"] >= cfg.queue_behind_local_ms
    ):
        stage = "local"  # handler threads blocked in a slow append leave the queue behind them
    sig = Signal(
        OWN,
        request,
        stage,
        total,
        peer_total,
        total if slow else 0.0,
        slow,
        excess_ms=dict(excess),
        saturated=queued,
    )
    return sig, None, excess


@dataclass(frozen=True)
class _ProbeView:
    """The probe's rows of one window that can be judged (``probe_min_probes`` decided), each
    leader's p99 (the larger of produce and end to end) and its peers' medians."""

    by_broker: dict[int, ProbeBrokerWindow]
    latency: dict[int, float]
    peer_latency: dict[int, float]
    peer_avail: dict[int, float]

    @classmethod
    def read(cls, rows: Rows, w: int, cfg: SlowBrokerConfig) -> _ProbeView:
        by_broker = {b: p for b, p in rows.probes.get(w, {}).items() if p.decided >= cfg.probe_min_probes}
        latency = {b: max(p.produce_p99_ms or 0.0, p.end_to_end_p99_ms or 0.0) for b, p in by_broker.items()}
        avail = {b: p.availability for b, p in by_broker.items() if p.availability is not None}
        return cls(by_broker, latency, peer_medians(latency), peer_medians(avail))


def probe_signals(
    rows: Rows, w: int, cfg: SlowBrokerConfig, view: _ProbeView | None = None
) -> dict[int, Signal]:
    """Step 4: the leaders the probe finds slow or failing against their peers in ``w``."""
    view = view or _ProbeView.read(rows, w, cfg)
    by_broker, latency, peer_latency, peer_avail = (
        view.by_broker,
        view.latency,
        view.peer_latency,
        view.peer_avail,
    )
    produce = {b: p.produce_p99_ms or 0.0 for b, p in by_broker.items()}
    # The p90s: rows aggregated before they were carried have none, and are judged on p99 alone.
    tails = all(p.produce_p90_ms is not None or p.end_to_end_p90_ms is not None for p in by_broker.values())
    tail = {b: max(p.produce_p90_ms or 0.0, p.end_to_end_p90_ms or 0.0) for b, p in by_broker.items()}
    produce_tail = {b: p.produce_p90_ms or 0.0 for b, p in by_broker.items()}

    def slow_beside_peers(values: dict[int, float], p99: dict[int, float]) -> set[int]:
        # Against the peers' median; and above the line (the broker's p99: what its clients
        # pay), against the fastest peer too: with two of three leaders stalled, the median is
        # a stalled one, while a healthy peer shows what a probe costs. Many brokers blamed at
        # once is the cluster's (step 5).
        peer = peer_medians(values)
        ordered = sorted(values.values())
        out = set()
        for b, mine in values.items():
            if b not in peer:
                continue
            fastest = ordered[1] if len(ordered) > 1 and mine == ordered[0] else ordered[0]
            slow_here = mine >= cfg.probe_ratio * peer[b] or (
                p99[b] > cfg.p99_threshold_ms and mine >= cfg.probe_ratio * fastest
            )
            if p99[b] >= cfg.probe_floor_ms and slow_here:
                out.add(b)
        return out

    def several(p99: dict[int, float], p90: dict[int, float]) -> set[int]:
        # Out of line at p99 and at p90 alike: a p99 of a window's few dozen probes is its
        # slowest one or two, and one late probe is the probe's own hiccup (its process
        # descheduled on a busy host, a pause of its client) as often as the leader's. A
        # stalled leader, a slow path to it, delays a share of its probes, not one.
        out = slow_beside_peers(p99, p99)
        return out & slow_beside_peers(p90, p99) if tails else out

    slow = several(latency, tail)
    slow_alone = several(produce, produce_tail)
    out: dict[int, Signal] = {}
    for b, p in by_broker.items():
        if b not in peer_latency:
            continue
        mine, peer = latency[b], peer_latency[b]
        avail_peer = peer_avail.get(b)
        failing = (
            p.availability is not None
            and avail_peer is not None
            and p.availability < avail_peer - cfg.probe_availability_gap
        )
        if failing or b in slow:
            out[b] = Signal(
                PROBE,
                None,
                UNSEEN,
                mine,
                peer,
                mine,
                failing or mine > cfg.p99_threshold_ms,
                leader_alone=failing or b in slow_alone,
            )
    return out


def read_window(
    rows: Rows, w: int, earlier: Sequence[int], cfg: SlowBrokerConfig, usual: Usual | None = None
) -> Reading:
    """Steps 1-4 of the model in window ``w`` (``earlier``: the windows before it that the
    baselines read, oldest first; ``usual``: the brokers' own levels learnt from them, and
    noted from this one). Step 3's attribution and step 5 need the whole lookback:
    :func:`read_windows`."""
    signals: dict[int, list[Signal]] = defaultdict(list)
    view = _ProbeView.read(rows, w, cfg)
    probe = probe_signals(rows, w, cfg, view)
    for b, s in probe.items():
        signals[b].append(s)
    reading = Reading(w, signals, set(), {}, {}, {}, {}, {}, [], {}, {})
    reading.stalling = stalling_leaders(view, cfg, usual)
    below_healthy: set[int] = set()
    read: dict[str, _Stages] = {}
    for request in cfg.requests:
        if usable := rows.usable(request, "total", w, cfg.min_requests):
            read[request] = _Stages.read(rows, request, w, usable, cfg)
    shared = _shared_out(read, cfg)
    for request, stages in read.items():
        usable = stages.usable
        reading.reporting[request] = len(usable)
        for b, r in usable.items():
            reading.p99_ms[(b, request)] = r.p99_ms or 0.0
            reading.count[(b, request)] = r.count
        for b in usable:
            sig, client, _ = _own_signal(rows, request, w, b, stages, cfg, usual, shared.get(b, frozenset()))
            if sig is not None:
                signals[b].append(sig)
            if client is not None:
                reading.clients.append(client)
        throughput = rows.throughputs(request, w, earlier, cfg)
        few = _below_peers(throughput, cfg.stopped_ratio)
        below_healthy |= _below_peers(throughput, cfg.healthy_throughput_ratio)
        for b in few:
            signals[b].append(Signal(FEW, request, "remote", throughput[b], None, 0.0, False))
        reading.above[request] = _above(rows, request, w, usable, cfg)
        if "remote" not in cfg.wait_stages.get(request, ()):
            _waits(rows, request, w, usable, throughput, few, reading, cfg, usual)
    blamed = reading.blamed()  # once: it is computed anew at each call until the reading is final
    answering = probe_in_line(view, cfg)
    reading.healthy = {
        b for (b, _r) in reading.p99_ms if (b not in below_healthy or b in answering) and not blamed.get(b)
    }
    return reading


def stalling_leaders(view: _ProbeView, cfg: SlowBrokerConfig, usual: Usual | None) -> frozenset[int]:
    """Step 5's evidence from the probe against each leader's own past: its acks=1 produce p90
    at least ``probe_ratio`` × its usual level (:class:`Usual`, once known) and above
    ``probe_floor_ms``. An acks=1 produce holds no replication, so only the leader's own stall
    (its process, its path) moves it: a leader waiting on a stalled follower keeps it fast. The
    p90, not the p99: several probes late, not the probe's own hiccup. Judged against itself,
    not its peers: when every leader stalls at once (the machine, the cluster) none stands out
    from the others, and each left its own level. ``usual``: the levels, noted from this window."""
    if usual is None:
        return frozenset()
    out = set()
    for b, p in view.by_broker.items():
        if p.produce_p90_ms is None:
            continue
        key = (b, PROBE, "produce_p90")
        level = usual.level(key)
        departed = (
            level is not None
            and p.produce_p90_ms >= cfg.probe_ratio * level
            and p.produce_p90_ms >= cfg.probe_floor_ms
        )
        usual.note(key, p.produce_p90_ms, departed)
        if departed:
            out.add(b)
    return frozenset(out)


def probe_in_line(view: _ProbeView, cfg: SlowBrokerConfig) -> set[int]:
    """The leaders that answer their probes in the window as their peers do: at least
    ``probe_min_probes`` decided, the p99 under the line and under ``probe_ratio`` × the peers'
    median, availability within ``probe_availability_gap`` of theirs. Such a broker serves its
    clients whatever its request count: serving fewer than its peers with no evidence against
    it is leadership it lost (fenced during a stall, or moved away) and gets back at the next
    preferred-leader election, not a stall (step 1's window showing it healthy)."""
    latency, peer_latency, peer_avail = view.latency, view.peer_latency, view.peer_avail
    return {
        b
        for b, p in view.by_broker.items()
        if b in peer_latency
        and latency[b] <= cfg.p99_threshold_ms
        and latency[b] < cfg.probe_ratio * peer_latency[b]
        and p.availability is not None
        and p.availability >= peer_avail.get(b, 0.0) - cfg.probe_availability_gap
    }


def _beside_peers(mine: float, peer: float, cfg: SlowBrokerConfig) -> bool:
    """A stage's p99 out of line with its peers' median (step 1, before its own usual level)."""
    return mine >= cfg.degraded_ratio * peer and mine - peer >= cfg.degraded_excess_ms


def _shared_out(read: dict[str, _Stages], cfg: SlowBrokerConfig) -> dict[int, frozenset[str]]:
    """Per broker, the :data:`SHARED_STAGES` out of line with its peers (``degraded_ratio`` ×
    and ``degraded_excess_ms`` above) in every request type that reports the stage for it."""
    verdicts: dict[tuple[int, str], list[bool]] = defaultdict(list)
    for request, st in read.items():
        own = own_stages(cfg, request)
        for s in SHARED_STAGES:
            if s not in own:
                continue
            for b, mine in st.p99[s].items():
                peer = st.peers[s].get(b)
                if peer is not None:
                    verdicts[(b, s)].append(_beside_peers(mine, peer, cfg))
    out: dict[int, set[str]] = defaultdict(set)
    for (b, s), seen in verdicts.items():
        if all(seen):
            out[b].add(s)
    return {b: frozenset(v) for b, v in out.items()}


def _above(
    rows: Rows, request: str, w: int, usable: dict[int, StageWindow], cfg: SlowBrokerConfig
) -> set[int]:
    """Brokers above the line, but not those whose time is mostly a wait by design (a consumer
    fetch's long poll): idle consumers on every broker are no cluster-wide slowdown."""
    out = set()
    for b, r in usable.items():
        total = r.p99_ms or 0.0
        if total <= cfg.p99_threshold_ms:
            continue
        by_design = [
            rows.usable(request, s, w, cfg.min_requests).get(b) for s in cfg.wait_stages.get(request, ())
        ]
        if any(x is not None and (x.p99_ms or 0.0) >= cfg.remote_share * total for x in by_design):
            continue
        out.add(b)
    return out


def _waits(
    rows: Rows,
    request: str,
    w: int,
    usable: dict[int, StageWindow],
    throughput: dict[int, float],
    few: set[int],
    reading: Reading,
    cfg: SlowBrokerConfig,
    usual: Usual | None = None,
) -> None:
    """Step 3: the leaders waiting on replication, and the one broker that explains their wait."""
    remote = {b: _waited(r) for b, r in rows.usable(request, "remote", w, cfg.min_requests).items()}
    remote_peers = peer_medians(remote)
    waiting = set()
    usual_wait: set[int] = set()  # waiting at the wait they usually have (step 1)
    for b, ms in remote.items():
        peer = remote_peers.get(b)
        out_of_line = (
            peer is not None and ms >= cfg.degraded_ratio * peer and ms - peer >= cfg.degraded_excess_ms
        )
        if ms >= cfg.wait_floor_ms or out_of_line:
            waiting.add(b)
        if usual is not None:
            key = (b, request, "remote")
            left = usual.changed(key, ms, cfg.own_change_ratio, cfg.degraded_excess_ms)
            usual.note(key, ms, departed=b in waiting and left)
            if b in waiting and not left:
                usual_wait.add(b)
    if not waiting:
        return
    candidates = rows.known(request, [w]) | set(throughput) | set(usable)
    evidence: dict[int, int] = {}

    def probe_own(b: int, s: Signal) -> bool:
        # The probe against a waiting leader is its own stall only if its produce alone is slow
        # (its end-to-end holds the wait it shares with every leader of the same follower).
        return s.family == PROBE and (b not in waiting or s.leader_alone)

    def direct(f: int) -> int:
        # Direct evidence of a stall weighs 2 (it stops, it logs nothing, its own work or the
        # probe says so); being the one broker that does not wait weighs 1 (a broker leading no
        # acks=all partition looks the same).
        return 2 * ((f in few) + any(s.family == OWN or probe_own(f, s) for s in reading.signals.get(f, [])))

    lowest = heapq.nsmallest(2, ((ms, b) for b, ms in remote.items()))
    for f in candidates:
        told = f not in waiting and _told_apart(
            remote, f, cfg.follower_remote_ratio, cfg.degraded_excess_ms, lowest
        )
        score = direct(f) + told
        if score and (waiting - {f}):
            evidence[f] = score
    best = max(evidence.values(), default=0)
    top = [f for f, s in evidence.items() if s == best]

    # A waiting leader with as much evidence of a stall of its own (its clients see it slow, it
    # serves few) is the more likely cause of its own wait (its network path, its own process):
    # a follower it waits on alone would have the other leaders waiting too. Its own stages a
    # little out of line are not that evidence (they move while it waits).
    def stalls(b: int) -> int:
        return 2 * ((b in few) + any(probe_own(b, s) for s in reading.signals.get(b, [])))

    own = max((stalls(b) for b in waiting if not top or b != top[0]), default=0)
    if len(top) == 1 and best > own:
        target = top[0]
        leaders = tuple(sorted(waiting - {target}))
        impact = (
            max((usable[b].p99_ms or 0.0) for b in leaders if b in usable)
            if any(b in usable for b in leaders)
            else 0.0
        )
        reading.targets[request] = target
        reading.explained[request] = set(waiting)
        # A waiting leader's time is the wait: its own stages out of line below its own slowness
        # are left to the follower's finding (they would count it among the culprits twice), and
        # so is the probe's view of it when only its end-to-end is slow (the record waited to be
        # replicated: the same wait).
        for b in waiting - {target}:
            reading.signals[b] = [
                s
                for s in reading.signals.get(b, [])
                if not (s.family == OWN and s.request == request and not s.slow)
                and not (s.family == PROBE and not s.leader_alone)
            ]
        reading.signals[target].append(
            Signal(
                WAITED_ON,
                request,
                "remote",
                min(remote[b] for b in leaders),
                remote.get(target),
                impact,
                impact > cfg.p99_threshold_ms,
                waiting=leaders,
            )
        )
        return
    reading.unexplained[request] = tuple(sorted(waiting))
    below = [b for b in usable if b not in reading.above.get(request, set())]
    if len(below) == 1 and len(usable) >= 3 and set(usable) - set(below) <= waiting:
        reading.left_out[request] = below[0]
    for b in sorted(waiting):
        if b in usable:
            total = usable[b].p99_ms or 0.0
            slow = total > cfg.p99_threshold_ms
            if not slow and b in usual_wait:
                continue  # the wait its layout always gives it, below the line: no warning
            reading.signals[b].append(Signal(WAITS, request, "remote", remote[b], None, total, slow))


def read_windows(rows: Rows, windows: Sequence[int], cfg: SlowBrokerConfig) -> list[Reading]:
    """Every window of ``windows`` (oldest first) read, then step 3's attribution over the
    lookback and step 5's common mode."""
    usual = Usual(cfg.baseline_windows, cfg.usual_min_windows)
    readings = [
        read_window(rows, w, windows[max(0, i - cfg.baseline_windows) : i], cfg, usual)
        for i, w in enumerate(windows)
    ]
    for request in cfg.requests:
        for i, target in _episodes(readings, request, cfg).items():
            _attribute(readings[i], request, target)
    for i, r in enumerate(readings):
        r.common = _common(r, cfg)
        known = {
            b for q in cfg.requests for b in rows.known(q, windows[max(0, i - cfg.baseline_windows) : i + 1])
        }
        waited_on = set(r.targets.values()) | set(r.attributed.values())
        r.absent = frozenset(
            known - {b for b, _ in r.p99_ms} - _logged_any(rows, cfg, r.window_start_ms) - waited_on
        )
        r.freeze()
    return readings


def _logged_any(rows: Rows, cfg: SlowBrokerConfig, w: int) -> set[int]:
    """Brokers with a total row of any request type in window ``w`` (usable or not)."""
    return {b for q in cfg.requests for b in rows.rows.get((q, "total"), {}).get(w, {})}


def _episodes(readings: Sequence[Reading], request: str, cfg: SlowBrokerConfig) -> dict[int, int]:
    """Window index → the broker its all-waiting window belongs to. The windows naming a broker
    as the one waited on (by step 3, or leaving it out below the line) chain into an episode
    while no more than ``clear_windows`` windows separate them (the same fault, not an earlier
    one the lookback still holds); an episode that names one broker alone, at least once by step
    3 and in ``attribute_min_windows`` windows in all, owns the all-waiting windows within
    ``clear_windows`` of it, unless they outnumber the windows naming it. Attribution reads an
    all-waiting window as the named fault seen less clearly (a paused leader's own requests wait
    out its pauses); that holds while naming the broker is the episode's usual reading. When
    most of its windows read "everyone waits", every broker stalls (the cluster's, step 5) and
    the odd window naming one (it served a little less that window) is the noise."""
    support = sorted(
        (i, r.targets.get(request, r.left_out.get(request)), request in r.targets)
        for i, r in enumerate(readings)
        if request in r.targets or request in r.left_out
    )
    chains: list[list[tuple[int, int | None, bool]]] = []
    for item in support:
        if chains and item[0] - chains[-1][-1][0] <= cfg.clear_windows + 1:
            chains[-1].append(item)
        else:
            chains.append([item])
    owner: dict[int, int] = {}
    for chain in chains:
        names = {t for _, t, _ in chain}
        if (
            len(names) != 1
            or not any(strong for *_, strong in chain)
            or len(chain) < cfg.attribute_min_windows
        ):
            continue
        (target,) = names
        if target is None:
            continue
        lo, hi = chain[0][0] - cfg.clear_windows, chain[-1][0] + cfg.clear_windows
        span = {
            i for i in range(max(0, lo), min(len(readings), hi + 1)) if request in readings[i].unexplained
        }
        naming = {i for i, *_ in chain}  # a window leaving the target out is also all-waiting
        if len(span - naming) > len(naming):
            continue
        for i in span:
            owner[i] = target
    return owner


def _attribute(r: Reading, request: str, target: int) -> None:
    """Window ``r``'s leaders wait on ``target`` after all: their waits leave them, and the
    window holds ``target``'s score."""
    leaders = r.unexplained.pop(request)
    r.attributed[request] = target
    r.explained[request] = set(leaders)
    for b in leaders:
        r.signals[b] = [s for s in r.signals.get(b, []) if not (s.family == WAITS and s.request == request)]
    r.healthy.discard(target)


def _common(r: Reading, cfg: SlowBrokerConfig) -> bool:
    """Step 5: more than ``cluster_wide_fraction`` of a request type's reporting brokers blamed,
    waiting on nobody known, above the line with nothing explaining it, or stalling for their
    clients against their own usual level (:func:`stalling_leaders`). Blamed by the probe
    counts as by its own timers: two of three leaders stalled for their clients is the cluster's
    whichever evidence names each (a leader waiting on a stalled follower keeps the probe's
    blame only when its produce alone is slow, step 3). A follower every leader seems to wait
    on is no explanation when those leaders stall themselves: with every broker paused in
    phase, the one leading no acks=all partition looks like the follower they wait on."""
    for request, n in r.reporting.items():
        if n < 2:
            continue
        reporting = {b for b, q in r.p99_ms if q == request}
        blamed = {
            b
            for b, sigs in r.signals.items()
            if any(s.family in (OWN, WAITED_ON) and s.request == request for s in sigs)
            or (b in reporting and any(s.family == PROBE for s in sigs))
        }
        culprits = (
            blamed
            | set(r.unexplained.get(request, ()))
            | (r.above.get(request, set()) - r.explained.get(request, set()))
            | (r.stalling & r.explained.get(request, set()))
        )
        if len(culprits) / n > cfg.cluster_wide_fraction:
            return True
    return False
