"""``linkwatch lag``: run the consumer-lag collector, or one pass of it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import typer

from cli.commands import ConfigOnlyOpt, ShowOpt, check_cluster_config, run_service
from lag.collector import PassResult
from lag.outputs import StatusChanges
from lag.runner import LagConfig, LagService, format_statuses
from linkwatch.config import load_config
from linkwatch.reach import check_kafka, kafka_errors
from linkwatch.records import Finding

app = typer.Typer(no_args_is_help=True)

ConfigOpt = typer.Option(
    ..., "--config", "-c", help="YAML config (`linkwatch init DIR` writes a sample, DIR/lag.yaml)."
)


@app.command()
def run(
    config: Path = ConfigOpt,
    verbose: bool = typer.Option(
        False,
        "--print",
        help="Print each group's status at the first pass, then every status change (with the lag "
        "and the reason), pass errors and the findings sent.",
    ),
) -> None:
    """Evaluate every interval; serve /metrics; publish samples and findings until stopped."""
    cfg = load_config(config, LagConfig, env_prefix="LINKWATCH_LAG_")
    changes = StatusChanges()

    def on_pass(result: PassResult, sent: list[Finding]) -> None:
        for line in changes.lines(result, sent, time.strftime("%H:%M:%S")):
            typer.echo(line)

    run_service(
        lambda registry: LagService(cfg, registry=registry),
        cfg.metrics,
        cfg.kafka,
        "lag",
        lambda service, stop, reach: service.run(stop, on_pass if verbose else None, reach),
    )


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
    check_kafka(cfg.kafka, "kafka.bootstrap_servers")
    with kafka_errors(cfg.kafka.bootstrap_servers, "kafka.bootstrap_servers"):
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
def check(config: Path = ConfigOpt, config_only: bool = ConfigOnlyOpt, show: bool = ShowOpt) -> None:
    """Validate the config, then try what it names: one ✓/✗ line each; exit 1 if any ✗."""
    cfg = load_config(config, LagConfig, env_prefix="LINKWATCH_LAG_")
    published = (
        ("publish.samples_topic", cfg.publish.samples_topic, cfg.publish.samples),
        ("publish.findings_topic", cfg.publish.findings_topic, cfg.publish.findings),
    )
    check_cluster_config(
        f"{config}: valid (cluster {cfg.cluster})",
        cfg.kafka,
        {key: topic for key, topic, used in published if used},
        config_only=config_only,
        show=cfg if show else None,
    )
