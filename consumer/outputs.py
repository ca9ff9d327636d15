"""Where ``linkwatch consume`` puts records, and the loop that drives it.

An :class:`Output` receives a batch from :meth:`AsyncFetchConsumer.poll` and must ack or fail
every record of it; the loop never acks on its behalf. Guarantees:

* :class:`PrintOutput` — at-least-once to a text stream;
* :class:`ForwardOutput` — at-least-once to another topic (acked only once the broker has the copy);
* :class:`SqliteOutput` — exactly-once into a SQLite file (:class:`~.sink.SqliteSink`).
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Protocol, TextIO

from kafka import KafkaProducer

from consumer.async_fetch import AsyncFetchConsumer, Delivery
from consumer.sink import SqliteSink
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs


class Output(Protocol):
    def handle(self, consumer: AsyncFetchConsumer, batch: list[Delivery]) -> None:
        """Process ``batch``; ack or fail each record. Raising stops the loop (nothing acked)."""
        ...

    def close(self) -> None: ...


def _text(raw: bytes | None) -> str:
    if raw is None:
        return "null"
    return raw.decode("utf-8", "backslashreplace")


class PrintOutput:
    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def handle(self, consumer: AsyncFetchConsumer, batch: list[Delivery]) -> None:
        for d in batch:
            self.stream.write(
                f"{d.topic}-{d.partition}@{d.offset}\t{_text(d.raw_key)}\t{_text(d.raw_value)}\n"
            )
        self.stream.flush()
        for d in batch:
            consumer.ack(d)

    def close(self) -> None:
        self.stream.flush()


class ForwardOutput:
    def __init__(self, kafka: KafkaClientConfig | str, topic: str) -> None:
        self.topic = topic
        self.producer = KafkaProducer(
            **kafka_python_kwargs(kafka, "consumer-forward"), acks="all", linger_ms=5
        )

    def handle(self, consumer: AsyncFetchConsumer, batch: list[Delivery]) -> None:
        futures = [
            (d, self.producer.send(self.topic, key=d.raw_key, value=d.raw_value, headers=d.headers))
            for d in batch
        ]
        self.producer.flush(30)
        for d, fut in futures:
            try:
                fut.get(timeout=30)
                consumer.ack(d)
            except Exception as e:
                consumer.fail(d, f"forward: {e!r}")

    def close(self) -> None:
        self.producer.close(timeout=10)


class SqliteOutput:
    def __init__(self, sink: SqliteSink) -> None:
        self.sink = sink

    def handle(self, consumer: AsyncFetchConsumer, batch: list[Delivery]) -> None:
        self.sink.write(batch)
        for d in batch:  # written or skipped as already stored: done either way
            consumer.ack(d)

    def close(self) -> None:
        self.sink.close()


def consume(
    consumer: AsyncFetchConsumer,
    output: Output,
    *,
    stop: threading.Event,
    max_records: int | None = None,
    idle_exit_s: float | None = None,
    process_ms: float = 0.0,
    batch: int = 500,
) -> int:
    """Run until ``stop``, ``max_records`` handled, or ``idle_exit_s`` without records (while
    partitions are assigned). Returns
    the number of records handed to ``output``. ``process_ms`` simulates per-record work."""
    handled = 0
    last_record = time.monotonic()
    while not stop.is_set():
        want = batch if max_records is None else min(batch, max_records - handled)
        if want <= 0:
            break
        records = consumer.poll(timeout_s=0.2, max_records=want)
        now = time.monotonic()
        if not records:
            if not consumer.assignment():  # still joining the group: not idle yet
                last_record = now
            elif idle_exit_s is not None and now - last_record >= idle_exit_s:
                break
            continue
        last_record = now
        if process_ms:
            time.sleep(process_ms * len(records) / 1000)
        output.handle(consumer, records)
        handled += len(records)
    return handled
