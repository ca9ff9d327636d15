"""``linkwatch analyze``: stream samples, run the detectors, publish findings."""

from __future__ import annotations

from pathlib import Path

import typer

from analyzer.service import AnalyzerConfig, run_continuously
from linkwatch.config import load_config


def app(
    config: Path = typer.Option(
        None, "--config", "-c", help="YAML config (see config/analyzer.sample.yaml)."
    ),
    bootstrap: str = typer.Option(None, help="Kafka bootstrap servers (overrides the config)."),
    cluster: str = typer.Option(None, help="Cluster name the samples carry (overrides the config)."),
) -> None:
    """Run the streaming analysis until Ctrl-C; findings go to linkwatch.findings, /metrics and here."""
    cfg = load_config(config, AnalyzerConfig, env_prefix="LINKWATCH_ANALYZER_")
    updates = {k: v for k, v in (("bootstrap", bootstrap), ("cluster", cluster)) if v}
    run_continuously(cfg.model_copy(update=updates))
