"""``linkwatch cluster up|down|status``."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from testbed.cluster import DEFAULT_BASE_PORT, DEFAULT_ROOT, ClusterSpec, LocalCluster

app = typer.Typer(no_args_is_help=True)
console = Console(width=max(160, shutil.get_terminal_size().columns))

DirOpt = typer.Option(DEFAULT_ROOT, "--dir", help="Cluster directory (data, logs, state).")


@app.command()
def up(
    brokers: int = typer.Option(3, help="Number of combined broker+controller nodes (1 or 3)."),
    base_port: int = typer.Option(
        DEFAULT_BASE_PORT, help="Node i listens on base+10i (+1 controller, +2 Jolokia)."
    ),
    heap_mb: int = typer.Option(512, help="Heap per broker JVM (MB, at most 512)."),
    dir: Path = DirOpt,
) -> None:
    """Start the cluster and wait until every broker answers metadata."""
    started = time.monotonic()
    state = LocalCluster(ClusterSpec(brokers=brokers, base_port=base_port, heap_mb=heap_mb, root=dir)).up()
    console.print(f"{len(state.nodes)} brokers up in {time.monotonic() - started:.1f}s")
    console.print(f"bootstrap: {state.bootstrap}")


@app.command()
def down(
    dir: Path = DirOpt,
    keep_data: bool = typer.Option(False, help="Keep data and logs (only stop the JVMs)."),
) -> None:
    """Stop every broker (no JVM is left behind) and remove the cluster directory."""
    stopped = LocalCluster(ClusterSpec(root=dir)).down(keep_data=keep_data)
    console.print(f"stopped {len(stopped)} broker(s)" if stopped else "no broker was running")


@app.command()
def status(dir: Path = DirOpt) -> None:
    """Show brokers, ports, pids and log paths."""
    state = LocalCluster(ClusterSpec(root=dir)).state()
    if state is None:
        console.print(f"no cluster in {dir}")
        raise typer.Exit(1)
    table = Table(title=f"cluster {state.cluster_id} (Kafka {state.kafka_version})")
    for col in ("broker", "rack", "pid", "state", "client", "controller", "jolokia", "request log"):
        table.add_column(col)
    for n in state.nodes:
        table.add_row(
            str(n.node_id),
            n.rack,
            str(n.pid),
            "running" if n.alive() else "DEAD",
            str(n.ports.client),
            str(n.ports.controller),
            n.jolokia_url,
            str(n.request_log),
        )
    console.print(table)
    console.print(f"bootstrap: {state.bootstrap}")
    if not all(n.alive() for n in state.nodes):
        raise typer.Exit(1)


@app.command()
def fetch() -> None:
    """Resolve the Kafka broker jars and the Jolokia agent from Maven Central into the cache."""
    from testbed import jars

    runtime = jars.resolve()
    console.print(f"Kafka {runtime.version} jars in {runtime.lib_dir}")
