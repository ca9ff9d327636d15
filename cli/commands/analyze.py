"""``linkwatch analyze``: stream samples, run the detectors, publish findings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from analyzer.registry import load_detectors
from analyzer.service import AnalyzerConfig, run_continuously
from cli.commands import ConfigOnlyOpt, check_cluster_config, stop_on_signals
from linkwatch import reach
from linkwatch.config import load_config
from linkwatch.kafka_client import security_kwargs

CONFIG_HELP = "YAML config (`linkwatch init DIR` writes a sample, DIR/analyzer.yaml)."

# `linkwatch analyze -c F` runs the analysis; `linkwatch analyze check -c F` checks what F names.
app = typer.Typer(invoke_without_command=True)


@app.callback()
def run(
    ctx: typer.Context,
    config: Path = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    bootstrap: str = typer.Option(None, help="Kafka bootstrap servers (overrides the config)."),
    cluster: str = typer.Option(None, help="Cluster name the samples carry (overrides the config)."),
) -> None:
    """Run the streaming analysis until Ctrl-C; findings go to linkwatch.findings, /metrics and here."""
    if ctx.invoked_subcommand is not None:
        return
    cfg = load_config(config, AnalyzerConfig, env_prefix="LINKWATCH_ANALYZER_")
    updates: dict[str, Any] = {"cluster": cluster} if cluster else {}
    if bootstrap:
        updates["kafka"] = cfg.kafka.model_copy(update={"bootstrap_servers": bootstrap})
    cfg = cfg.model_copy(update=updates)
    # Everything the config alone can refuse is refused before any wait for the cluster.
    load_detectors(cfg.detectors)
    # SIGTERM (systemctl stop) ends the run like Ctrl-C: the streaming query stops cleanly.
    stop = stop_on_signals()
    # Spark starts once the cluster answers: until then the cause is said once and retried.
    key = "--bootstrap" if bootstrap else "kafka.bootstrap_servers"
    kafka = cfg.kafka
    if reach.connect(
        lambda: True,
        kafka.servers,
        reach.KafkaReach("analyze"),
        stop,
        key=key,
        client_options=security_kwargs(kafka),
    ):
        run_continuously(cfg, stop)


@app.command()
def check(
    config: Path = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    config_only: bool = ConfigOnlyOpt,
) -> None:
    """Validate the config, then try what it names: one ✓/✗ line each; exit 1 if any ✗."""
    from linkwatch import preflight

    cfg = load_config(config, AnalyzerConfig, env_prefix="LINKWATCH_ANALYZER_")
    load_detectors(cfg.detectors)
    check_cluster_config(
        f"{config or '<defaults>'}: valid (cluster {cfg.cluster})",
        cfg.kafka,
        {"samples_topic": cfg.samples_topic, "findings_topic": cfg.findings_topic},
        more=(lambda: preflight.writable_dir(cfg.state_dir, "state_dir"),),
        config_only=config_only,
    )
