"""``linkwatch demo``: the main job on an embedded local cluster (see testbed.demo)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from testbed import demo


def app(
    duration: float | None = typer.Option(
        None,
        help="Seconds of load; the fault starts a third of the way in and covers a third of the run "
        "(a little less with --remediate, so leadership is back before the end). Default 300 with the analyzer "
        "(its Spark job needs about 2 minutes before its first findings on a small machine), else 90.",
    ),
    rate: float = typer.Option(
        600.0,
        help="Messages per second produced (acks=all with the analyzer). On a 2-core machine that "
        "also runs Spark, 1500 put every broker's p99 over the 300 ms line before the fault.",
    ),
    keys: str = typer.Option("zipf:1.2", help="Key distribution: none, uniform or zipf:<exponent>."),
    slow_broker: int = typer.Option(2, help="Broker whose JVM is paused in a duty cycle midway."),
    dir: Path = typer.Option(
        Path("/tmp/linkwatch-demo"), "--dir", help="Cluster directory (removed at the end)."
    ),
    analyzer: bool = typer.Option(
        True,
        help="Run the Spark analyzer (local[2]) on the agents' samples and show its findings "
        "appear when the fault starts and clear after it ends (--no-analyzer: a 90 s run without Spark).",
    ),
    remediate: bool = typer.Option(
        True,
        help="With the analyzer: act on its slow-broker finding on the demo's own cluster (demote the "
        "broker's leadership, restore it after the fault; audited under --dir) and show an acks=1 "
        "producer's p99 recover. --no-remediate: findings are only shown.",
    ),
) -> None:
    """Start 3 brokers, run skewed load, inject a slow broker midway, clean up by itself."""
    console = Console()
    opts = demo.DemoOptions(
        duration_s=duration if duration is not None else (300.0 if analyzer else 90.0),
        rate_per_s=rate,
        keys=keys,
        slow_broker=slow_broker,
        root=dir,
        components=demo.default_components(
            dir.parent / f"{dir.name}-stack",
            analyzer=analyzer,
            remediate_topics=["demo.orders", "demo.serve"] if analyzer and remediate else None,
        ),
        serve_topic="demo.serve" if analyzer and remediate else None,
        fault_ends_at=0.55 if analyzer and remediate else 2 / 3,
        # The analyzer finds the paused broker from the leaders waiting on it as follower,
        # which needs acks=all (docs/analyzer.md, Rule 5).
        acks="all" if analyzer else 1,
    )
    summary = demo.run(opts, console)
    console.print(
        f"[bold]done[/] sent {summary['sent']} acked {summary['acked']} errors {summary['errors']} "
        f"consumed {summary['consumed']}"
    )
    for line in summary["notes"]:  # type: ignore[union-attr]
        console.print(line)
    for phase, p99 in summary.get("serve_p99_ms_by_phase", {}).items():  # type: ignore[union-attr]
        console.print(
            f"  acks=1 producer ack p99 {phase:>6} the fault (median of the refreshes): {p99:.0f} ms"
        )
    # Every record by when it was sent (one sent in a pause belongs to the fault).
    for phase, by_broker in summary["ack_ms_by_phase"].items():  # type: ignore[union-attr]
        cells = "  ".join(
            f"broker {b}: mean {q['mean']:.0f} p99 {q['p99']:.0f} ms" for b, q in sorted(by_broker.items())
        )
        console.print(f"  records sent {phase:>6} the fault, ack latency: {cells}")
