"""The main job on an embedded default: a local 3-broker cluster, skewed load, a slow broker.

Timeline for ``duration_s`` seconds: start the cluster, produce Zipf-keyed load and consume it,
show live per-broker throughput and produce latency, pause one broker's JVM in a duty cycle
for the middle third, then remove the fault. Components plug in as :class:`DemoComponent`
objects with start/lines/stop, one module each: :mod:`.agents` (an agent per broker),
:mod:`.lag` (the lag collector), :mod:`.probe` (the probe), :mod:`.alerting` (the alert stack),
:mod:`.analyzer` (the Spark analyzer). Everything started is stopped on the way out, on Ctrl-C too.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from linkwatch.sketch import LatencySketch
from testbed import faults
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port
from testbed.load import (
    ConsumerLoad,
    KeyDistribution,
    ProducerLoad,
    ensure_own_topics,
    ensure_topic,
    p99_ms,
    partition_leaders,
)


class DemoComponent(Protocol):
    """Something the demo runs beside the cluster (an agent, the analyzer, alerting).

    ``start`` may block briefly; ``lines`` returns what to show now (cheap, never raises);
    ``stop`` releases everything and must be safe to call after a failed ``start``.
    """

    name: str

    def start(self, cluster: ClusterState) -> None: ...
    def lines(self) -> list[str]: ...
    def stop(self) -> None: ...


@dataclass
class DemoOptions:
    duration_s: float = 90.0
    rate_per_s: float = 600.0  # 1500 saturated a 2-core machine running Spark beside the cluster
    keys: str = "zipf:1.2"
    partitions: int = 12
    slow_broker: int = 2
    pause_ms: int = 400
    period_ms: int = 1000
    root: Path = Path("/tmp/linkwatch-demo")
    refresh_s: float = 2.0
    topic: str = "demo.orders"
    acks: int | str = 1  # "all" lets a stalled follower show in the leaders' request times
    components: list[Callable[[], DemoComponent]] = field(default_factory=list)
    # A second, acks=1 producer on its own topic: its clients wait on the leader only, so its
    # p99 shows what demoting the slow broker's leadership gives back (None: not run).
    serve_topic: str | None = None
    serve_rate_per_s: float = 300.0
    # The fault starts a third of the way in and ends at this fraction of the run (earlier when
    # the demo remediates: the finding must clear and leadership come back before the end).
    fault_ends_at: float = 2 / 3

    def __post_init__(self) -> None:
        if not 1 / 3 < self.fault_ends_at <= 1:
            raise ValueError(f"fault_ends_at={self.fault_ends_at}: must be in (1/3, 1]")


def default_components(
    workdir: Path, analyzer: bool = False, remediate_topics: list[str] | None = None
) -> list[Callable[[], DemoComponent]]:
    """Everything the demo shows besides the cluster and the load, in start order.

    The agents start first so the alerting stack (Prometheus, Alertmanager, the receiver) knows
    the ports to scrape; ``workdir`` holds the stack's files. ``analyzer`` adds the Spark
    analyzer reading the agents' samples (its findings appear and clear in the display);
    Spark's log goes to ``workdir/spark.log``, not the screen;
    ``remediate_topics`` lets it demote the slow broker's leadership of those topics and
    restore it after the fault (:mod:`.analyzer`).
    """
    from testbed.demo.agents import AgentsComponent, scrape_targets
    from testbed.demo.alerting import AlertingDemoComponent
    from testbed.demo.lag import LagComponent
    from testbed.demo.probe import ProbeComponent

    agents, lag = AgentsComponent(), LagComponent()
    # The probe: the clients' view of each leader, which a leader paused between reads hides
    # from its own request timings (its windows feed the analyzer, its gauges the probe alerts).
    probe = ProbeComponent(agents.window_s)
    comps: list[Callable[[], DemoComponent]] = [lambda: agents, lambda: lag, lambda: probe]
    found = None
    if analyzer:
        from testbed.demo.analyzer import AnalyzerComponent, demo_config

        found = AnalyzerComponent(
            demo_config(agents.window_s, spark_log=workdir / "spark.log"), remediate_topics=remediate_topics
        )
        comps.append(lambda: found)
    # The alert stack last: it scrapes what the others serve, the analyzer's findings included.
    alerting = AlertingDemoComponent(
        workdir / "alerts", lambda _cluster: scrape_targets(agents, lag, analyzer=found, probe=probe)
    )
    comps.append(lambda: alerting)
    return comps


def run(opts: DemoOptions, console: Console | None = None) -> dict[str, object]:
    """Run the demo to the end; return a summary (used by the test and printed by the CLI)."""
    console = console or Console()
    if opts.duration_s < 15:
        raise ValueError(f"duration_s={opts.duration_s}: the demo needs at least 15 s")
    # Shaped like production (as every testbed cluster): no topic is created on first use;
    # linkwatch's own are created as an operator creates them (`linkwatch topics --create`,
    # docs/quickstart.md), the demo's below.
    cluster = LocalCluster(
        ClusterSpec(brokers=3, root=opts.root, base_port=find_free_base_port(3, start=19000))
    )
    if cluster.state() is not None:
        cluster.down()  # a demo directory left by a killed earlier demo is ours to clear
    started: list[DemoComponent] = []
    producer = consumer = pause = quitter = serve = None
    summary: dict[str, object] = {}
    try:
        t0 = time.monotonic()
        state = cluster.up()
        console.print(f"[bold]cluster[/] 3 brokers up in {time.monotonic() - t0:.1f}s at {state.bootstrap}")
        from linkwatch.kafka_client import admin_client

        admin = admin_client(bootstrap_servers=state.bootstrap, client_id="linkwatch-demo")
        created = ensure_own_topics(state.bootstrap)
        console.print(f"[bold]topics[/] created {', '.join(created)} (the cluster creates none on use)")
        ensure_topic(admin, opts.topic, opts.partitions, 3)
        if opts.serve_topic:
            ensure_topic(admin, opts.serve_topic, 6, 3)
        for make in opts.components:
            comp = make()
            started.append(comp)
            comp.start(state)
        keys = KeyDistribution.parse(opts.keys)
        consumer = ConsumerLoad(state.bootstrap, opts.topic, "demo-consumer").start()
        if not consumer.assigned.wait(60):
            why = f" (its last error: {consumer.error})" if consumer.error else ""
            console.print(f"[yellow]the demo consumer has not joined its group after 60 s{why}; going on[/]")
        producer = ProducerLoad(state.bootstrap, opts.topic, opts.rate_per_s, keys, acks=opts.acks).start()
        if opts.serve_topic:
            serve = ProducerLoad(
                state.bootstrap,
                opts.serve_topic,
                opts.serve_rate_per_s,
                KeyDistribution("uniform", 1000),
                seed=3,
            ).start()
        serve_p99: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        # A second group that stops a quarter of the way in: the lag collector must call it STOP.
        quitter = ConsumerLoad(state.bootstrap, opts.topic, "demo-stops-early").start()
        victim = state.node(opts.slow_broker)
        fault_at, clear_at = opts.duration_s / 3, opts.fault_ends_at * opts.duration_s
        # The clients' and brokers' warm-up (connections, JIT, first batches) inflates the first
        # seconds' latencies: the "before" figures are the records sent in its second half.
        warmup_s = max(opts.refresh_s * 2, fault_at / 2)
        paused_at = resumed_at = math.inf  # when the pause really started and ended (loop time)
        pause_cycles = 0  # the pauses it made (a busy interpreter delays the pausing thread)
        begin = time.monotonic()
        acks = _AcksByPhase(begin)
        # Each phase's records from one duty cycle after it began (the client's backlog).
        settle_s = opts.period_ms / 1000
        # A live-updating table on a terminal; one printed frame per refresh in logs and CI.
        live_ctx = (
            Live(console=console, refresh_per_second=2) if console.is_terminal else contextlib.nullcontext()
        )
        with live_ctx as live:
            while (elapsed := time.monotonic() - begin) < opts.duration_s:
                if quitter is not None and elapsed >= opts.duration_s / 4:
                    quitter.stop()
                    quitter = None
                    console.print(
                        f"[bold]t={elapsed:.0f}s[/] consumer group demo-stops-early stops consuming"
                    )
                if pause is None and fault_at <= elapsed < clear_at:
                    pause = faults.PauseDutyCycle(victim.pid, opts.pause_ms, opts.period_ms).start()
                    paused_at = elapsed
                    console.print(
                        f"[bold red]t={elapsed:.0f}s fault:[/] pausing broker {victim.node_id}'s JVM "
                        f"{opts.pause_ms} ms of every {opts.period_ms} ms"
                    )
                if pause is not None and elapsed >= clear_at:
                    pause.stop()
                    pause_cycles, pause = pause.cycles, None
                    resumed_at = elapsed
                    console.print(
                        f"[bold green]t={elapsed:.0f}s fault removed:[/] broker {victim.node_id} runs freely"
                    )
                phase = "before" if elapsed < fault_at else "during" if elapsed < clear_at else "after"
                leaders = partition_leaders(admin, opts.topic)
                table = _broker_table(producer, consumer, leaders, opts.refresh_s * 2)
                spans = {
                    "before": (warmup_s, paused_at),
                    "during": (paused_at + settle_s, resumed_at),
                    "after": (resumed_at + settle_s, math.inf),
                }
                acks.add_new(producer, leaders, spans)
                # Everything starts at once (brokers, clients, Spark's JVM) on a small machine: the
                # first seconds can be slow on every broker, and a cluster-wide finding then is true.
                shown = (
                    "warm-up (everything starting: a cluster-wide slowdown alert now is true)"
                    if elapsed <= warmup_s
                    else phase
                )
                status = Text(
                    f"t={elapsed:5.1f}s/{opts.duration_s:.0f}s  phase: {shown}  "
                    + (
                        f"broker {victim.node_id} PAUSED {opts.pause_ms}/{opts.period_ms} ms"
                        if pause
                        else "no fault"
                    )
                )
                extra = [Text(line) for comp in started for line in _safe_lines(comp)]
                if serve is not None and opts.serve_topic:
                    line, p99 = _serve_line(serve, partition_leaders(admin, opts.serve_topic), victim.node_id)
                    if p99 is not None and elapsed > warmup_s:
                        serve_p99[phase].append(p99)
                    extra.insert(0, Text(line))
                frame = Group(status, table, *extra)
                if live is not None:
                    live.update(frame)
                else:
                    console.print(frame)
                time.sleep(opts.refresh_s)
        notes = [line for comp in started if hasattr(comp, "summary") for line in _safe_summary(comp)]
        summary = {
            "notes": notes,
            "sent": producer.stats.sent,
            "acked": producer.stats.acked,
            "errors": producer.stats.errors,
            "consumed": consumer.consumed,
            "slow_broker": opts.slow_broker,
            "ack_ms_by_phase": acks.summary(),
            "fault_s": min(resumed_at, opts.duration_s) - paused_at if paused_at < math.inf else 0.0,
            "pause_cycles": pause.cycles if pause is not None else pause_cycles,
            "serve_p99_ms_by_phase": {ph: statistics.median(v) for ph, v in serve_p99.items() if v},
        }
        admin.close()
    finally:
        if pause is not None:
            pause.stop()
        faults.revert_all()
        for obj in (producer, consumer, quitter, serve):
            if obj is not None:
                obj.stop()
        for comp in reversed(started):
            with contextlib.suppress(Exception):
                comp.stop()
        stopped = cluster.down()
        console.print(f"[bold]cleanup[/] stopped {len(stopped)} broker JVM(s), removed {opts.root}")
    return summary


def _safe_summary(comp: DemoComponent) -> list[str]:
    try:
        return list(comp.summary())  # type: ignore[attr-defined]
    except Exception as e:
        return [f"{comp.name}: no summary ({type(e).__name__}: {e})"]


def _safe_lines(comp: DemoComponent) -> list[str]:
    try:
        return comp.lines()
    except Exception as e:  # a component's display must never end the demo
        return [f"{comp.name}: {type(e).__name__}: {e}"]


def _serve_line(
    serve: ProducerLoad, leaders: dict[int, int], victim: int, window_s: float = 4.0
) -> tuple[str, float | None]:
    """The acks=1 producer's ack p99 over the last ``window_s`` and what the victim leads."""
    p99 = p99_ms(latency for latency, _ in serve.stats.recent(window_s))
    led = sorted(p for p, b in leaders.items() if b == victim)
    where = (
        f"broker {victim} leads partitions {','.join(map(str, led))}"
        if led
        else f"broker {victim} leads none"
    )
    shown = f"{p99:.0f} ms" if p99 is not None else "n/a"
    return f"acks=1 producer on {serve.topic}: ack p99 {shown} (last {window_s:g} s); {where}", p99


def _broker_table(
    producer: ProducerLoad, consumer: ConsumerLoad, leaders: dict[int, int], window_s: float
) -> Table:
    """Per-broker produce throughput and client-side ack latency over the last ``window_s``."""
    by_broker: dict[int, list[float]] = {}
    for latency, partition in producer.stats.recent(window_s):
        if partition in leaders:
            by_broker.setdefault(leaders[partition], []).append(latency)
    table = Table(title=f"per-broker produce (acks={producer.acks}), last few seconds")
    for col in ("broker", "leads partitions", "acked msg/s", "ack p50 ms", "ack p99 ms"):
        table.add_column(col, justify="right")
    for broker in sorted(set(leaders.values())):
        lat = by_broker.get(broker, [])
        led = sorted(p for p, b in leaders.items() if b == broker)
        p50 = statistics.median(lat) * 1000 if lat else 0.0
        p99 = p99_ms(lat) or 0.0
        table.add_row(
            str(broker), ",".join(map(str, led)), f"{len(lat) / window_s:.0f}", f"{p50:.1f}", f"{p99:.1f}"
        )
    return table


class _AcksByPhase:
    """Every acked record's latency, by the phase it was *sent* in and the broker leading its
    partition: one sent in a pause and acked after it belongs to the fault. Spans are seconds
    from the run's start; records sent outside every span (warm-up, the settling after each
    change) count nowhere. Bounded: one log-bucket sketch per phase and broker."""

    def __init__(self, begin: float) -> None:
        self.begin = begin
        self.last_acked_at = -math.inf
        self.sketches: dict[str, dict[int, LatencySketch]] = {}

    def add_new(
        self, producer: ProducerLoad, leaders: dict[int, int], spans: dict[str, tuple[float, float]]
    ) -> None:
        """Take the acks since the last call (the producer keeps its recent ones only: call
        this at every refresh)."""
        newest = self.last_acked_at
        for acked_at, latency, partition in list(producer.stats.recent_latencies):
            if acked_at <= self.last_acked_at:
                continue
            newest = max(newest, acked_at)
            sent = acked_at - latency - self.begin
            phase = next((ph for ph, (lo, hi) in spans.items() if lo <= sent < hi), None)
            if phase is not None and partition in leaders:
                self.sketches.setdefault(phase, {}).setdefault(leaders[partition], LatencySketch()).add(
                    latency * 1000
                )
        self.last_acked_at = newest

    def summary(self) -> dict[str, dict[int, dict[str, float]]]:
        """``{phase: {broker: {"n", "mean", "p50", "p90", "p99"}}}``, latencies in ms."""
        return {
            phase: {
                b: {"n": sk.count, "mean": sk.sum / max(sk.count, 1)}
                | {f"p{round(q * 100)}": sk.quantile(q) or 0.0 for q in (0.5, 0.9, 0.99)}
                for b, sk in by_b.items()
            }
            for phase, by_b in self.sketches.items()
        }
