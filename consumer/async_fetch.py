"""``AsyncFetchConsumer``: the application's side of a consumer that fetches in the background.

Why: kafka-python's ``KafkaConsumer`` (like the Java client) only *initiates* fetches from
``poll()``, and only once the records of the previous responses were drained. While the
application is busy, responses sit in the client and no new fetch goes out, so data ready on
the brokers waits, end-to-end latency grows, and the brokers' ``ResponseSendTimeMs`` /
``FetchConsumer`` send stage blames the broker for the client. Here the fetching runs on its own
thread, from every broker, into a bounded buffer (:mod:`.fetch_loop`); this module is what the
application calls.

Contract: the application thread calls :meth:`AsyncFetchConsumer.poll`, then
:meth:`~AsyncFetchConsumer.ack` or :meth:`~AsyncFetchConsumer.fail` for each record; only the
contiguous prefix of acked offsets is committed (:mod:`.commits`). A failed record is delivered
again, first in line, up to ``max_retries`` times, then *exhausted*: written to the dead-letter
topic (:mod:`.dead_letter`) and counted done, or its partition stops. A record whose
deserializer fails is exhausted at once. On a rebalance the fetch loop commits the done prefix
of revoked partitions before they go and drops their buffered records; an ack for a partition
revoked since is stale (counted, ignored). With an :class:`~.fetch_loop.OffsetStore` each
assigned partition starts at the store's offset instead of the group's. Delivered records are
timed (wait-for-fetch, end to end: :mod:`.metrics`) and, with a tracer, get consume spans.

Threads: the application thread (poll/ack/fail/commit), the fetch loop's pump thread (the only
caller of the ``KafkaConsumer``), and kafka-python's IO thread (fetch responses, rebalance
callbacks). The buffer and the assignment are shared under the buffer's lock, the tracker under
its own.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from operator import attrgetter
from typing import Any

from kafka import KafkaConsumer
from opentelemetry import trace
from opentelemetry.trace import SpanContext
from prometheus_client import CollectorRegistry

from consumer import delivery, kafka_compat
from consumer.commits import CommitTracker, Outcome
from consumer.config import ConsumerConfig
from consumer.dead_letter import DeadLetterWriter
from consumer.delivery import Delivery
from consumer.fetch_loop import FetchLoop, OffsetStore
from consumer.metrics import ClientTimings
from linkwatch import trace_context
from linkwatch.errors import ConfigError
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs

__all__ = ["AsyncFetchConsumer", "ConsumerConfig", "Delivery", "OffsetStore", "partitions_of"]

log = logging.getLogger(__name__)

TP = delivery.TP
_ACK_KEYS = {o: f"ack_{o.value}" for o in Outcome}
_TP = attrgetter("tp")
_TP_EPOCH = attrgetter("tp", "epoch")
_OFFSET = attrgetter("offset")
_TIMESTAMP_MS = attrgetter("timestamp_ms")

Deserializer = Callable[[bytes | None], Any]


def partitions_of(kafka: KafkaClientConfig | str, topic: str, timeout_s: float = 10.0) -> list[TP]:
    """Every partition of ``topic`` (for manual assignment); ConfigError if it has none."""
    probe = KafkaConsumer(
        **kafka_python_kwargs(kafka, "consumer-metadata"),
        enable_auto_commit=False,
        allow_auto_create_topics=False,
    )
    kafka_compat.disable_auto_create(probe)
    try:
        deadline = time.monotonic() + timeout_s
        parts = probe.partitions_for_topic(topic)
        while not parts and time.monotonic() < deadline:
            time.sleep(0.2)
            parts = probe.partitions_for_topic(topic)
    finally:
        probe.close()
    if not parts:
        raise ConfigError("consume", [f"topic={topic!r}: no such topic (or no partitions)"])
    return [(topic, p) for p in sorted(parts)]


class AsyncFetchConsumer:
    """Background-fetching consumer with processed-offset commits. See the module docstring.

    Use as a context manager, or call :meth:`start` and :meth:`close`. Either ``topics``
    (group membership; needs ``group_id``) or ``partitions`` (manual assignment).
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        topics: Sequence[str] = (),
        partitions: Sequence[TP] = (),
        value_deserializer: Deserializer | None = None,
        key_deserializer: Deserializer | None = None,
        offset_store: OffsetStore | None = None,
        registry: CollectorRegistry | None = None,
        tracer: Any = None,
    ) -> None:
        if bool(topics) == bool(partitions):
            raise ConfigError("consumer", ["give either topics (subscribe) or partitions (assign)"])
        kafka_compat.check_version()
        if topics and not config.group_id:
            raise ConfigError("consumer", ["group_id: required to subscribe to topics"])
        self.config = config
        self._value_deserializer = value_deserializer
        self._key_deserializer = key_deserializer
        self._tracer = tracer
        self.timings = ClientTimings(
            config.cluster,
            config.client_id,
            config.group_id or "",
            config.metrics_window_s,
            registry,
            end_to_end_sketches=config.publish_samples,
        )
        self.tracker = CommitTracker(config.max_retries)
        self._dead_letters = DeadLetterWriter(config.kafka, config.dead_letter_topic, self._on_dead_letter)
        self._stats_lock = threading.Lock()
        self.stats: dict[str, int] = {}
        self._loop = FetchLoop(
            config,
            topics=topics,
            partitions=[tuple(p) for p in partitions],
            offset_store=offset_store,
            tracker=self.tracker,
            timings=self.timings,
            dead_letters=self._dead_letters,
            count=self._count,
        )

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> AsyncFetchConsumer:
        self._loop.start()
        return self

    def close(self, timeout_s: float = 15.0) -> None:
        """Stop fetching, commit the processed prefix, leave the group. Idempotent."""
        self._loop.stop(timeout_s)
        with contextlib.suppress(Exception):
            self._dead_letters.close()

    def __enter__(self) -> AsyncFetchConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def assignment(self) -> set[TP]:
        return self._loop.assignment()

    def buffered(self) -> tuple[int, int]:
        """(bytes, records) in the buffer now."""
        buf = self._loop.buffer
        with buf.cond:
            return buf.bytes, len(buf.queue)

    @property
    def peak_buffer_bytes(self) -> int:
        return self._loop.buffer.peak_bytes

    @property
    def coordinator_backoff(self) -> kafka_compat.CoordinatorBackoff | None:
        """With a ``group_id``, once started: the coordinator lookup's backoff (lookups, waited_s)."""
        return self._loop.coordinator_backoff

    def stopped_partitions(self) -> dict[TP, int]:
        """Partitions stopped by an exhausted record (``on_exhausted: stop_partition``) -> offset."""
        return self.tracker.stopped()

    # ----------------------------------------------------------------- the application's calls

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one.

        Raises the pump's error if it died. Records whose deserializer fails are not returned:
        they go the exhausted path at once (dead letter or stop), counted ``deserialize_error``.
        """
        started = time.monotonic()
        loop, buf = self._loop, self._loop.buffer
        with buf.cond:
            while not buf.queue and loop.error is None and not loop.closing.is_set():
                remaining = timeout_s - (time.monotonic() - started)
                if remaining <= 0:
                    break
                buf.cond.wait(remaining)
            if loop.error is not None:
                raise loop.error
            taken = buf.take(max_records)
            buffered = (buf.bytes, len(buf.queue))
        self.timings.wait_fetch(time.monotonic() - started)
        self.timings.buffer(*buffered)
        return self._deliver(taken)

    def _deliver(self, taken: list[Delivery]) -> list[Delivery]:
        if self._key_deserializer or self._value_deserializer:
            taken = [d for d in taken if self._deserialize(d)]
        if self._tracer is not None and taken:
            self._trace(taken)
        if taken:
            now = time.time()
            runs = []
            for tp, run in groupby(taken, _TP):
                stamps = list(map(_TIMESTAMP_MS, run))
                runs.append((self._loop.leader(tp), tp[0], [now - ms / 1000 for ms in stamps]))
            self.timings.end_to_end_runs(runs)
            self._count("delivered", len(taken))
        return taken

    def _deserialize(self, d: Delivery) -> bool:
        try:
            if self._key_deserializer is not None:
                d.key = self._key_deserializer(d.raw_key)
            if self._value_deserializer is not None:
                d.value = self._value_deserializer(d.raw_value)
            return True
        except Exception as e:
            self.timings.metrics.drop("deserialize_error")
            self._count("deserialize_error")
            self._exhausted(d, f"deserialize: {e!r}")
            return False

    def ack(self, d: Delivery) -> Outcome:
        """The record is done. Stale acks (partition revoked since) are counted and ignored."""
        outcome = self.tracker.ack(d.tp, d.epoch, d.offset)
        self._count(_ACK_KEYS[outcome])
        return outcome

    def ack_many(self, ds: Iterable[Delivery]) -> dict[Outcome, int]:
        """:meth:`ack` for a processed batch (one lock round for all); outcome -> count."""
        runs = [(key[0], key[1], list(map(_OFFSET, run))) for key, run in groupby(ds, _TP_EPOCH)]
        counts = self.tracker.ack_runs(runs)
        with self._stats_lock:
            for outcome, n in counts.items():
                key = _ACK_KEYS[outcome]
                self.stats[key] = self.stats.get(key, 0) + n
        return counts

    def fail(self, d: Delivery, error: str = "") -> Outcome:
        """The record failed: redelivered first in line until ``max_retries``, then exhausted."""
        outcome = self.tracker.fail(d.tp, d.epoch, d.offset)
        if outcome is Outcome.RETRY:
            d.attempts += 1
            self._count("retried")
            self._loop.redeliver(d)
        elif outcome is Outcome.EXHAUSTED:
            self._exhausted(d, error)
        else:
            self._count(f"fail_{outcome.value}")
        return outcome

    def _exhausted(self, d: Delivery, error: str) -> None:
        if self.config.on_exhausted == "dead_letter" and self._dead_letter(d, error):
            self.tracker.ack(d.tp, d.epoch, d.offset)
            return
        self.tracker.stop(d.tp, d.epoch, d.offset)
        self._count("partitions_stopped")
        log.error("partition %s-%s stopped at offset %s: %s", d.topic, d.partition, d.offset, error)
        with self._loop.buffer.cond:
            self._loop.buffer.drop({d.tp})

    def _dead_letter(self, d: Delivery, error: str) -> bool:
        return self._dead_letters.send(
            d.topic, d.partition, d.offset, d.raw_key, d.raw_value, d.headers, error
        )

    def commit(self, timeout_s: float = 10.0) -> None:
        """Ask the fetch loop to commit the processed prefix now and wait (at most ``timeout_s``)."""
        self._loop.commit(timeout_s)

    def _trace(self, taken: list[Delivery]) -> None:
        """Consume spans for delivered records (``trace_spans``), never one per poll.

        ``record``: a span per record that carries a ``traceparent``, a *child* of the producer's
        span, so the producer's trace holds it (one trace from send to receive). ``batch``: a
        span per partition run of one poll, with a *link* to each record's context (a batch
        mixes traces, and one span cannot have several parents), child of the caller's current
        span. A malformed ``traceparent`` is counted (``bad_traceparent``) and its record gets
        no span (``record``) or no link (``batch``).
        """
        per_record = self.config.trace_spans == "record"
        for tp, run in groupby(taken, _TP):
            contexts = []
            for d in run:
                if not d.headers or not trace_context.has_traceparent(d.headers):
                    continue
                ctx = trace_context.extract(d.headers)
                if ctx is None:
                    self._count("bad_traceparent")
                elif per_record:
                    self._consume_span(tp, [d], parent=ctx)
                else:
                    contexts.append((d, ctx))
            if contexts:
                self._consume_span(tp, [d for d, _ in contexts], links=[c for _, c in contexts])

    def _consume_span(
        self, tp: TP, ds: list[Delivery], parent: SpanContext | None = None, links: Sequence[SpanContext] = ()
    ) -> None:
        attrs: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "receive",
            "messaging.operation.name": "poll",
            "messaging.destination.name": tp[0],
            "messaging.destination.partition.id": str(tp[1]),
            "messaging.client.id": self.config.client_id,
        }
        if self.config.group_id:
            attrs["messaging.consumer.group.name"] = self.config.group_id
        if len(ds) == 1:
            attrs["messaging.kafka.offset"] = ds[0].offset
        else:
            attrs["messaging.batch.message_count"] = len(ds)
        context = trace.set_span_in_context(trace.NonRecordingSpan(parent)) if parent is not None else None
        span = self._tracer.start_span(
            f"receive {tp[0]}",
            context=context,
            kind=trace.SpanKind.CONSUMER,
            links=[trace.Link(c) for c in links],
            attributes=attrs,
        )
        span.end()
        self._count("trace_spans")

    def _on_dead_letter(self, result: str) -> None:
        if result == "dead_lettered":
            self.timings.metrics.dead_letter.inc()
        self._count(result)

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] = self.stats.get(key, 0) + n
