"""``linkwatch consume``: print, forward or store a topic through the async-fetch consumer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from cli.commands import stop_on_signals
from consumer.async_fetch import AsyncFetchConsumer, ConsumerConfig, partitions_of
from consumer.outputs import ForwardOutput, Output, PrintOutput, SqliteOutput, consume
from consumer.sink import SqliteSink
from linkwatch.config import load_config
from linkwatch.errors import ConfigError
from linkwatch.metrics_server import MetricsServer
from linkwatch.reach import check_kafka, kafka_errors

ConfigOpt = typer.Option(None, "--config", help="YAML file with a ConsumerConfig (env LINKWATCH_CONSUMER_*).")
SqliteOpt = typer.Option(None, "--to-sqlite", help="Store records exactly once in this SQLite file.")


def app(
    topic: str = typer.Argument(..., help="Topic to consume."),
    bootstrap: str = typer.Option(None, "--bootstrap", help="Brokers (overrides the config file)."),
    group: str = typer.Option(
        None, "--group", help="Consumer group (subscribe); without it all partitions are assigned."
    ),
    config: Path = ConfigOpt,
    to_sqlite: Path = SqliteOpt,
    forward: str = typer.Option(None, "--forward", help="Forward records to this topic (at-least-once)."),
    max_records: int = typer.Option(None, "--max-records", help="Stop after this many records."),
    idle_exit_s: float = typer.Option(
        None, "--idle-exit", help="Stop after this many seconds without records."
    ),
    process_ms: float = typer.Option(0.0, "--process-ms", help="Simulated work per record (ms)."),
    metrics_port: int = typer.Option(
        None, "--metrics-port", help="Serve Prometheus metrics on 127.0.0.1:PORT."
    ),
) -> None:
    """Consume TOPIC with background fetching, processed-offset commits and client timings."""
    if to_sqlite and forward:
        raise ConfigError("consume", ["--to-sqlite and --forward: choose one output"])
    cfg = load_config(config, ConsumerConfig, env_prefix="LINKWATCH_CONSUMER_")
    updates: dict[str, Any] = {"group_id": group} if group else {}
    if bootstrap:
        updates["kafka"] = cfg.kafka.model_copy(update={"bootstrap_servers": bootstrap})
    cfg = cfg.model_copy(update=updates)
    key = "--bootstrap" if bootstrap else "kafka.bootstrap_servers"
    check_kafka(cfg.kafka, key)
    with kafka_errors(cfg.kafka.bootstrap_servers, key):
        n, stats = _consume(
            cfg, topic, to_sqlite, forward, metrics_port, max_records, idle_exit_s, process_ms
        )
    print(f"consumed {n} records; {stats}", file=sys.stderr)


def _consume(
    cfg: ConsumerConfig,
    topic: str,
    to_sqlite: Path | None,
    forward: str | None,
    metrics_port: int | None,
    max_records: int | None,
    idle_exit_s: float | None,
    process_ms: float,
) -> tuple[int, object]:
    sink = SqliteSink(to_sqlite) if to_sqlite else None
    output: Output = (
        SqliteOutput(sink) if sink else ForwardOutput(cfg.kafka, forward) if forward else PrintOutput()
    )
    if cfg.group_id:
        consumer = AsyncFetchConsumer(cfg, topics=[topic], offset_store=sink)
    else:
        consumer = AsyncFetchConsumer(cfg, partitions=partitions_of(cfg.kafka, topic), offset_store=sink)
    registry = consumer.timings.metrics.registry
    server = MetricsServer(registry, "127.0.0.1", metrics_port).start() if metrics_port else None
    stop = stop_on_signals()
    try:
        with consumer:
            n = consume(
                consumer,
                output,
                stop=stop,
                max_records=max_records,
                idle_exit_s=idle_exit_s,
                process_ms=process_ms,
            )
        output.close()
    finally:
        if server is not None:
            server.close()
    return n, consumer.stats
