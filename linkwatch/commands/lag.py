"""``linkwatch lag``: run the consumer-lag collector, or one pass of it."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import typer

from lag.runner import LagConfig, LagService, format_statuses
from linkwatch.commands import run_service
from linkwatch.config import load_config

app = typer.Typer(no_args_is_help=True)

ConfigOpt = typer.Option(..., "--config", "-c", help="YAML config (see config/lag.sample.yaml).")


@app.command()
def run(config: Path = ConfigOpt) -> None:
    """Evaluate every interval; serve /metrics; publish samples and findings until stopped."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_config(config, LagConfig, env_prefix="LINKWATCH_LAG_")
    service = LagService(cfg)
    run_service(service, cfg.metrics, service.run)


@app.command()
def once(
    config: Path = ConfigOpt,
    passes: int = typer.Option(1, min=1, max=100, help="Passes to run (statuses need several)."),
    every_s: float = typer.Option(1.0, min=0.0, help="Pause between passes."),
    publish: bool = typer.Option(False, help="Also publish samples and findings (default: print only)."),
) -> None:
    """Run a few passes and print each group's status, lag and reason."""
    cfg = load_config(config, LagConfig, env_prefix="LINKWATCH_LAG_")
    if not publish:
        cfg = cfg.model_copy(
            update={"publish": cfg.publish.model_copy(update={"samples": False, "findings": False})}
        )
    service = LagService(cfg)
    try:
        for i in range(passes):
            result, _ = service.step()
            typer.echo(
                f"-- pass {i + 1}: {len(result.groups)} groups, {result.admin_calls} admin calls, "
                f"{result.duration_s:.2f}s"
            )
            typer.echo(format_statuses(result))
            if i + 1 < passes:
                threading.Event().wait(every_s)
    finally:
        service.close()


@app.command()
def check(config: Path = ConfigOpt) -> None:
    """Validate the config file and print it with defaults filled in."""
    cfg = load_config(config, LagConfig, env_prefix="LINKWATCH_LAG_")
    typer.echo(cfg.model_dump_json(indent=2))
