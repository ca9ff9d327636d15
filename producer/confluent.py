"""The skew-aware placement for confluent-kafka producers.

confluent-kafka has no per-record Python partitioner hook: its ``partitioner`` setting only names
one of librdkafka's built-in C partitioners (``consistent_random`` by default — CRC32, *not* the
Java client's murmur2 — or ``murmur2_random``, ``fnv1a_random`` …). So the drop-in is a wrapper:
:class:`SkewAwareConfluentProducer` computes the partition with the same
:class:`~producer.partitioner.SkewAwarePartitioner` and passes ``partition=`` to ``produce()``;
delivery reports feed the acks into the load before the caller's own ``on_delivery`` runs.

Cold keys land where the Java client and kafka-python put them (murmur2), which is where a plain
confluent producer puts them only with ``partitioner: murmur2_random``: set that on any other
confluent producer writing the same topic, or per-key order breaks between the producers.

confluent-kafka is not a dependency of linkwatch: this module only calls the producer object it
is given (``list_topics``, ``produce``; everything else is passed through).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from producer.partitioner import SkewAwarePartitioner


class SkewAwareConfluentProducer:
    def __init__(
        self,
        producer: Any,
        partitioner: SkewAwarePartitioner | None = None,
        metadata_max_age_s: float = 30.0,
        metadata_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``producer`` is a ``confluent_kafka.Producer``; the partition list of a topic is read
        with ``list_topics`` at most every ``metadata_max_age_s`` (a new partition count is seen
        after that age, as the Java client sees it after ``metadata.max.age.ms``)."""
        self._producer = producer
        self.partitioner = partitioner if partitioner is not None else SkewAwarePartitioner()
        self.metadata_max_age_s = metadata_max_age_s
        self.metadata_timeout_s = metadata_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        # topic -> (read at, sorted partitions, partitions with a leader, partition -> leader)
        self._meta: dict[str, tuple[float, list[int], list[int], dict[int, int]]] = {}

    def produce(
        self,
        topic: str,
        value: bytes | str | None = None,
        key: bytes | str | None = None,
        partition: int | None = None,
        on_delivery: Callable[[Any, Any], None] | None = None,
        **kwargs: Any,
    ) -> None:
        """``confluent_kafka.Producer.produce`` with the partition chosen here unless given."""
        key_bytes = key.encode() if isinstance(key, str) else key
        size = len(key_bytes or b"") + len(value.encode() if isinstance(value, str) else value or b"")
        if partition is None:
            _, parts, available, leaders = self._metadata(topic)
            partition = self.partitioner.choose(topic, key_bytes, parts, available, size, leaders.get)
        self._producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            on_delivery=self._ack(size, on_delivery),
            **kwargs,
        )

    def _ack(self, size: int, user: Callable[[Any, Any], None] | None) -> Callable[[Any, Any], None]:
        def report(err: Any, msg: Any) -> None:
            if err is None:
                self.partitioner.on_ack(msg.topic(), msg.partition(), size)
            else:
                self.partitioner.on_ack_error()
            if user is not None:
                user(err, msg)

        return report

    def _metadata(self, topic: str) -> tuple[float, list[int], list[int], dict[int, int]]:
        now = self._clock()
        with self._lock:
            cached = self._meta.get(topic)
        if cached is not None and now - cached[0] < self.metadata_max_age_s:
            return cached
        md = self._producer.list_topics(topic, timeout=self.metadata_timeout_s).topics.get(topic)
        if md is None or md.error is not None or not md.partitions:
            raise ValueError(f"no partitions for topic {topic!r}: {getattr(md, 'error', 'not in metadata')}")
        leaders = {p: pm.leader for p, pm in md.partitions.items() if pm.leader >= 0}
        entry = (now, sorted(md.partitions), sorted(leaders), leaders)
        with self._lock:
            self._meta[topic] = entry
        return entry

    def __getattr__(self, name: str) -> Any:
        # poll, flush, len … are the wrapped producer's own.
        return getattr(self._producer, name)

    def __len__(self) -> int:
        return len(self._producer)
