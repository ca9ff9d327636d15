"""``linkwatch probe``: run the probe (one partition led by every broker), or a few windows of it."""

from __future__ import annotations

import threading
from pathlib import Path

import typer

from cli.commands import ConfigOnlyOpt, ShowOpt, check_cluster_config, run_service
from linkwatch.config import load_config
from linkwatch.reach import check_kafka, kafka_errors
from probe.config import ProbeConfig
from probe.service import ProbeService, format_window

app = typer.Typer(no_args_is_help=True)

ConfigOpt = typer.Option(
    ..., "--config", "-c", help="YAML config (`linkwatch init DIR` writes a sample, DIR/probe.yaml)."
)


@app.command()
def run(
    config: Path = ConfigOpt,
    verbose: bool = typer.Option(False, "--print", help="Print every window per broker."),
) -> None:
    """Probe every broker until stopped; serve /metrics; publish ProbeSample records."""
    cfg = load_config(config, ProbeConfig, env_prefix="LINKWATCH_PROBE_")
    on_window = (lambda start, ws: typer.echo(format_window(start, ws))) if verbose else None
    run_service(
        lambda registry: ProbeService(cfg, registry=registry),
        cfg.metrics,
        cfg.kafka,
        "probe",
        lambda service, stop, _reach: service.run(stop, on_window),
    )


@app.command()
def once(
    config: Path = ConfigOpt,
    windows: int = typer.Option(1, min=1, max=100, help="Windows to run before exiting."),
    publish: bool = typer.Option(False, help="Also publish ProbeSample records (default: print only)."),
) -> None:
    """Probe for a few windows and print each broker's latency and availability."""
    cfg = load_config(config, ProbeConfig, env_prefix="LINKWATCH_PROBE_")
    if not publish:
        cfg = cfg.model_copy(update={"publish_samples": False})
    check_kafka(cfg.kafka, "kafka.bootstrap_servers")
    with kafka_errors(cfg.kafka.bootstrap_servers, "kafka.bootstrap_servers"):
        service = ProbeService(cfg)
    stop = threading.Event()
    seen = [0]

    def on_window(start: int, ws: dict) -> None:
        typer.echo(format_window(start, ws))
        seen[0] += 1
        if seen[0] >= windows:
            stop.set()

    try:
        service.run(stop, on_window)
    finally:
        service.close()


@app.command()
def check(config: Path = ConfigOpt, config_only: bool = ConfigOnlyOpt, show: bool = ShowOpt) -> None:
    """Validate the config, then try what it names: one ✓/✗ line each; exit 1 if any ✗."""
    cfg = load_config(config, ProbeConfig, env_prefix="LINKWATCH_PROBE_")
    topics = {"topic.name": cfg.topic.name}
    if cfg.publish_samples:
        topics["samples_topic"] = cfg.samples_topic
    check_cluster_config(
        f"{config}: valid (cluster {cfg.cluster})",
        cfg.kafka,
        topics,
        creates=("topic.name",) if cfg.topic.manage else (),
        config_only=config_only,
        show=cfg if show else None,
    )
