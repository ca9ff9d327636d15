"""Fault matrix: faults on the real 3-broker cluster, judged by both detection paths; one table of
what was expected, what each path said and when, and a verdict.

    python bench/fault_matrix.py [--scenarios leader_pause_400,all_paused,...] [--fault-s 60]
                                 [--soak-s 900] [--prometheus shipped|fast] [--json PATH]
                                 [--save-run RUN.json]
    python bench/fault_matrix.py --from-run RUN.json   # judge a saved run again, no cluster
    python bench/fault_matrix.py --smoke               # seconds: judge a run made up here, no cluster

What runs for real: a 3-broker KRaft cluster (``testbed``); producer load (acks=1
uniform and Zipf keys, acks=all) and a consumer; one agent per broker (in this process, 10 s
windows by default, ``--window-s``) publishing to ``linkwatch.samples`` and serving /metrics; the faults of
``testbed.faults`` (with handlers starved, small requests aimed at the victim alone,
:class:`AimedLoad`: one I/O thread copes with the matrix's own load); and both detection paths,
live during the run:

* the analyzer: ``AnalysisService`` (Spark local mode: Structured Streaming from the samples
  topic into its archive, the detectors on a timer), its findings taken from its sink with the
  wall-clock time they were emitted. Its slow-broker thresholds are the defaults; only its policy differs: ``info`` findings
  (``degraded_broker``) are emitted too, so they can be timed (by default they are re-checked
  later, never sent on);
* Prometheus with the shipped rules, Alertmanager and ``linkwatch alerts serve``
  (``AlertStack``), scraping the agents and the analyzer. ``--prometheus shipped`` (the
  default): the shipped rules, ``for:`` and Alertmanager waits, the agents scraped every 2 s and
  the analyzer every 1 s as the shipped ``config/prometheus.example.yml`` does.
  ``--prometheus fast``: every ``for:`` 10 s, the minute ranges 30s/20s/40s, Alertmanager's
  waits 1-2 s, scrape and evaluation every 1 s. The receiver's audit log gives each
  notification and its time.

Besides, the agents' windows are read back from the samples topic after the run and replayed
through the analyzer's engine (``WindowState`` → ``SlowBrokerDetector`` → ``Engine``) window by
window: the rules' verdict on the same rows without the pipeline's delay. ``--save-run`` keeps
the run (the agents' records, the phases, the live findings and alerts), and ``--from-run``
judges it again: the live paths as they were, the replay with the rules as they are now (a rule
change is tried on every scenario's real windows without a cluster).

Per scenario: whether the fault took effect (the stage it should move: the victim's median p99
against its peers' in the fault windows), per path the findings that appeared during the
scenario's phases (before / fault / after), time from onset to the first right one and from
the fault's end to its clearing, and a verdict: right (right subject and stage, and no other
finding eligible for remediation at any time in the scenario), wrong subject, wrong stage,
missed, or false alarm. The load average is printed at the start and at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _kit import read_samples  # bench/ is on sys.path (run as a script)

from aggregation.window_state import WindowState
from analyzer.base import FindingSink
from analyzer.engine import Engine
from analyzer.registry import load_detectors
from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from findings.policy import Action, SeverityPolicyConfig
from linkwatch import records as R
from linkwatch.aggregates import StageWindow
from linkwatch.kafka_client import KafkaClientConfig
from testbed import faults
from testbed.agents import config_for_node, start_agents_in_process
from testbed.alert_stack import SHIPPED_SCRAPE_S, AlertStack, ScrapeTarget, agent_targets
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from testbed.demo.probe import ProbeComponent
from testbed.load import ConsumerLoad, KeyDistribution, ProducerLoad, ensure_topic

CLUSTER = "fm"
# The agents' and the analyzer's window unless --window-s sets it (the product's default;
# runs 1-3 used 2 s). A saved run carries its own.
DEFAULT_WINDOW_S = 10
REPLAY_LOOKBACK_WINDOWS = 30  # more than the model reads back (baseline_windows 18)
BROKERS = (1, 2, 3)
VICTIM = 2  # the fixed scenarios' victim (--scenarios); draws choose their own
TOPICS = ("fm-uniform", "fm-zipf", "fm-all")
ACKS1_TOPICS = ("fm-uniform", "fm-zipf")
ACKS_ALL_TOPIC = "fm-all"
SLOW_TOPIC = "fm-slow-{v}"  # one partition led by victim v, filled for the slow client to fetch
HOT_TOPIC = "fm-hot-{v}"  # partitions only victim v holds: the load aimed at it (AimedLoad)
SLOW_CLIENT_ID = "fm-slow-client"
# Findings a remediation may act on (a broker's leadership moved), per path.
ELIGIBLE = {"analyzer": {"slow_broker"}, "prometheus": {"LinkwatchSlowBrokerFinding"}}
# The slow-node findings as each path says them (rule or alertname): judged per scenario. The
# Prometheus path's safety nets and probe alerts are listed beside, never judged.
SLOW_NODE = {
    "analyzer": {"slow_broker", "degraded_broker", "slow_client", "cluster_slow"},
    "prometheus": {
        "LinkwatchSlowBrokerFinding",
        "LinkwatchDegradedBrokerFinding",
        "LinkwatchSlowClientFinding",
        "LinkwatchClusterSlowdown",
    },
}
BROKER_RULES = {
    "analyzer": ("slow_broker", "degraded_broker"),
    "prometheus": ("LinkwatchSlowBrokerFinding", "LinkwatchDegradedBrokerFinding"),
}
CLUSTER_RULE = {"analyzer": "cluster_slow", "prometheus": "LinkwatchClusterSlowdown"}
CLIENT_RULE = {"analyzer": "slow_client", "prometheus": "LinkwatchSlowClientFinding"}


@dataclass(frozen=True)
class Expect:
    """A finding that is right for a scenario: rule (or alertname), subject, stage (None: any;
    ``a|b``: either)."""

    rule: str
    subject: str
    stage: str | None

    def matches(self, rule: str, subject: str) -> bool:
        return rule == self.rule and subject == self.subject

    def stage_ok(self, stages: list[str]) -> bool:
        """The first stage named is right (the one a remediation would act on)."""
        return self.stage is None or (bool(stages) and stages[0] in self.stage.split("|"))

    def __str__(self) -> str:
        return f"{self.rule} {self.subject} {self.stage or 'any stage'}"


@dataclass(frozen=True)
class Effect:
    """The stage(s) a fault should move, for ``request``; ``mode``: ``victim`` (the victim's p99
    against its peers'), ``waiters`` (the peers', waiting on the victim, against its), ``all``
    (every broker in the fault against itself before it)."""

    request: str
    stages: tuple[str, ...]
    mode: str = "victim"


@dataclass
class Ctx:
    state: ClusterState
    admin: Any
    cluster: LocalCluster

    def pid(self, broker: int) -> int:
        return self.state.node(broker).pid


@dataclass(frozen=True)
class Scenario:
    """One fault as judged: its kind, the brokers it hits, its drawn intensities (``params``),
    the load that runs beside it (``load``: ``acks1``, ``acksall`` or ``both``, and the rates),
    and what each path must say. ``quiet``: ``all`` (nothing slow-node may be found: the soak),
    ``remediable`` (nothing a remediation may act on: a planned restart), or ``""``."""

    name: str
    kind: str
    victims: tuple[int, ...]
    params: dict[str, Any]
    load: dict[str, Any]
    fault_s: float
    note: str = ""
    quiet: str = ""

    def fault(self, ctx: Ctx) -> contextlib.AbstractContextManager[Any]:
        return FAULTS[self.kind](ctx, self)

    def expects(self, path: str) -> tuple[Expect, ...]:
        """What is right on ``path`` (``analyzer`` or ``prometheus``)."""
        if self.kind in ("soak", "rolling_restart"):
            return ()
        if self.kind == "all_slow":
            return (Expect(CLUSTER_RULE[path], f"cluster:{CLUSTER}", None),)
        if self.kind == "slow_client":
            return (Expect(CLIENT_RULE[path], f"client:{SLOW_CLIENT_ID}", "send"),)
        out = [Expect(r, f"broker:{v}", STAGES[self.kind]) for v in self.victims for r in BROKER_RULES[path]]
        if self.kind == "two_slow":  # two of three brokers: the cluster's too
            out.append(Expect(CLUSTER_RULE[path], f"cluster:{CLUSTER}", None))
        return tuple(out)

    def effect(self) -> Effect | None:
        return EFFECTS.get(self.kind)


QUEUES = "requestQueue|responseQueue"
# The stage that is right per kind (None: any stage). A stopped JVM stretches whichever stage a
# request is in, and what it makes others wait for is in theirs: any stage is right for pauses.
STAGES: dict[str, str | None] = {
    "leader_pause": None,
    "safepoint_storm": None,
    "two_slow": None,
    "follower_pause": "remote",
    "slow_disk": "local",
    "cpu_starved": f"{QUEUES}|local",
    "handlers_starved": "requestQueue",
    "congested_link": "remote|send|unseen",
}
EFFECTS: dict[str, Effect] = {
    "leader_pause": Effect(R.PRODUCE, ("remote",), "waiters"),
    "follower_pause": Effect(R.PRODUCE, ("remote",), "waiters"),
    "safepoint_storm": Effect(R.PRODUCE, ("total",)),
    "slow_disk": Effect(R.PRODUCE, ("local",)),
    "cpu_starved": Effect(R.PRODUCE, ("requestQueue", "local")),
    "handlers_starved": Effect(R.PRODUCE, ("requestQueue",)),
    "slow_client": Effect(R.FETCH_CONSUMER, ("send",)),
    "congested_link": Effect(R.PRODUCE, ("remote", "total")),
    "all_slow": Effect(R.PRODUCE, ("total",), "all"),
}


# Every pause runs in its own process, on an absolute schedule: a thread of this busy process
# (Spark's driver, three agents, the loads) woke late, and in run 3 the leader pause had
# windows with no pause at all ("fault did NOT take effect").
def _pause(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    p = s.params
    return faults.PauseDutyCycle(
        ctx.pid(s.victims[0]),
        pause_ms=p["pause_ms"],
        period_ms=p["period_ms"],
        own_process=True,
        jitter=p.get("jitter", 0.0),
        seed=p.get("seed"),
    )


@contextlib.contextmanager
def _paused_together(ctx: Ctx, s: Scenario) -> Iterator[None]:
    """Each victim paused in its own cycle, started a fraction of a period apart (in lockstep
    they would stop and resume together and barely see each other's pauses)."""
    p = s.params
    with contextlib.ExitStack() as stack:
        for k, v in enumerate(s.victims):
            stack.enter_context(
                faults.PauseDutyCycle(
                    ctx.pid(v),
                    pause_ms=p["pause_ms"],
                    period_ms=p["period_ms"],
                    own_process=True,
                    jitter=p.get("jitter", 0.0),
                    seed=None if p.get("seed") is None else p["seed"] + k,
                )
            )
            time.sleep(p["period_ms"] / 1000 / len(s.victims))
        yield


def _follower_pause(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    v = s.victims[0]
    return faults.stall_follower(
        ctx.admin, v, ctx.pid(v), [ACKS_ALL_TOPIC], pause_ms=s.params["pause_ms"], own_process=True
    )


def _safepoints(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    node = ctx.state.node(s.victims[0])
    return faults.SafepointStorm(node.jolokia_url, how=s.params["how"], gap_s=s.params["gap_s"])


def _cpu(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    return faults.starve_cpu(ctx.pid(s.victims[0]), busy_processes=s.params["busy"])


def _link(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    node = ctx.state.node(s.victims[0])
    return faults.CongestedLink(node.ports.client, share=s.params["share"], measure_s=5.0)


@contextlib.contextmanager
def _restart(ctx: Ctx, s: Scenario) -> Iterator[None]:
    with faults.rolling_restart(ctx.cluster, list(s.victims), gap_s=s.params["gap_s"]) as done:
        yield
    print(f"  restart: {'; '.join(done)}", flush=True)
    ctx.state = ctx.cluster.state() or ctx.state


HOT_PARTITIONS = 6


class AimedLoad:
    """Produce requests aimed at one broker: ``producers`` librdkafka producers (a connection
    each), one small message per request (``linger.ms`` 0), to the victim's hot topic, whose
    partitions only the victim holds, at ``rate_per_s`` in all: requests and appends on it
    alone, no work for the others. ``calls`` counts produce calls, ``refused`` those its full
    local queue refused (not retried)."""

    def __init__(self, bootstrap: str, topic: str, rate_per_s: float, producers: int) -> None:
        from confluent_kafka import Producer

        conf = {"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "batch.num.messages": 1}
        self.producers = [Producer({**conf, "client.id": f"fm-aimed-{k}"}) for k in range(producers)]
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.calls = 0
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="aimed-load", daemon=True)

    def __enter__(self) -> AimedLoad:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(15)
        for p in self.producers:
            p.flush(5)

    def _run(self) -> None:
        start, step = time.monotonic(), 1.0 / self.rate_per_s
        while not self._stop.is_set():
            for k, p in enumerate(self.producers):
                try:
                    p.produce(self.topic, b"h" * 100, partition=k % HOT_PARTITIONS)
                except BufferError:  # its queue is full: the broker is behind, as meant
                    self.refused += 1
                p.poll(0)
                self.calls += 1
            ahead = start + self.calls * step - time.monotonic()
            if ahead > 0:
                self._stop.wait(ahead)


# Handlers starved: one I/O thread, held now and then by a request slow to handle. One thread
# alone copes with the matrix's load (a fraction of a millisecond a request), so it is held
# instead: an append to the victim's hot topic (RF 1, flushed on every message) waits for the
# victim's capped disk while every request behind it waits in the request queue. Half a request
# a second, too few to move its local p99. The cap sets how long each holds the thread.
HELD_RATE_PER_S = 0.5


@contextlib.contextmanager
def _handlers_starved(ctx: Ctx, s: Scenario) -> Iterator[None]:
    v = s.victims[0]
    node = ctx.state.node(v)
    hot = HOT_TOPIC.format(v=v)
    with (
        faults.starve_request_handlers(ctx.admin, v, 1),
        faults.topic_configs(ctx.admin, [hot], {"flush.messages": "1"}),
        faults.throttle_disk_writes(node.pid, node.log_dirs[0], s.params["write_iops"]) as group,
        AimedLoad(ctx.state.bootstrap, hot, HELD_RATE_PER_S, 1) as load,
        _writes_per_s(group) as writes,
    ):
        yield
    print(
        f"  held: {load.calls} produce calls to {hot}, {load.refused} refused (queue full);"
        f" the victim's disk writes {writes[0]:.1f}/s (cap {s.params['write_iops']}/s)",
        flush=True,
    )


def _io_writes(group: str) -> int:
    with open(f"{group}/blkio.throttle.io_serviced") as f:
        return sum(int(w[2]) for w in (line.split() for line in f) if len(w) == 3 and w[1] == "Write")


@contextlib.contextmanager
def _writes_per_s(group: str) -> Iterator[list[float]]:
    """The cap's cgroup's disk writes a second over the block, appended to the list it yields."""
    out: list[float] = []
    t0 = time.monotonic()
    try:
        yield out
    finally:
        out.append(_io_writes(group) / max(time.monotonic() - t0, 1e-9))


# A slow disk of the victim's own: a flush per append, its writes capped (the brokers share one
# disk here, so a flush per append alone slows all of them alike).
@contextlib.contextmanager
def _slow_disk(ctx: Ctx, s: Scenario) -> Iterator[None]:
    v = s.victims[0]
    node = ctx.state.node(v)
    iops = s.params["write_iops"]
    with faults.slow_disk(ctx.admin, v, node.pid, node.log_dirs[0], iops) as group, _writes_per_s(group) as w:
        yield
    print(f"  slow disk: the victim's disk writes {w[0]:.0f}/s (cap {iops}/s)", flush=True)


def _slow_client(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    v = s.victims[0]
    node = ctx.state.node(v)
    topic = SLOW_TOPIC.format(v=v)
    return faults.SlowClient(
        "127.0.0.1", node.ports.client, topic, client_id=SLOW_CLIENT_ID, stall_ms=s.params["stall_ms"]
    )


class Bursts:
    """Bursts on top of the base load: every ``period_s``, ``rate_per_s`` more Zipf-keyed
    messages for ``burst_s`` (the soak's load: several times the base rate, now and then)."""

    def __init__(
        self, bootstrap: str, topic: str, rate_per_s: float, burst_s: float, period_s: float
    ) -> None:
        self.args = (bootstrap, topic, rate_per_s)
        self.burst_s, self.period_s = burst_s, period_s
        self.bursts = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bursts", daemon=True)

    def __enter__(self) -> Bursts:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.burst_s + 15)

    def _run(self) -> None:
        bootstrap, topic, rate = self.args
        while not self._stop.wait(self.period_s - self.burst_s):
            load = ProducerLoad(bootstrap, topic, rate, KeyDistribution("zipf", 1000, 1.3), acks=1, seed=11)
            load.start()
            self._stop.wait(self.burst_s)
            load.stop()
            self.bursts += 1


def _soak(ctx: Ctx, s: Scenario) -> contextlib.AbstractContextManager[Any]:
    p = s.params
    return Bursts(ctx.state.bootstrap, "fm-zipf", p["burst_rate"], p["burst_s"], p["period_s"])


FAULTS: dict[str, Callable[[Ctx, Scenario], contextlib.AbstractContextManager[Any]]] = {
    "leader_pause": _pause,
    "follower_pause": _follower_pause,
    "safepoint_storm": _safepoints,
    "slow_disk": _slow_disk,
    "cpu_starved": _cpu,
    "handlers_starved": _handlers_starved,
    "slow_client": _slow_client,
    "congested_link": _link,
    "two_slow": _paused_together,
    "all_slow": _paused_together,
    "rolling_restart": _restart,
    "soak": _soak,
}
KINDS = tuple(FAULTS)
BOTH = {"mix": "both", "acks1_rate": 300.0, "acksall_rate": 50.0}

# The scenarios of the fixed matrix (--scenarios), on broker VICTIM at the intensities the
# earlier runs used.
SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "leader_pause_400", "leader_pause", (VICTIM,), {"pause_ms": 400, "period_ms": 1000}, BOTH, 60
        ),
        Scenario(
            "leader_pause_900", "leader_pause", (VICTIM,), {"pause_ms": 900, "period_ms": 1000}, BOTH, 60
        ),
        Scenario("stalled_follower", "follower_pause", (VICTIM,), {"pause_ms": 400}, BOTH, 60),
        Scenario("slow_disk", "slow_disk", (VICTIM,), {"write_iops": 1200}, BOTH, 60),
        Scenario("cpu_starved", "cpu_starved", (VICTIM,), {"busy": 6}, BOTH, 60),
        Scenario("handlers_starved", "handlers_starved", (VICTIM,), {"write_iops": 20}, BOTH, 60),
        Scenario("slow_client", "slow_client", (VICTIM,), {"stall_ms": 600}, BOTH, 60),
        Scenario("all_paused", "all_slow", BROKERS, {"pause_ms": 400, "period_ms": 1000}, BOTH, 60),
        Scenario(
            "soak",
            "soak",
            (),
            {"burst_rate": 900.0, "burst_s": 10.0, "period_s": 60.0},
            BOTH,
            900,
            "no fault; Zipf bursts of 4x",
            quiet="all",
        ),
    )
}


def draw(k: int, kind: str, rng: random.Random, fault_s: float) -> Scenario:
    """Draw ``k``: a victim, the intensities of ``kind`` and the load beside it, at random.

    Loads: acks=1 only (nobody waits on a follower: only the clients see a stalled leader),
    acks=all only, or both, at drawn rates. A follower stall needs acks=all (it is what makes a
    follower's stall anyone's latency); the slow client and the handlers' holder bring their own."""
    victim = rng.choice(BROKERS)
    mix = rng.choice(("acksall", "both") if kind == "follower_pause" else ("acks1", "acksall", "both"))
    load = {
        "mix": mix,
        "acks1_rate": round(rng.uniform(150, 600)),
        "acksall_rate": round(rng.uniform(20, 120)),
    }
    period = rng.choice((700, 1000, 1300, 1500))
    jitter = rng.choice((0.0, 0.0, 0.3, 0.6))
    seed = rng.randrange(1 << 30)
    victims: tuple[int, ...] = (victim,)
    quiet = ""
    params: dict[str, Any]
    if kind in ("leader_pause", "two_slow", "all_slow"):
        share = rng.uniform(0.3, 0.9) if kind == "leader_pause" else rng.uniform(0.3, 0.6)
        params = {"pause_ms": int(period * share), "period_ms": period, "jitter": jitter, "seed": seed}
        if kind == "two_slow":
            victims = tuple(sorted(rng.sample(BROKERS, 2)))
        elif kind == "all_slow":
            victims = BROKERS
    elif kind == "follower_pause":
        params = {"pause_ms": round(rng.uniform(300, 700))}
    elif kind == "safepoint_storm":
        params = {"how": rng.choice(("heap_dump", "full_gc")), "gap_s": round(rng.uniform(0.3, 2.0), 1)}
    elif kind == "slow_disk":
        params = {"write_iops": rng.choice((400, 800, 1200, 1600))}
    elif kind == "cpu_starved":
        params = {"busy": rng.randint(4, 8)}
    elif kind == "handlers_starved":
        params = {"write_iops": rng.randint(15, 25)}
    elif kind == "slow_client":
        params = {"stall_ms": round(rng.uniform(400, 1200))}
    elif kind == "congested_link":
        params = {"share": round(rng.uniform(0.5, 0.9), 2)}
    elif kind == "rolling_restart":
        victims = tuple(rng.sample(BROKERS, len(BROKERS)))
        params = {"gap_s": round(rng.uniform(5, 20))}
        quiet = "remediable"
    else:  # soak
        victims = ()
        params = {"burst_rate": round(rng.uniform(600, 1500)), "burst_s": 10.0, "period_s": 45.0}
        quiet = "all"
    name = f"d{k:02d}-{kind}-" + (
        "b" + "".join(map(str, victims)) if victims and kind != "all_slow" else "all"
    )
    return Scenario(
        name, kind, victims, params, load, fault_s if kind != "soak" else 3 * fault_s, quiet=quiet
    )


def draws(n: int, seed: int, fault_s: float, kinds: tuple[str, ...] = KINDS) -> list[Scenario]:
    """``n`` draws with ``seed``: the kinds in shuffled rounds (every kind once before any twice,
    so 30 draws hold each of the 12 kinds two or three times), each drawn by :func:`draw`."""
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < n:
        rnd = list(kinds)
        rng.shuffle(rnd)
        order += rnd
    return [draw(k, kind, rng, fault_s) for k, kind in enumerate(order[:n])]


# --- the run ----------------------------------------------------------------------------------


@dataclass
class Phases:
    marks: dict[str, dict[str, tuple[float, float]]] = field(default_factory=lambda: defaultdict(dict))
    errors: dict[str, str] = field(default_factory=dict)  # scenario -> why its fault failed

    @contextlib.contextmanager
    def phase(self, scenario: str, name: str) -> Iterator[None]:
        t0 = time.time()
        print(f"{time.strftime('%H:%M:%S')} {scenario}: {name}", flush=True)
        try:
            yield
        finally:
            self.marks[scenario][name] = (t0, time.time())


class TimedSink(FindingSink):
    """Every emitted finding with the wall-clock time it reached the sink."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.emitted: list[tuple[float, R.Finding]] = []
        self.clock = clock

    def emit(self, finding: R.Finding) -> None:
        self.emitted.append((self.clock(), finding))


@dataclass
class Ticker:
    """Runs the service's evaluations in a thread, as ``AnalysisService.run`` paces them, and
    records each one's duration and how old its newest window was when it ran."""

    service: AnalysisService
    ticks: list[tuple[float, float, float | None]] = field(default_factory=list)  # start, s, age s
    # Per evaluation with rows: the newest window's start (ms) and its stage rows then: a window
    # read with fewer rows than a later evaluation read of it was evaluated half-filled.
    newest_rows: list[tuple[int, int]] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Ticker:
        self._thread = threading.Thread(target=self._run, name="analyzer-ticks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(120)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.time()
            try:
                self.service.tick()
            except Exception as e:  # counted and printed; the next tick goes on
                self.errors += 1
                print(f"analyzer tick failed: {e!r}", flush=True)
            rows = self.service.last.broker_stages if self.service.last else ()
            newest = max((r.window_start_ms for r in rows), default=None)
            age = None if newest is None else started - (newest / 1000 + self.service.cfg.window_s)
            self.ticks.append((started, time.time() - started, age))
            if newest is not None:
                self.newest_rows.append((newest, sum(1 for r in rows if r.window_start_ms == newest)))
            self.service.wait_next(self._stop, time.monotonic() - (time.time() - started))


ANALYZER_MODES = {
    "defaults": "the service's own timings (lookback, interval, trigger, watermark, window settle)",
    "e2e": "the live e2e's short timings (lookback 90 windows, interval 1 s, trigger 4 s, watermark 60 s)",
}


def analyzer_config(
    state: ClusterState, root: Path, evaluation: str, window_s: int, mode: str = "defaults"
) -> AnalyzerConfig:
    info_too = {"info": Action.NOTIFY, "warning": Action.NOTIFY, "critical": Action.NOTIFY}
    timings: dict[str, Any] = {}
    if mode == "e2e":
        # As the live e2e ran in the suite (its scenarios are this bench's now): the archive read
        # back wider than the stream's latency plus one evaluation on a loaded machine.
        timings = {"lookback_windows": 90, "interval_s": 1.0, "trigger_s": 4.0, "watermark": "60 seconds"}
    return AnalyzerConfig(
        cluster=CLUSTER,
        kafka=KafkaClientConfig(bootstrap_servers=state.bootstrap),
        window_s=window_s,
        **timings,
        evaluation=evaluation,
        state_dir=root / "analyzer",
        publish_findings=False,
        spark_log=root / "spark.log",
        detectors={"slow_broker": None},
        policy=SeverityPolicyConfig(by_severity=info_too),
        metrics=AnalyzerMetricsConfig(enabled=True, port=0),  # the service's metrics_port says which
    )


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


@dataclass
class Run:
    phases: Phases
    live: list[tuple[float, R.Finding]]
    alerts: list[dict[str, Any]]
    ticks: list[tuple[float, float, float | None]]
    records: list[R.Record]
    window_s: int  # the agents' windows
    newest_rows: list[tuple[int, int]] = field(default_factory=list)  # Ticker.newest_rows
    scenarios: list[Scenario] = field(default_factory=list)  # what ran (a draw is not in the code)
    cluster: str = CLUSTER  # the records' cluster name (bench/remediation_recover.py's draws: "demo")


def save_run(result: Run, path: Path) -> None:
    """The run as one JSON document; records and findings in their wire form (``to_json``)."""
    doc = {
        "window_s": result.window_s,
        "marks": result.phases.marks,
        "errors": result.phases.errors,
        "live": [(t, f.to_json().decode()) for t, f in result.live],
        "alerts": result.alerts,
        "ticks": result.ticks,
        "newest_rows": result.newest_rows,
        "scenarios": [asdict(x) for x in result.scenarios],
        "cluster": result.cluster,
        "records": [r.to_json().decode() for r in result.records],
    }
    path.write_text(json.dumps(doc))


def load_run(path: Path) -> Run:
    doc = json.loads(path.read_text())
    phases = Phases(errors=doc["errors"])
    for scenario, spans in doc["marks"].items():
        phases.marks[scenario] = {name: (a, b) for name, (a, b) in spans.items()}
    live = [(t, R.decode(raw)) for t, raw in doc["live"]]
    return Run(
        phases,
        [(t, f) for t, f in live if isinstance(f, R.Finding)],
        doc["alerts"],
        [tuple(x) for x in doc["ticks"]],
        [R.decode(raw) for raw in doc["records"]],
        int(doc.get("window_s", 2)),  # runs saved before the option had 2 s windows
        [tuple(x) for x in doc.get("newest_rows", [])],  # runs saved before run 24 have none
        [_scenario(x) for x in doc.get("scenarios", [])],  # runs saved before the draws: the code's
        doc.get("cluster", CLUSTER),
    )


def _scenario(d: dict[str, Any]) -> Scenario:
    return Scenario(**{**d, "victims": tuple(d["victims"])})


def smoke_run(scenario: str, window_s: int = DEFAULT_WINDOW_S) -> Run:
    """A run made up here for ``--smoke``: three brokers' Produce windows for 150 s, the leaders'
    ``remote`` at 900 ms while broker 2 is "paused" (40-100 s), no live findings or alerts. It
    exercises the replay, the judging and the table without a cluster; what it judges is not a
    measurement (the live half is this bench's full run; in the suite, the recovery bench's
    smoke and tests/alerts drive it)."""
    from linkwatch.sketch import LatencySketch

    t0 = (time.time() // window_s - 15) * window_s
    phases = Phases()
    phases.marks[scenario] = {
        "before": (t0, t0 + 40),
        "fault": (t0 + 40, t0 + 100),
        "after": (t0 + 100, t0 + 150),
    }
    records: list[R.Record] = []
    for w in range(15):
        ts = int((t0 + w * window_s) * 1000)
        faulty = 4 <= w < 10
        for broker in (1, 2, 3):
            for stage in ("total", "local", "remote", "requestQueue"):
                slow = faulty and broker != 2 and stage in ("total", "remote")
                sk = LatencySketch()
                for i in range(200):
                    sk.add(900.0 if slow and i % 2 else 2.0 + i % 7)
                records.append(
                    R.StageSketch(
                        cluster=CLUSTER,
                        source=f"broker-{broker}",
                        ts_ms=ts + broker,
                        broker=broker,
                        request=R.PRODUCE,
                        stage=stage,
                        window_s=window_s,
                        sketch=sk.to_dict(),
                    )
                )
    return Run(phases, [], [], [], records, window_s)


PROMETHEUS_MODES = {
    "shipped": "the shipped rules, for: and Alertmanager waits, the agents scraped every 2 s and the analyzer every 1 s (config/prometheus.example.yml)",
    "fast": "FAST mode: every for: 10 s, minute ranges 30s/20s/40s, Alertmanager waits 1-2 s, scrape 1 s",
}


def alert_stack(workdir: Path, targets: list[ScrapeTarget], mode: str) -> AlertStack:
    """The Prometheus path: ``shipped`` (what an operator runs) or ``fast`` (:data:`PROMETHEUS_MODES`)."""
    if mode == "fast":
        return AlertStack(workdir, targets, fast=True, scrape_s=1, eval_s=1, for_s=10)
    return AlertStack(workdir, targets, scrape_s=SHIPPED_SCRAPE_S)


def victim_topics(admin: Any, bootstrap: str, victims: set[int]) -> None:
    """Per victim v: ``SLOW_TOPIC`` (one partition led by v, 1.2 MB: more than the slow client's
    receive buffer plus the broker's send buffer, so its stalls hold the broker's send) and
    ``HOT_TOPIC`` (partitions only v holds, for the handlers' holder)."""
    from kafka import KafkaProducer
    from kafka.admin import NewTopic

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    for v in sorted(victims):
        others = [b for b in BROKERS if b != v]
        slow, hot = SLOW_TOPIC.format(v=v), HOT_TOPIC.format(v=v)
        admin.create_topics(
            [
                NewTopic(slow, replica_assignments={0: [v, *others]}),
                NewTopic(hot, replica_assignments={k: [v] for k in range(HOT_PARTITIONS)}),
            ]
        )
        for _ in range(1200):
            producer.send(slow, value=b"z" * 1000, partition=0)
    producer.flush(60)
    producer.close()


class Loads:
    """The producers a scenario runs beside: acks=1 (uniform and Zipf keys) and acks=all, as its
    ``load`` says; replaced between scenarios, so each runs at its own drawn mix and rates."""

    def __init__(self, bootstrap: str, client: str = "kafka-python") -> None:
        self.bootstrap = bootstrap
        self.client = client  # testbed.load.CLIENTS
        self.running: list[ProducerLoad] = []
        self.current: dict[str, Any] | None = None

    def set(self, load: dict[str, Any]) -> None:
        if load == self.current:
            return
        self.stop()
        half = load["acks1_rate"] / 2
        producer = functools.partial(ProducerLoad, self.bootstrap, client=self.client)
        if load["mix"] in ("acks1", "both"):
            self.running += [
                producer("fm-uniform", half, acks=1).start(),
                producer("fm-zipf", half, KeyDistribution("zipf", 1000, 1.3), acks=1, seed=7).start(),
            ]
        if load["mix"] in ("acksall", "both"):
            self.running.append(producer(ACKS_ALL_TOPIC, load["acksall_rate"], acks="all", seed=3).start())
        self.current = dict(load)

    def stop(self) -> None:
        for x in self.running:
            x.stop()
        self.running, self.current = [], None


def run(chosen: list[Scenario], args: argparse.Namespace) -> Run:
    from kafka import KafkaAdminClient

    root = Path(tempfile.mkdtemp(prefix="fault-matrix-"))
    print(f"work dir {root} (Spark's log: {root / 'spark.log'})", flush=True)
    cluster = LocalCluster(
        ClusterSpec(brokers=3, root=root / "kafka", base_port=find_free_base_port(3, start=32000))
    )
    state = cluster.up()
    phases = Phases()
    stops: list[Callable[[], object]] = []
    sink = TimedSink()
    stack: AlertStack | None = None
    ticker: Ticker | None = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="fault-matrix")
        stops.append(admin.close)
        ensure_topic(admin, R.SAMPLES_TOPIC, 3, 1)
        for topic in TOPICS:
            ensure_topic(admin, topic, 6, 3)
        victim_topics(admin, state.bootstrap, {v for s in chosen for v in s.victims} or {VICTIM})
        configs = [
            config_for_node(
                n,
                cluster=CLUSTER,
                request_log={"window_s": args.window_s, "start_at": "end"},
                kafka={
                    "enabled": True,
                    "bootstrap_servers": state.bootstrap,
                    "spool_dir": str(root / f"spool{n.node_id}"),
                },
            )
            for n in state.nodes
        ]
        agents = start_agents_in_process(configs)
        stops += [a.stop for a, _ in agents]
        loads = Loads(state.bootstrap)
        loads.set(BOTH)
        stops.append(loads.stop)
        stops.append(ConsumerLoad(state.bootstrap, "fm-uniform", "fm-group").start().stop)
        # The probe: one partition led by every broker, Poisson probes, its windows on the
        # samples topic and its gauges served (the demo's component, under this run's cluster).
        probe = ProbeComponent(args.window_s, cluster=CLUSTER, instance="fm-probe")
        stops.append(probe.stop)
        probe.start(state)
        cfg = analyzer_config(state, root, args.evaluation, args.window_s, args.analyzer)
        t0 = time.time()
        service = AnalysisService(cfg, sinks=[sink]).start()
        stops.append(service.stop)
        print(f"analyzer started in {time.time() - t0:.0f}s", flush=True)
        targets = agent_targets(
            {c.broker_id: a.metrics_port for (a, _), c in zip(agents, configs, strict=True)}, CLUSTER
        )
        targets.append(
            ScrapeTarget("linkwatch-analyzer", f"127.0.0.1:{service.metrics_port}", {"cluster": CLUSTER})
        )
        targets.append(
            ScrapeTarget("linkwatch-probe", f"127.0.0.1:{probe.metrics_port}", {"cluster": CLUSTER})
        )
        stack = alert_stack(root / "alerts", targets, args.prometheus).start()
        stops.append(stack.stop)
        ticker = Ticker(service).start()
        stops.append(ticker.stop)
        # The JVMs', agents' and stream's first minute is not the cluster's normal.
        time.sleep(args.warmup_s)
        ctx = Ctx(state, admin, cluster)
        for s in chosen:
            print(f"{s.name}: victims {list(s.victims)} params {s.params} load {s.load}", flush=True)
            # A broker just restarted may be missing from the metadata for a few seconds more.
            deadline = time.monotonic() + 30
            while True:
                try:
                    faults.restore_preferred_leaders(
                        admin, [*TOPICS, *(SLOW_TOPIC.format(v=v) for v in s.victims)]
                    )
                    break
                except Exception as e:  # said, and the scenario runs on the leaders there are
                    if time.monotonic() > deadline:
                        print(f"preferred leaders not restored before {s.name}: {e!r}", flush=True)
                        break
                    time.sleep(1)
            loads.set(s.load)
            dropped_before = [a.health.drops() for a, _ in agents]
            with phases.phase(s.name, "before"):
                time.sleep(args.before_s)
            try:
                with phases.phase(s.name, "fault"), s.fault(ctx):
                    time.sleep(s.fault_s)
            except Exception as e:  # one fault that cannot be set up or undone is that row's error
                phases.errors[s.name] = f"{type(e).__name__}: {e}"
                print(f"{s.name}: fault failed: {phases.errors[s.name]}", flush=True)
                faults.revert_all()
            with phases.phase(s.name, "after"):
                time.sleep(args.after_s)
            # What the agents dropped (late lines among them: a window closed before they came).
            dropped = {
                c.broker_id: dict(a.health.drops() - was)
                for (a, _), c, was in zip(agents, configs, dropped_before, strict=True)
            }
            print(f"{s.name}: agents' drops by broker: {dropped}", flush=True)
        for stop in reversed(stops):
            stop()
        stops = []
        alerts = stack.received_all()
        records = read_samples(state.bootstrap)
        return Run(phases, sink.emitted, alerts, ticker.ticks, records, args.window_s, ticker.newest_rows)
    finally:
        faults.revert_all()
        for stop in reversed(stops):
            with contextlib.suppress(Exception):
                stop()
        cluster.down()


# --- the replay -----------------------------------------------------------------------------


def replay(
    records: list[R.Record], spans: list[tuple[float, float]], window_s: int, cluster: str = CLUSTER
) -> tuple[list[tuple[float, R.Finding]], WindowState]:
    """The analyzer's engine over the agents' windows, at every window end within ``spans``:
    what the rules say without the pipeline's delay. Returns the emitted findings (at the
    evaluation's time) and the state (for the effect checks)."""
    state = WindowState(cluster, window_s, horizon_ms=1 << 40, max_records=1 << 30)
    state.add(records)
    sink = TimedSink()
    info_too = SeverityPolicyConfig(
        by_severity={"info": Action.NOTIFY, "warning": Action.NOTIFY, "critical": Action.NOTIFY}
    )
    engine = Engine(load_detectors({"slow_broker": None}), sinks=[sink], policy=info_too.as_policy())
    step = window_s * 1000
    for lo, hi in spans:
        now = int(lo * 1000) // step * step
        while now <= hi * 1000 + step:
            engine.evaluate(state.aggregates(now, now - REPLAY_LOOKBACK_WINDOWS * step), now)
            now += step
    return [(f.ts_ms / 1000, f) for _, f in sink.emitted], state


def explain_draw(result: Run, name: str) -> list[str]:
    """The model's walk over one scenario of a run, a line per window end (what a person reads
    when a draw's verdict surprises them): seconds from the fault's onset, every broker's state
    in that window (``b``lamed, ``h``ealthy, hold ``-``), score, ``A`` active and ``S`` slow;
    the cluster's walk; whether a broker went down, came back or restarted within the grace;
    the evidence each blamed broker carries (``!``: above the line), the Produce and consumer
    Fetch p99s and the unexplained waits. The same engine, windows and settings as the replay."""
    from analyzer import slow_broker as sb

    marks = result.phases.marks.get(name)
    if marks is None:
        raise SystemExit(
            f"--explain: no scenario {name!r} in the run; it holds {', '.join(result.phases.marks)}"
        )
    onset = marks["fault"][0]
    start, end = marks["before"][0], marks["after"][1]
    step = result.window_s * 1000
    state = WindowState(result.cluster, result.window_s, horizon_ms=1 << 40, max_records=1 << 30)
    state.add(result.records)
    cfg = sb.SlowBrokerConfig()
    out = [f"{name}: fault {marks['fault'][1] - onset:.0f} s; window ends from the onset"]
    now, seen = int(start * 1000) // step * step, None
    while now <= end * 1000 + step:
        model = sb.evaluate(state.aggregates(now, now - REPLAY_LOOKBACK_WINDOWS * step), now, cfg)
        now += step
        if not model.readings or model.readings[-1].window_start_ms == seen:
            continue
        r = model.readings[-1]
        seen = r.window_start_ms
        walks = " ".join(
            f"b{b}:{'b' if s.state == 'blamed' else 'h' if s.state == 'healthy' else '-'}{s.score}"
            f"{'A' if s.active else ''}{'S' if s.slow else ''}"
            for b, steps in sorted(model.brokers.items())
            for s in steps[-1:]
        )
        c = model.cluster[-1]
        blamed = {
            b: sorted({f"{x.family}:{x.stage}{'!' if x.slow else ''}" for x in ss})
            for b, ss in sorted(r.blamed().items())
        }
        p99 = " ".join(f"{b}/{q[:4]}={v:.0f}" for (b, q), v in sorted(r.p99_ms.items()))
        out.append(
            f"{r.window_start_ms / 1000 + result.window_s - onset:+6.0f}s {walks} "
            f"cluster:{c.score}{'A' if c.active else ''} changing={model.changing[-1]} "
            f"blamed={blamed} unexplained={dict(r.unexplained)} p99 {p99}"
        )
    return out


# --- judging ----------------------------------------------------------------------------------


@dataclass
class Interval:
    """One finding (or alert) from its appearance to its clearing (None: still on at the end)."""

    rule: str
    subject: str
    start: float
    end: float | None = None
    stages: list[str] = field(default_factory=list)  # in the order they were named
    detail: str = ""  # request type, the named follower or client, the waiting leaders

    def label(self, onset: float) -> str:
        stages = "/".join(self.stages) or "-"
        return f"{self.rule} {self.subject} {stages}{self.detail} @{self.start - onset:+.0f}s"


def _detail(evidence: dict[str, Any]) -> str:
    parts = [f" {evidence['request']}"] if evidence.get("request") else []
    follower = evidence.get("slow_follower", evidence.get("follower"))  # a finding's, an alert's label
    if follower not in (None, ""):
        parts.append(f"follower={follower}")
    if evidence.get("leaders_waiting"):
        parts.append(f"waiting={','.join(map(str, evidence['leaders_waiting']))}")
    if "client_id" in evidence:
        parts.append(f"client={evidence['client_id']}")
    return " ".join(parts)


def finding_intervals(emitted: list[tuple[float, R.Finding]]) -> list[Interval]:
    open_: dict[tuple[str, str], Interval] = {}
    out: list[Interval] = []
    for t, f in sorted(emitted, key=lambda x: x[0]):
        key = (f.rule, f.subject)
        stage = f.evidence.get("stage")
        if f.active:
            iv = open_.get(key)
            if iv is None:
                iv = open_[key] = Interval(f.rule, f.subject, t, detail=_detail(f.evidence))
                out.append(iv)
            if stage and stage not in iv.stages:
                iv.stages.append(str(stage))
        elif key in open_:
            open_.pop(key).end = t
    return out


def _alert_key(alertname: str, labels: dict[str, str]) -> tuple[str, str]:
    """(rule, subject) of an alert: an analyzer finding's own for ``LinkwatchFinding``, the client
    for a slow-client finding (``subject`` ``client:<id>``), else the broker it names, else the
    cluster."""
    if alertname == "LinkwatchFinding":
        return f"{alertname}:{labels.get('rule', '?')}", labels.get("subject", "?")
    if labels.get("subject", "").startswith("client:"):
        return alertname, labels["subject"]
    if labels.get("broker"):
        return alertname, f"broker:{labels['broker']}"
    return alertname, f"cluster:{labels.get('cluster', '?')}"


def alert_intervals(alerts: list[dict[str, Any]]) -> list[Interval]:
    """One interval per (rule, subject) while any of its alerts fires, as the receiver hands
    them to the findings pipeline (``alerts.hooks.findings.FiringAlerts``): a finding whose stage
    changed has its old stage's alert resolved and the new one firing, in one notification,
    firing handed on first; the finding clears with its last alert."""
    open_: dict[tuple[str, str], Interval] = {}
    firing: dict[tuple[str, str], set[str]] = defaultdict(set)
    out: list[Interval] = []
    for a in sorted(alerts, key=lambda x: (x["ts"], x["status"] != "firing")):
        labels, notes = a.get("labels", {}), a.get("annotations", {})
        key = _alert_key(a["alertname"], labels)
        stage = notes.get("stage") or labels.get("stage")
        fingerprint = a.get("fingerprint") or json.dumps(labels, sort_keys=True)
        if a["status"] == "firing":
            firing[key].add(fingerprint)
            iv = open_.get(key)
            if iv is None:
                iv = open_[key] = Interval(*key, a["ts"], detail=_detail(labels))
                out.append(iv)
            if stage and stage not in iv.stages:
                iv.stages.append(stage)
        else:
            firing[key].discard(fingerprint)
            if key in open_ and not firing[key]:
                open_.pop(key).end = a["ts"]
    return out


@dataclass
class PathResult:
    verdict: str
    fire_s: float | None
    clear_s: float | None
    found: list[str]
    others: list[str]
    flaps: int = 0  # the right subject cleared and was found again while the fault was on
    remediable_right: int = 0  # findings a remediation may act on, naming a faulty broker
    remediable_wrong: int = 0  # ... naming a broker the fault did not touch (or none was faulty)


def _eligible(path: str, i: Interval) -> bool:
    """A finding a remediation may act on. Not a leader waiting in ``remote`` on another broker
    it names as the follower (the default policy only notifies of it), nor one whose follower
    is unknown (stage remote, no follower: the policy's foreign stage)."""
    if i.rule not in ELIGIBLE[path]:
        return False
    follower = next((x.split("=", 1)[1] for x in i.detail.split() if x.startswith("follower=")), None)
    if i.stages and i.stages[0] == "remote":
        return follower is not None and i.subject == f"broker:{follower}"
    return True


# A finding that escalates (degraded_broker to slow_broker) clears one rule and raises the other
# in one evaluation; on the Prometheus path the two alerts' notifications may lie one
# Alertmanager group_interval (5 s) and a scrape and an evaluation apart. A gap up to this is
# the same finding going on, not a clear.
ESCALATION_GAP_S = 10.0


def _covered(intervals: list[Interval], lo: float, hi: float, slack_s: float = ESCALATION_GAP_S) -> bool:
    """Some interval is open at every moment of ``[lo, hi]``, gaps up to ``slack_s`` aside."""
    t = lo
    for i in sorted(intervals, key=lambda x: x.start):
        if i.start > t + slack_s:
            return False
        t = max(t, i.end if i.end is not None else float("inf"))
        if t >= hi:
            return True
    return t >= hi


def judge(
    path: str, s: Scenario, intervals: list[Interval], span: dict[str, tuple[float, float]]
) -> PathResult:
    """Findings that appeared during the scenario's phases, against what is right for it."""
    expects = s.expects(path)
    start, onset, fault_end, end = span["before"][0], span["fault"][0], span["fault"][1], span["after"][1]
    mine = [i for i in intervals if start <= i.start <= end and i.rule in SLOW_NODE[path]]
    subject_ok = [i for i in mine if any(e.matches(i.rule, i.subject) for e in expects) and i.start >= onset]
    good = [
        i for i in subject_ok if any(e.matches(i.rule, i.subject) and e.stage_ok(i.stages) for e in expects)
    ]
    faulty = (
        {f"broker:{v}" for v in s.victims}
        if s.kind not in ("soak", "slow_client", "rolling_restart")
        else set()
    )
    eligible = [i for i in mine if _eligible(path, i)]
    eligible_wrong = [i for i in eligible if i.subject not in faulty]
    others = [i for i in mine if i not in subject_ok]
    if s.quiet == "all":
        verdict = "false alarm" if mine else "right"
    elif s.quiet == "remediable" or good:
        verdict = "false alarm" if eligible_wrong else "right"
    elif subject_ok:
        verdict = "wrong stage"
    elif eligible_wrong or [i for i in mine if i.start >= onset]:
        verdict = "wrong subject"
    else:
        verdict = "missed"
    hits = good or subject_ok
    fire = min((i.start for i in hits), default=None)
    flaps = 0
    if fire is not None:
        # The subject this scenario found first (not the one with the run's earliest finding: a
        # subject found in an earlier draw too, the cluster's, would be judged from this fire
        # on by intervals that began later), and all of its slow-node intervals (any rule: an
        # escalation from degraded to slow is one finding going on).
        first = min(hits, key=lambda i: i.start).subject
        own = [i for i in intervals if i.rule in SLOW_NODE[path] and i.subject == first]
        flaps = 0 if _covered(own, fire, fault_end) else 1
    ends = [i.end for i in hits]
    clear = None if not hits or None in ends else max(e for e in ends if e is not None) - fault_end
    return PathResult(
        verdict,
        None if fire is None else fire - onset,
        clear,
        [i.label(onset) for i in subject_ok],
        [i.label(onset) for i in others],
        flaps,
        len([i for i in eligible if i.subject in faulty]),
        len(eligible_wrong),
    )


def effect(
    state: WindowState, s: Scenario, span: dict[str, tuple[float, float]], window_s: int
) -> tuple[str, bool | None]:
    """Whether the fault took effect: the stage(s) it should move, median over the fault windows of
    each broker's p99 (for waiters, of the requests that waited at all, ``nonzero_p99_ms``: most
    of the load may be acks=1, which never waits), at least twice the other side's and by the
    model's own floor for "out of line" (10 ms; 50 ms for waits) — or the clients' view, the
    probe's p99 to the victim, twice its peers' and 50 ms above. A fault that moves nothing by
    that much is no slow broker by any definition the model uses; such draws are counted apart."""
    e = s.effect()
    if not s.victims or (e is None and s.kind not in ("two_slow",)):
        return "no effect to check", None
    if e is None:
        probe_line, probe_took = _probe_effect(state, s, span, window_s)
        return probe_line + ("" if probe_took else " -- fault did NOT take effect"), probe_took
    victim = s.victims[0]
    onset, fault_end = span["fault"]
    before = span["before"]

    def medians(lo: float, hi: float) -> dict[tuple[str, int], float]:
        rows: list[StageWindow] = state.aggregates(
            int(hi * 1000), int(lo * 1000) + window_s * 1000
        ).broker_stages
        per: dict[tuple[str, int], list[float]] = defaultdict(list)
        for r in rows:
            if (
                r.request == e.request
                and r.stage in e.stages
                and r.p99_ms is not None
                and r.window_start_ms >= lo * 1000
            ):
                waited = r.nonzero_p99_ms if r.nonzero_p99_ms is not None else 0.0
                per[(r.stage, r.broker)].append(waited if e.mode == "waiters" else r.p99_ms)
        return {k: statistics.median(v) for k, v in per.items()}

    during = medians(onset, fault_end)
    was = medians(*before)
    parts, took = [], False
    for stage in e.stages:
        mine = {b: v for (st, b), v in during.items() if st == stage}
        if e.mode == "all":
            pairs = {b: (v, was.get((stage, b), 0.0)) for b, v in mine.items()}
            ok = len(pairs) == len(BROKERS) and all(v >= 2 * w and v >= w + 10 for v, w in pairs.values())
            text = ", ".join(f"b{b} {v:.0f} (before {w:.0f})" for b, (v, w) in sorted(pairs.items()))
        else:
            peers = [v for b, v in mine.items() if b != victim]
            own = mine.get(victim)
            if own is None or not peers:
                parts.append(f"{e.request} {stage}: no rows for the victim")
                took = took or (own is None and bool(peers))  # a broker that logs nothing is stopped
                continue
            peer = statistics.median(peers)
            hi_, lo_ = (peer, own) if e.mode == "waiters" else (own, peer)
            floor = 50.0 if e.mode == "waiters" else 10.0
            ok = hi_ >= 2 * lo_ and hi_ >= lo_ + floor
            if not ok:  # against the victim's own before the fault (the peers may move too)
                own_was = was.get((stage, victim), 0.0)
                peer_was = statistics.median([was.get((stage, b), 0.0) for b in mine if b != victim] or [0.0])
                ok = (
                    (own >= 2 * own_was and own >= own_was + floor)
                    if e.mode != "waiters"
                    else (peer >= 2 * peer_was and peer >= peer_was + floor)
                )
            who = "waiting peers/victim" if e.mode == "waiters" else "victim/peers"
            text = (
                f"{who} {hi_:.1f}/{lo_:.1f} ({', '.join(f'b{b} {v:.1f}' for b, v in sorted(mine.items()))})"
            )
        took |= ok
        parts.append(f"{e.request} {stage} {text} ms")
    line = "; ".join(parts) + (
        " (median p99 of the requests that waited)" if e.mode == "waiters" else " (median p99)"
    )
    if e.mode != "all":
        probe_line, probe_took = _probe_effect(state, s, span, window_s)
        line, took = f"{line}; {probe_line}", took or probe_took
    return (line if took else line + " -- fault did NOT take effect"), took


def _probe_effect(
    state: WindowState, s: Scenario, span: dict[str, tuple[float, float]], window_s: int
) -> tuple[str, bool]:
    """The clients' view: each broker's probe p99 (produce or end to end, the larger), median over
    the fault windows; the victims' against the others'."""
    onset, fault_end = span["fault"]
    per: dict[int, list[float]] = defaultdict(list)
    for p in state.aggregates(int(fault_end * 1000), int(onset * 1000) + window_s * 1000).probes:
        if p.window_start_ms >= onset * 1000 and p.decided:
            per[p.broker].append(max(p.produce_p99_ms or 0.0, p.end_to_end_p99_ms or 0.0))
    med = {b: statistics.median(v) for b, v in per.items() if v}
    others = [v for b, v in med.items() if b not in s.victims]
    victims = [v for b, v in med.items() if b in s.victims]
    if not others or not victims:
        return "probe: no rows", False
    peer = statistics.median(others)
    took = min(victims) >= 2 * peer and min(victims) >= peer + 50
    return f"probe p99 victims {', '.join(f'{v:.0f}' for v in victims)} / others {peer:.0f} ms", took


# --- the table ----------------------------------------------------------------------------------


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"


def table(
    chosen: list[Scenario], result: Run, replayed: list[tuple[float, R.Finding]], state: WindowState
) -> list[dict[str, Any]]:
    paths = {
        "analyzer": finding_intervals(result.live),
        "replay": finding_intervals(replayed),
        "prometheus": alert_intervals(result.alerts),
    }
    rows = []
    for s in chosen:
        span = result.phases.marks[s.name]
        text, took = effect(state, s, span, result.window_s)
        row: dict[str, Any] = {
            "scenario": s.name,
            "kind": s.kind,
            "victims": list(s.victims),
            "params": s.params,
            "load": s.load,
            "note": s.note,
            "fault_error": result.phases.errors.get(s.name),
            "effect": text,
            "took_effect": took,
            "expected_analyzer": [str(e) for e in s.expects("analyzer")] or [f"nothing ({s.quiet or 'any'})"],
            "expected_prometheus": [str(e) for e in s.expects("prometheus")]
            or [f"nothing ({s.quiet or 'any'})"],
        }
        for path, intervals in paths.items():
            kind = "analyzer" if path == "replay" else path
            row[path] = asdict(judge(kind, s, intervals, span))
        # Also on the Prometheus path, never judged: the safety nets and the probe's alerts.
        lo, hi = span["before"][0], span["after"][1]
        row["other_alerts"] = sorted(
            {
                f"{i.rule} {i.subject}"
                for i in paths["prometheus"]
                if lo <= i.start <= hi and i.rule not in SLOW_NODE["prometheus"]
            }
        )
        rows.append(row)
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    print(
        f"\n{'scenario':26s} {'path':10s} {'verdict':13s} {'fire s':>6s} {'clear s':>7s}  found (rule subject stage @onset+s)"
    )
    for r in rows:
        print(f"{r['scenario']:26s} params {r['params']} load {r['load']}")
        print(f"{'':26s} expected: analyzer {r['expected_analyzer']}; prometheus {r['expected_prometheus']}")
        if r["note"]:
            print(f"{'':26s} ({r['note']})")
        if r["fault_error"]:
            print(f"{'':26s} FAULT FAILED: {r['fault_error']}")
        print(f"{'':26s} effect: {r['effect']}")
        for path in ("analyzer", "replay", "prometheus"):
            p = r[path]
            flap = " FLAP" if p["flaps"] else ""
            print(
                f"{'':26s} {path:10s} {p['verdict']:13s} {_s(p['fire_s']):>6s} {_s(p['clear_s']):>7s}  {p['found'] or '-'}{flap}"
            )
            if p["others"]:
                print(f"{'':55s} others: {p['others']}")
        if r["other_alerts"]:
            print(f"{'':26s} safety nets / probe alerts: {r['other_alerts']}")


def _pct(a: int, b: int) -> str:
    return "-" if b == 0 else f"{100 * a / b:.0f}% ({a}/{b})"


def _q(values: list[float], q: float) -> str:
    if not values:
        return "-"
    v = sorted(values)
    return f"{v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]:.0f}"


def summarize(rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per path, per kind and overall: recall (the right subject found), precision of remediable
    findings, right stage, flaps, time to fire (median, p90) and to clear (median, max). Rows
    whose fault failed to start are left out (said in the table)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for path in ("analyzer", "replay", "prometheus"):
        groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rows:
            if r["fault_error"]:
                continue
            groups[r["kind"]].append(r)
            groups["all"].append(r)
        per: dict[str, dict[str, Any]] = {}
        for kind, rs in groups.items():
            ps = [r[path] for r in rs]
            expect_all = [
                (r, p)
                for r, p in zip(rs, ps, strict=True)
                if r["expected_analyzer"][0].split()[0] != "nothing"
            ]
            # Recall over the draws whose fault took effect (or that have no check); the ones that
            # moved nothing are counted apart (no_effect) and in recall_all.
            expecting = [p for r, p in expect_all if r["took_effect"] is not False]
            recalled = [p for p in expecting if p["verdict"] in ("right", "wrong stage")]
            recalled_all = [p for _, p in expect_all if p["verdict"] in ("right", "wrong stage")]
            right = sum(p["remediable_right"] for p in ps)
            wrong = sum(p["remediable_wrong"] for p in ps)
            quiet = [
                p for r, p in zip(rs, ps, strict=True) if r["expected_analyzer"][0].split()[0] == "nothing"
            ]
            per[kind] = {
                "draws": len(rs),
                "recall": _pct(len(recalled), len(expecting)),
                "recall_all": _pct(len(recalled_all), len(expect_all)),
                "no_effect": len(expect_all) - len(expecting),
                "right_stage": _pct(sum(p["verdict"] == "right" for p in recalled), len(recalled)),
                "remediable_precision": _pct(right, right + wrong),
                "quiet_right": _pct(sum(p["verdict"] == "right" for p in quiet), len(quiet)),
                "flaps": sum(p["flaps"] for p in ps),
                "fire_median_s": _q([p["fire_s"] for p in recalled if p["fire_s"] is not None], 0.5),
                "fire_p90_s": _q([p["fire_s"] for p in recalled if p["fire_s"] is not None], 0.9),
                "clear_median_s": _q([p["clear_s"] for p in recalled if p["clear_s"] is not None], 0.5),
                "clear_max_s": _q([p["clear_s"] for p in recalled if p["clear_s"] is not None], 1.0),
                "never_cleared": sum(1 for p in recalled if p["clear_s"] is None),
            }
        out[path] = per
    return out


def print_summary(summary: dict[str, dict[str, dict[str, Any]]]) -> None:
    cols = (
        "draws",
        "recall_all",
        "no_effect",
        "recall",
        "right_stage",
        "remediable_precision",
        "quiet_right",
        "flaps",
        "fire_median_s",
        "fire_p90_s",
        "clear_median_s",
        "clear_max_s",
        "never_cleared",
    )
    for path, per in summary.items():
        print(f"\n{path}:")
        print(f"  {'kind':18s} " + " ".join(f"{c:>14s}" for c in cols))
        for kind in sorted(per, key=lambda k: (k == "all", k)):
            print(f"  {kind:18s} " + " ".join(f"{per[kind][c]!s:>14s}" for c in cols))


def print_half_filled(newest_rows: list[tuple[int, int]]) -> None:
    """How often the live analyzer's first evaluation of a window read it with fewer stage rows
    than a later evaluation of the same window (a window evaluated before all had arrived)."""
    first: dict[int, int] = {}
    most: dict[int, int] = {}
    for start, n in newest_rows:
        first.setdefault(start, n)
        most[start] = max(most.get(start, 0), n)
    if not first:
        return
    short = sorted(start for start, n in first.items() if n < most[start])
    print(
        f"windows first evaluated half-filled (fewer stage rows than a later evaluation read): "
        f"{len(short)} of {len(first)}"
    )


def print_ticks(ticks: list[tuple[float, float, float | None]]) -> None:
    """The live analyzer's evaluations that had rows (before the archive holds any, a tick
    takes milliseconds and says nothing about the pipeline's speed)."""
    timed = [(d, a) for _, d, a in ticks if a is not None]
    if not timed:
        print(f"analyzer: {len(ticks)} evaluations, none with rows")
        return
    took = sorted(d for d, _ in timed)
    ages = sorted(a for _, a in timed)
    # The first evaluation that holds a window: how long after its end the pipeline (grace,
    # poll, samples topic, the window stream's micro-batch) delivered it.
    first: dict[int, float] = {}
    for started, _, age in ticks:
        if age is not None:
            first.setdefault(round(started - age), age)
    fresh = sorted(first.values())
    print(
        f"analyzer evaluations with rows: {len(timed)} of {len(ticks)}; duration median "
        f"{statistics.median(took):.1f}s max {took[-1]:.1f}s; newest window's age at the evaluation's "
        f"start median {statistics.median(ages):.0f}s max {ages[-1]:.0f}s; a window's end to the first "
        f"evaluation that holds it: median {statistics.median(fresh):.1f}s, "
        f"p90 {fresh[int(0.9 * (len(fresh) - 1))]:.1f}s over {len(fresh)} windows"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated: {', '.join(SCENARIOS)}"
    )
    ap.add_argument("--draws", type=int, default=0, help="N random draws instead of the fixed scenarios")
    ap.add_argument(
        "--seed", type=int, default=1, help="the draws' seed (the same seed draws the same faults)"
    )
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"the kinds drawn from: {', '.join(KINDS)}")
    ap.add_argument(
        "--warmup-s", type=float, default=60.0, help="load and pipeline running before the first scenario"
    )
    ap.add_argument("--before-s", type=float, default=40.0)
    ap.add_argument("--fault-s", type=float, default=60.0, help="each fault's length (a soak draw runs 3x)")
    ap.add_argument("--after-s", type=float, default=50.0)
    ap.add_argument(
        "--soak-s", type=float, default=900.0, help="the fixed soak's fault phase (no fault, bursts)"
    )
    ap.add_argument(
        "--evaluation",
        choices=("reread", "incremental"),
        default=AnalyzerConfig().evaluation,
        help="the live analyzer's evaluation (default: the service's default)",
    )
    ap.add_argument(
        "--prometheus",
        choices=tuple(PROMETHEUS_MODES),
        default="shipped",
        help="the Prometheus path's rules and timings (default: the shipped ones)",
    )
    ap.add_argument(
        "--window-s",
        type=int,
        default=DEFAULT_WINDOW_S,
        help="the agents' and the analyzer's window (default: 10, theirs)",
    )
    ap.add_argument(
        "--analyzer",
        choices=tuple(ANALYZER_MODES),
        default="defaults",
        help="the live analyzer's timings (default: the service's own)",
    )
    ap.add_argument("--json", type=Path, help="also write the table and the summary here")
    ap.add_argument(
        "--save-run",
        type=Path,
        help="write the run (scenarios, phases, findings, alerts, the agents' records) here",
    )
    ap.add_argument(
        "--from-run",
        type=Path,
        help="judge a saved run again instead of running (the replay uses the model as it is now)",
    )
    ap.add_argument(
        "--explain",
        metavar="SCENARIO",
        help="with --from-run (or --smoke): print the model's walk over that scenario, window by window, and stop",
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="seconds, no cluster: judge a run made up here (see smoke_run) through the replay and the table",
    )
    args = ap.parse_args()
    if args.draws:
        kinds = tuple(k for k in args.kinds.split(",") if k)
        unknown = [k for k in kinds if k not in FAULTS]
        if unknown:
            ap.error(f"unknown kinds {unknown}; known: {', '.join(KINDS)}")
        chosen = draws(args.draws, args.seed, args.fault_s, kinds)
        print(
            f"draws: {args.draws} with seed {args.seed} over {len(set(s.kind for s in chosen))} kinds",
            flush=True,
        )
    else:
        unknown = [n for n in args.scenarios.split(",") if n and n not in SCENARIOS]
        if unknown:
            ap.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
        chosen = [
            dataclasses.replace(SCENARIOS[n], fault_s=args.soak_s if n == "soak" else args.fault_s)
            for n in args.scenarios.split(",")
            if n
        ]
    print(f"start: {load_line()}", flush=True)
    print(f"analyzer evaluation: {args.evaluation}", flush=True)
    if args.smoke:
        chosen = chosen[:1]
        result = smoke_run(chosen[0].name)
    elif args.from_run:
        result = load_run(args.from_run)
        # A saved run holds the scenarios it ran: judge those.
        chosen = result.scenarios or [s for s in chosen if s.name in result.phases.marks]
    else:
        print(
            f"windows: {args.window_s} s; analyzer timings: {args.analyzer}: {ANALYZER_MODES[args.analyzer]}",
            flush=True,
        )
        print(f"Prometheus path: {args.prometheus}: {PROMETHEUS_MODES[args.prometheus]}", flush=True)
        result = run(chosen, args)
        result.scenarios = chosen
        if args.save_run:
            save_run(result, args.save_run)
    if args.explain:
        print("\n".join(explain_draw(result, args.explain)))
        return
    spans = [(m["before"][0], m["after"][1]) for m in result.phases.marks.values()]
    replayed, state = replay(result.records, spans, result.window_s, result.cluster)
    rows = table([s for s in chosen if s.name in result.phases.marks], result, replayed, state)
    print_table(rows)
    summary = summarize(rows)
    print_summary(summary)
    print_ticks(result.ticks)
    print_half_filled(result.newest_rows)
    print(f"end: {load_line()}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"rows": rows, "summary": summary, "ticks": result.ticks, "argv": sys.argv[1:]}, indent=2
            )
        )


if __name__ == "__main__":
    main()
