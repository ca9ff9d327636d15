"""``linkwatch load``: produce (and optionally consume) test load against any cluster."""

from __future__ import annotations

import time

import typer
from rich.console import Console

from linkwatch.reach import check_bootstrap, kafka_errors
from testbed.load import ConsumerLoad, KeyDistribution, ProducerLoad, ensure_topic


def app(
    bootstrap: str = typer.Option(..., help="host:port[,host:port] of the target cluster."),
    topic: str = typer.Option("linkwatch.load", help="Topic to produce to (created if missing)."),
    rate: float = typer.Option(1000.0, help="Messages per second."),
    keys: str = typer.Option("uniform", help="none, uniform or zipf:<exponent>."),
    key_count: int = typer.Option(1000, help="Number of distinct keys."),
    size: int = typer.Option(200, help="Message size in bytes."),
    acks: str = typer.Option("1", help="0, 1 or all."),
    partitions: int = typer.Option(12, help="Partitions when the topic is created."),
    replication: int = typer.Option(3, help="Replication factor when the topic is created."),
    consume_group: str = typer.Option("", help="Also consume the topic in this group."),
    duration: float = typer.Option(60.0, help="Seconds to run."),
) -> None:
    """Produce at a set rate with a key distribution; print sent/acked/consumed per second."""
    from linkwatch.kafka_client import admin_client, kafka_python_kwargs

    dist = KeyDistribution.parse(keys, key_count)
    check_bootstrap(bootstrap, key="--bootstrap")
    with kafka_errors(bootstrap, key="--bootstrap"):
        admin = admin_client(**kafka_python_kwargs(bootstrap, "load"))
        ensure_topic(admin, topic, partitions, replication)
        admin.close()
    producer = ProducerLoad(bootstrap, topic, rate, dist, size, acks)
    console = Console()
    producer.start()
    consumer = ConsumerLoad(bootstrap, topic, consume_group).start() if consume_group else None
    end = time.monotonic() + duration
    try:
        while time.monotonic() < end:
            time.sleep(min(5.0, max(0.0, end - time.monotonic())))
            s = producer.stats
            consumed = consumer.consumed if consumer else 0
            console.print(
                f"sent {s.sent} acked {s.acked} errors {s.errors} consumed {consumed} {s.last_error}"
            )
    finally:
        producer.stop()
        if consumer:
            consumer.stop()
