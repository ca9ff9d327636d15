"""``linkwatch spark up|down|status``: a local Spark standalone cluster to submit the analyzer to."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

# The standalone cluster is the testbed's (linkwatch[testbed]); `package` needs only the
# analyzer's install, so the testbed is imported by the commands that use it, defaults included.

app = typer.Typer(no_args_is_help=True)
console = Console(width=max(160, shutil.get_terminal_size().columns))

DirOpt = typer.Option(
    None,
    "--dir",
    help="Cluster directory (state, logs, work dirs; default $LINKWATCH_SPARK_DIR or /tmp/linkwatch-spark).",
    show_default=False,
)


def _root(dir: Path | None) -> Path:
    from testbed.spark import DEFAULT_ROOT

    return dir or DEFAULT_ROOT


@app.command()
def up(
    workers: int = typer.Option(2, help="Number of workers (1 to 4)."),
    cores: int = typer.Option(1, help="Cores each worker offers to executors."),
    memory_mb: int = typer.Option(1024, help="Memory each worker offers to executors (MB)."),
    base_port: int | None = typer.Option(
        None,
        help="Master on base (+1 web UI); worker i on base+10i (+1 web UI). Default 17070.",
        show_default=False,
    ),
    dir: Path | None = DirOpt,
) -> None:
    """Start a master and the workers on loopback; return once every worker is registered."""
    from testbed.spark import DEFAULT_BASE_PORT, SparkClusterSpec, SparkStandalone

    started = time.monotonic()
    spec = SparkClusterSpec(
        root=_root(dir),
        base_port=base_port or DEFAULT_BASE_PORT,
        workers=workers,
        cores_per_worker=cores,
        memory_mb_per_worker=memory_mb,
    )
    state = SparkStandalone(spec).up()
    console.print(
        f"Spark {state.spark_version}: master and {len(state.workers)} worker(s) up in "
        f"{time.monotonic() - started:.1f}s"
    )
    console.print(f"master: {state.master_url}  (web UI {state.master_ui})")
    console.print(f"analyzer config: spark_master: {state.master_url}")


@app.command()
def package(
    out: Path = typer.Argument(Path("linkwatch-executor-env.tar.gz"), help="The archive to write (.tar.gz)."),
) -> None:
    """Pack linkwatch and its dependencies (not Spark's own) for a cluster's executors, and print
    the spark-submit options that ship them (--archives, spark.executorEnv.PYTHONPATH)."""
    from spark_metrics.executor_env import pack

    packed = pack(out)
    size_mb = packed.path.stat().st_size / 2**20
    # Plain lines, never wrapped to the terminal: the options are meant to be copied.
    typer.echo(
        f"{packed.path}: {packed.files} files, {size_mb:.1f} MB; linkwatch with {', '.join(packed.distributions)}"
    )
    typer.echo("spark-submit options: " + " ".join(packed.submit_args()))


@app.command()
def down(
    dir: Path | None = DirOpt,
    keep_logs: bool = typer.Option(False, help="Keep the directory and its logs (only stop the daemons)."),
) -> None:
    """Stop the workers, their executors and the master (none is left) and remove the directory."""
    from testbed.spark import SparkClusterSpec, SparkStandalone

    stopped = SparkStandalone(SparkClusterSpec(root=_root(dir))).down(keep_logs=keep_logs)
    console.print(f"stopped {len(stopped)} Spark daemon(s)" if stopped else "no Spark daemon was running")


@app.command()
def status(dir: Path | None = DirOpt) -> None:
    """Show the daemons, their pids and logs, and what the master says of each worker."""
    from testbed.spark import SparkClusterSpec, SparkStandalone, alive_worker_ports, master_json

    state = SparkStandalone(SparkClusterSpec(root=_root(dir))).state()
    if state is None:
        console.print(f"no Spark cluster in {_root(dir)}")
        raise typer.Exit(1)
    view = master_json(state.master.ui_port)
    registered = {int(w["port"]): w for w in (view or {}).get("workers", [])}
    alive_ports = alive_worker_ports(view)
    table = Table(title=f"Spark {state.spark_version} standalone, master {state.master_url}")
    for col in (
        "daemon",
        "pid",
        "process",
        "registered",
        "cores used",
        "memory used",
        "port",
        "web UI",
        "log",
    ):
        table.add_column(col)
    for d in state.daemons:
        w = registered.get(d.port)
        if d.name == "master":
            reg = (view or {}).get("status", "no answer")
        else:
            reg = "ALIVE" if d.port in alive_ports else (w or {}).get("state", "not registered")
        table.add_row(
            d.name,
            str(d.pid),
            "running" if d.alive() else "DEAD",
            reg,
            f"{w['coresused']}/{w['cores']}" if w else "",
            f"{w['memoryused']}/{w['memory']} MB" if w else "",
            str(d.port),
            f"http://127.0.0.1:{d.ui_port}",
            d.log,
        )
    console.print(table)
    apps = (view or {}).get("activeapps", [])
    console.print(f"running applications: {', '.join(a.get('name', '?') for a in apps) or 'none'}")
    healthy = all(d.alive() for d in state.daemons) and {w.port for w in state.workers} <= alive_ports
    if not healthy:
        raise typer.Exit(1)
