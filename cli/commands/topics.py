"""``linkwatch topics -c FILE [--create]``: linkwatch's own topics on the cluster a config names."""

from __future__ import annotations

from pathlib import Path

import typer

from linkwatch.config import load_config
from linkwatch.kafka_client import explained_connect_errors, kafka_python_kwargs, known_brokers
from linkwatch.reach import check_kafka
from linkwatch.topics import TopicsConfig, apply, own_topics, plan


def app(
    config: Path = typer.Option(
        ...,
        "--config",
        "-c",
        help="Any component's config (agent, analyzer, lag, probe, remediation): its kafka: section "
        "and the topic names it sets are used.",
    ),
    create: bool = typer.Option(
        False, "--create", help="Create the missing topics (without it: only say what would be done)."
    ),
) -> None:
    """List linkwatch's topics (samples, findings) on the cluster with their recommended settings;
    create the missing ones with --create. A topic that exists is never changed."""
    from linkwatch.kafka_client import admin_client

    cfg = load_config(config, TopicsConfig, env_prefix="LINKWATCH_")
    check_kafka(cfg.kafka, "kafka.bootstrap_servers")
    with explained_connect_errors(cfg.kafka):
        admin = admin_client(**kafka_python_kwargs(cfg.kafka, "topics"))
    try:
        states = plan(admin, own_topics(cfg.samples_topic, cfg.findings_topic))
        for state in states:
            typer.echo(state.line())
        missing = [s.spec.name for s in states if not s.exists]
        if not missing:
            return
        if not create:
            typer.echo(f"dry run: would create {', '.join(missing)} (run again with --create)")
            raise typer.Exit(1)
        brokers = len(known_brokers(admin))
        for name in apply(admin, states, brokers):
            typer.echo(f"created {name}")
    finally:
        admin.close()
