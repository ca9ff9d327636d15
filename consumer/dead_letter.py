"""Dead-lettering: :class:`DeadLetterWriter` writes an exhausted record to a dead-letter topic.

A record that failed ``max_retries`` times, could not be deserialized, or could not even be
read (a corrupt batch) is written to ``dead_letter_topic`` (default ``<topic>.dead-letter``)
with its raw key and value and two headers: ``linkwatch.source`` (``<topic>-<p>@<offset>``) and
``linkwatch.error``. The send waits for ``acks=all``; only a send that succeeded lets the
consumer count the record as done — a failed one is reported so the partition stops instead
(a record is never skipped silently).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kafka import KafkaProducer

from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs

log = logging.getLogger(__name__)

ERROR_HEADER_MAX_BYTES = 1000


class DeadLetterWriter:
    """Sends dead letters on its own producer, created at the first one. Thread-safe.

    ``on_result(key)`` is called with ``"dead_lettered"`` or ``"dead_letter_failed"`` after each
    attempt (the consumer's stats)."""

    def __init__(
        self, kafka: KafkaClientConfig | str, topic: str | None, on_result: Callable[[str], None]
    ) -> None:
        self._kafka = kafka
        self._topic = topic
        self._on_result = on_result
        self._lock = threading.Lock()
        self._producer: KafkaProducer | None = None

    def topic_for(self, source_topic: str) -> str:
        return self._topic or f"{source_topic}.dead-letter"

    def send(
        self,
        source_topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]],
        error: str,
    ) -> bool:
        """Write one dead letter and wait for the brokers; False (logged, counted) if it failed."""
        topic = self.topic_for(source_topic)
        headers = [
            *headers,
            ("linkwatch.source", f"{source_topic}-{partition}@{offset}".encode()),
            ("linkwatch.error", error[:ERROR_HEADER_MAX_BYTES].encode("utf-8", "replace")),
        ]
        try:
            with self._lock:
                if self._producer is None:
                    self._producer = KafkaProducer(
                        **kafka_python_kwargs(self._kafka, "dead-letter"), acks="all"
                    )
            self._producer.send(topic, value=value, key=key, headers=headers).get(timeout=30)
        except Exception as e:
            log.error(
                "dead-letter send of %s-%s@%s to %s failed: %s", source_topic, partition, offset, topic, e
            )
            self._on_result("dead_letter_failed")
            return False
        self._on_result("dead_lettered")
        return True

    def close(self, timeout_s: float = 5.0) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=timeout_s)
