"""``linkwatch fleet``: publish a synthetic fleet's agent records to a samples topic."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import typer

from linkwatch.records import SAMPLES_TOPIC
from testbed.fleet import CAPTURE_PROFILE, Capture, Fleet, FleetSpec, parse_fault, publish


def app(
    bootstrap: str = typer.Option(
        ..., help="host:port[,host:port] of the cluster holding the samples topic."
    ),
    brokers: int = typer.Option(100, help="Brokers in the fleet (ids 1..N)."),
    topic: str = typer.Option(SAMPLES_TOPIC, help="The samples topic (the analyzer's samples_topic)."),
    cluster: str = typer.Option("fleet", help="The records' cluster name (the analyzer's cluster)."),
    window_s: int = typer.Option(10, help="Window length in seconds (the agents' and the analyzer's)."),
    seed: int = typer.Option(1, help="Seed: the same seed gives the same fleet and the same records."),
    racks: int = typer.Option(0, help="Racks (0: from the fleet's size, 3 to 50)."),
    idle_fraction: float = typer.Option(0.02, help="Share of brokers that lead nothing."),
    leader_skew: float = typer.Option(0.8, help="Lognormal sigma of the brokers' leadership weights."),
    traffic: float = typer.Option(1.0, help="Multiplier of the capture's request rates."),
    latency_scale: float = typer.Option(1.0, help="Multiplier of the capture's stage times."),
    capture: Path = typer.Option(
        CAPTURE_PROFILE, help="A kafka-request.log capture (or a profile) the requests are drawn from."
    ),
    fault: list[str] = typer.Option(
        [], help="KIND:BROKER[:EXTRA_MS], KIND one of queue, local, follower (repeatable)."
    ),
    fault_at: float = typer.Option(60.0, help="Seconds after start when faults begin (at a window start)."),
    fault_for: float = typer.Option(0.0, help="Seconds the faults last (0: to the end)."),
    duration: float = typer.Option(0.0, help="Seconds to run (0: until Ctrl-C)."),
) -> None:
    """Every window, each broker's stage sketches and slow-request exemplars, shaped as its agent
    would publish them, with latencies drawn from a real request-log capture; prints one line
    per window published."""
    spec = FleetSpec(
        brokers=brokers,
        cluster=cluster,
        window_s=window_s,
        seed=seed,
        racks=racks,
        idle_fraction=idle_fraction,
        leader_skew=leader_skew,
        traffic=traffic,
        latency_scale=latency_scale,
    )
    window_ms = window_s * 1000
    now_ms = int(time.time() * 1000)
    onset = -(-(now_ms + int(fault_at * 1000)) // window_ms) * window_ms
    end = onset + int(fault_for * 1000) if fault_for > 0 else None
    fleet = Fleet(spec, Capture.load(capture), tuple(parse_fault(f, onset, end) for f in fault))
    racks_n = spec.rack_count
    idle = int((fleet.layout.weight == 0).sum())
    print(
        f"fleet {brokers} brokers in {racks_n} racks ({idle} idle), busiest broker {fleet.busiest()}, "
        f"window {window_s}s, seed {seed}, to {topic}",
        flush=True,
    )
    for f in fleet.faults:
        print(
            f"fleet fault {f.kind}:{f.broker} extra_ms {f.extra_ms:g} from {f.start_ms} to {f.end_ms}",
            flush=True,
        )
    _require_topic(bootstrap, topic)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    deadline = time.monotonic() + duration if duration > 0 else None

    def should_stop() -> bool:
        return stop.is_set() or (deadline is not None and time.monotonic() >= deadline)

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: stop after closing the producer
        publish(
            fleet, bootstrap, topic, should_stop=should_stop, on_window=lambda s: print(s.line(), flush=True)
        )


def _require_topic(bootstrap: str, topic: str) -> None:
    """One line, exit 2, when the cluster does not answer or has no ``topic`` (as ``linkwatch
    load`` checks): a producer would otherwise wait a minute for the topic's metadata and fail
    without naming it (clusters with ``auto.create.topics.enable=false``, the testbed's too)."""
    from linkwatch.errors import SetupError
    from linkwatch.kafka_client import admin_client, kafka_python_kwargs
    from linkwatch.reach import check_bootstrap, kafka_errors

    check_bootstrap(bootstrap, key="--bootstrap")
    with kafka_errors(bootstrap, key="--bootstrap"):
        admin = admin_client(**kafka_python_kwargs(bootstrap, "fleet"))
        try:
            listed = admin.list_topics()
        finally:
            admin.close()
    if topic not in listed:
        raise SetupError(
            f"topic {topic} does not exist at {bootstrap}: create it first "
            "(`linkwatch topics --create -c CONFIG`, CONFIG naming this cluster)"
        )
