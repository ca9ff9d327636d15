"""``AsyncFetchConsumer``: fetch from every broker continuously into a bounded buffer.

Why: kafka-python's ``KafkaConsumer`` (like the Java client) only *initiates* fetches from
``poll()``, and only once the records of the previous responses were drained. While the
application is busy, responses sit in the client and no new fetch goes out, so data ready on
the brokers waits, end-to-end latency grows, and the brokers' ``ResponseSendTimeMs`` /
``FetchConsumer`` send stage blames the broker for the client.

How (kafka-python 3.0.12): one *pump* thread owns a ``KafkaConsumer`` and calls its ``poll``
continuously, draining every completed fetch into the buffer (:mod:`.buffer`). Each poll sends a
FetchRequest to every leader that has no fetch in flight, so each broker is fetched from
independently: a slow or dead broker keeps only its own request pending and delays only its
own partitions. The buffer is bounded (bytes, records): before each poll the pump pauses the
partitions whose share of the buffer is full (or that have too many uncommitted records, or
beyond ``max_partitions_in_flight``) and resumes them when the application catches up.

Memory bound: buffer ≤ ``buffer_max_bytes`` + one fetch response per fetchable partition
(``max_partition_fetch_bytes`` each, and at most ``fetch_max_bytes`` per broker).

Every kafka-python internal the consumer relies on is reached through :mod:`.kafka_compat`
(which refuses another kafka-python version at construction); exhausted records go to
:mod:`.dead_letter`; deleted topics are noticed by :mod:`.topic_watch`.

The application thread calls :meth:`poll`, then :meth:`ack` or :meth:`fail` for each record;
only the contiguous prefix of acked offsets is committed (:mod:`.commits`). On a rebalance the
done prefix of revoked partitions is committed before they go, and their buffered records are
dropped. With an :class:`~.sink.OffsetStore` the consumer starts each assigned partition at the
store's offset instead of the group's.

Threads: the application thread (poll/ack/fail), the pump thread (the only caller of the
``KafkaConsumer``), and kafka-python's IO thread (fetch responses, rebalance callbacks). The
buffer and the tracker are shared under locks.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from itertools import groupby
from operator import attrgetter
from typing import Any, Literal, Protocol

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from opentelemetry import trace
from opentelemetry.trace import SpanContext
from prometheus_client import CollectorRegistry
from pydantic import Field

from consumer import delivery, kafka_compat
from consumer.buffer import DeliveryBuffer
from consumer.commits import CommitTracker, Outcome
from consumer.dead_letter import DeadLetterWriter
from consumer.delivery import Delivery
from consumer.log_limit import limit_retry_logs
from consumer.metrics import ClientTimings
from consumer.topic_watch import DeletedTopicWatch
from linkwatch import trace_context
from linkwatch.config import StrictModel
from linkwatch.errors import ConfigError
from linkwatch.records import SAMPLES_TOPIC

log = logging.getLogger(__name__)

TP = delivery.TP
_ACK_KEYS = {o: f"ack_{o.value}" for o in Outcome}
_TP = attrgetter("tp")
_TP_EPOCH = attrgetter("tp", "epoch")
COORDINATOR_BACKOFF_INITIAL_MS = 100  # kafka-python's retry_backoff_ms
REVOKE_POLL_S = 0.01  # how often a revoke waiting for acks looks again
_OFFSET = attrgetter("offset")
_TIMESTAMP_MS = attrgetter("timestamp_ms")


class ConsumerConfig(StrictModel):
    """Configuration of :class:`AsyncFetchConsumer` (section ``consumer`` of the config file)."""

    bootstrap_servers: str = "127.0.0.1:9092"
    group_id: str | None = None
    client_id: str = "linkwatch-consumer"
    cluster: str = "default"
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    # The buffer between the fetch pump and the application.
    buffer_max_bytes: int = Field(32 * 1024 * 1024, gt=0)
    buffer_max_records: int = Field(20_000, gt=0)
    max_partitions_in_flight: int = Field(0, ge=0, description="0 = every assigned partition")
    max_uncommitted_per_partition: int = Field(10_000, gt=0)
    # Failures: retried up to max_retries, then dead-lettered or the partition stops.
    max_retries: int = Field(3, ge=0)
    on_exhausted: Literal["dead_letter", "stop_partition"] = "dead_letter"
    dead_letter_topic: str | None = Field(None, description="default: <topic>.dead-letter")
    commit_interval_ms: int = Field(1000, gt=0)
    revoke_wait_ms: int = Field(
        5000, ge=0, description="on a revoke, wait this long for records the application holds to be acked"
    )
    # Passed to kafka-python.
    fetch_max_wait_ms: int = Field(500, ge=0)
    fetch_min_bytes: int = Field(1, ge=1)
    fetch_max_bytes: int = Field(16 * 1024 * 1024, gt=0)
    max_partition_fetch_bytes: int = Field(1024 * 1024, gt=0)
    session_timeout_ms: int = Field(45_000, gt=0)
    heartbeat_interval_ms: int = Field(3_000, gt=0)
    pump_poll_ms: int = Field(20, gt=0)
    topic_gone_s: float = Field(3.0, gt=0, description="a topic missing from metadata this long is deleted")
    coordinator_backoff_max_ms: int = Field(
        1000, gt=0, description="coordinator lookups after it died back off from 100 ms up to this"
    )
    retry_log_interval_s: float = Field(
        10.0, gt=0, description="kafka-python retry warnings: the first, then one summary per interval"
    )
    # Client timings as ClientFetch records on linkwatch.samples.
    metrics_window_s: int = Field(10, gt=0)
    publish_samples: bool = False
    # With a tracer: one CONSUMER span per record (child of the producer's span in its headers)
    # or per batch (the records of one partition handed out by one poll; linked to each).
    trace_spans: Literal["record", "batch"] = "record"


class OffsetStore(Protocol):
    """Where processed offsets live next to the output (see :class:`~.sink.SqliteSink`)."""

    def offsets(self) -> dict[TP, int]:
        """Next offset to process per partition (only partitions the store has seen)."""
        ...


Deserializer = Callable[[bytes | None], Any]


class _Listener(AsyncConsumerRebalanceListener):
    """Rebalance callbacks; they run on kafka-python's IO thread and must not block it."""

    def __init__(self, owner: AsyncFetchConsumer) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        owner = self.owner
        revoked = list(revoked)
        if owner._consumer is not None and not owner._closing.is_set():
            # Records the application holds are acked before the done prefix is committed, so
            # the new owner does not process them again (bounded by revoke_wait_ms).
            await owner._await_in_flight(owner._consumer, owner._withhold(revoked))
        offsets = owner._release(revoked)
        if offsets and owner._consumer is not None:
            try:
                await kafka_compat.commit_in_callback(owner._consumer, _kafka_offsets(offsets), 10_000)
                owner._committed(offsets)
            except Exception as e:  # the new owner re-processes from the last commit
                log.warning("commit before revoke failed: %s", e)
                owner._count("commit_failed")

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.owner._adopt(assigned)

    async def on_partitions_lost(self, lost: Iterable[TopicPartition]) -> None:
        self.owner._release(lost)  # membership is gone: nothing can be committed


def partitions_of(bootstrap_servers: str, topic: str, timeout_s: float = 10.0) -> list[TP]:
    """Every partition of ``topic`` (for manual assignment); ConfigError if it has none."""
    probe = KafkaConsumer(
        bootstrap_servers=bootstrap_servers.split(","),
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


def _kafka_offsets(offsets: dict[TP, int]) -> dict[TopicPartition, OffsetAndMetadata]:
    return {TopicPartition(*tp): OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}


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
        self._topics = list(topics)
        self._partitions = [tuple(p) for p in partitions]
        self._value_deserializer = value_deserializer
        self._key_deserializer = key_deserializer
        self._store = offset_store
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
        self._buf = DeliveryBuffer()
        self._assigned: dict[TP, int] = {}  # tp -> epoch; guarded by _buf.cond
        self._epoch = 0
        self._consumer: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._producer_lock = threading.Lock()
        self._dead_letters = DeadLetterWriter(
            config.bootstrap_servers, config.dead_letter_topic, self._on_dead_letter
        )
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._commit_now = threading.Event()
        self._commit_waiters: list[threading.Event] = []
        self._commit_in_flight = False
        self._error: BaseException | None = None
        self._stats_lock = threading.Lock()
        self.stats: dict[str, int] = {}
        self._leaders: dict[TP, int] = {}
        # with a group_id, once started: the coordinator lookup's backoff (lookups, waited_s)
        self.coordinator_backoff: kafka_compat.CoordinatorBackoff | None = None
        # partition being revoked -> its unfinished records no longer in the application's hands
        self._held_back: dict[TP, int] = {}
        self._resume: dict[TP, int] = {}  # revoked partition -> offset to refetch from if re-assigned
        self._unreadable: tuple[TP, int, int] | None = None  # (partition, offset, failed fetches in a row)
        self._topic_watch = DeletedTopicWatch(config.topic_gone_s)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> AsyncFetchConsumer:
        cfg = self.config
        consumer = KafkaConsumer(
            bootstrap_servers=cfg.bootstrap_servers.split(","),
            group_id=cfg.group_id,
            client_id=cfg.client_id,
            enable_auto_commit=False,
            # A consumer never creates topics: with auto-creation on, the metadata requests of a
            # consumer of a deleted topic would create it again, empty, under the operator's feet.
            allow_auto_create_topics=False,
            auto_offset_reset=cfg.auto_offset_reset,
            fetch_max_wait_ms=cfg.fetch_max_wait_ms,
            fetch_min_bytes=cfg.fetch_min_bytes,
            fetch_max_bytes=cfg.fetch_max_bytes,
            max_partition_fetch_bytes=cfg.max_partition_fetch_bytes,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        )
        kafka_compat.disable_auto_create(consumer)
        limit_retry_logs(cfg.retry_log_interval_s)
        delivery.install(consumer)  # poll returns Delivery objects, decoded at 0.6x kafka-python's cost
        kafka_compat.time_fetches(consumer, self.timings.fetch_latency)
        self._consumer = consumer
        if self._topics:
            self._await_metadata(consumer)
            consumer.subscribe(self._topics, listener=_Listener(self))
            kafka_compat.steady_group_join(consumer, cfg.session_timeout_ms)
        else:
            tps = [TopicPartition(*tp) for tp in self._partitions]
            consumer.assign(tps)
            self._adopt(tps)
        if cfg.group_id:
            self.coordinator_backoff = kafka_compat.back_off_coordinator_lookup(
                consumer,
                min(COORDINATOR_BACKOFF_INITIAL_MS, cfg.coordinator_backoff_max_ms),
                cfg.coordinator_backoff_max_ms,
            )
            kafka_compat.mark_coordinator_dead_on_close(consumer)
        self._thread = threading.Thread(target=self._pump, name=f"fetch-pump-{cfg.client_id}", daemon=True)
        self._thread.start()
        return self

    def _await_metadata(self, consumer: KafkaConsumer, timeout_s: float = 10.0) -> None:
        # A group leader whose metadata lacks a subscribed topic assigns none of its partitions
        # (and kafka-python does not refresh it for up to metadata_max_age_ms): load it first.
        deadline = time.monotonic() + timeout_s
        for topic in self._topics:
            while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not consumer.partitions_for_topic(topic):
                log.warning("topic %s has no partitions yet; it is assigned once metadata shows it", topic)

    def close(self, timeout_s: float = 15.0) -> None:
        """Stop fetching, commit the processed prefix, leave the group. Idempotent."""
        self._closing.set()
        with self._buf.cond:
            self._buf.cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)
        with contextlib.suppress(Exception):
            self._dead_letters.close()

    def __enter__(self) -> AsyncFetchConsumer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def assignment(self) -> set[TP]:
        with self._buf.cond:
            return set(self._assigned)

    def buffered(self) -> tuple[int, int]:
        """(bytes, records) in the buffer now."""
        with self._buf.cond:
            return self._buf.bytes, len(self._buf.queue)

    @property
    def peak_buffer_bytes(self) -> int:
        return self._buf.peak_bytes

    def stopped_partitions(self) -> dict[TP, int]:
        """Partitions stopped by an exhausted record (``on_exhausted: stop_partition``) -> offset."""
        return self.tracker.stopped()

    # ----------------------------------------------------------------- application side

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Delivery]:
        """Up to ``max_records`` records, waiting at most ``timeout_s`` for the first one.

        Raises the pump's error if it died. Records whose deserializer fails are not returned:
        they go the exhausted path at once (dead letter or stop), counted ``deserialize_error``.
        """
        started = time.monotonic()
        with self._buf.cond:
            while not self._buf.queue and self._error is None and not self._closing.is_set():
                remaining = timeout_s - (time.monotonic() - started)
                if remaining <= 0:
                    break
                self._buf.cond.wait(remaining)
            if self._error is not None:
                raise self._error
            taken = self._buf.take(max_records)
            buffered = (self._buf.bytes, len(self._buf.queue))
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
                runs.append((self._leader(tp), tp[0], [now - ms / 1000 for ms in stamps]))
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
            with self._buf.cond:
                if self._assigned.get(d.tp) == d.epoch:
                    self._buf.put(d, front=True)
                    self._buf.cond.notify()
                elif d.tp in self._held_back:  # being revoked: no longer in the application's hands
                    self._held_back[d.tp] += 1
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
        with self._buf.cond:
            self._buf.drop({d.tp})

    def _dead_letter(self, d: Delivery, error: str) -> bool:
        return self._dead_letters.send(
            d.topic, d.partition, d.offset, d.raw_key, d.raw_value, d.headers, error
        )

    def commit(self, timeout_s: float = 10.0) -> None:
        """Ask the pump to commit the processed prefix now and wait (at most ``timeout_s``)."""
        done = threading.Event()
        self._commit_waiters.append(done)
        self._commit_now.set()
        done.wait(timeout_s)

    def _on_dead_letter(self, result: str) -> None:
        if result == "dead_lettered":
            self.timings.metrics.dead_letter.inc()
        self._count(result)

    def _count(self, key: str, n: int = 1) -> None:
        with self._stats_lock:
            self.stats[key] = self.stats.get(key, 0) + n

    def _leader(self, tp: TP) -> int:
        leader = self._leaders.get(tp)
        if leader is None and self._consumer is not None:
            leader = kafka_compat.leader_for(self._consumer, TopicPartition(*tp))
            if leader is not None and leader >= 0:
                self._leaders[tp] = leader
        return leader if leader is not None else -1

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

    # ----------------------------------------------------------------- assignment (IO / pump thread)

    def _adopt(self, tps: Iterable[TopicPartition]) -> None:
        stored = self._store.offsets() if self._store is not None else {}
        with self._buf.cond:
            for tp in tps:
                key = (tp.topic, tp.partition)
                self._epoch += 1
                self._assigned[key] = self._epoch
                self.tracker.assign(key, self._epoch)
                self._leaders.pop(key, None)
                # kafka-python keeps the fetch position of a partition assigned again; records
                # delivered but not finished before the revoke must be fetched again.
                start = stored.get(key, self._resume.get(key))
                if start is not None and self._consumer is not None:
                    self._consumer.seek(TopicPartition(*key), start)
            self._resume.clear()
        self._count("assigned", 0)

    def _withhold(self, tps: Iterable[TopicPartition]) -> set[TP]:
        """Stop handing out records of partitions being revoked: they leave the assignment (no
        fetched record of theirs is accepted, a failed one is not redelivered) and their
        buffered records are dropped. Acks still count until :meth:`_release`. Returns the keys."""
        keys = {(tp.topic, tp.partition) for tp in tps}
        with self._buf.cond:
            for key in keys:
                self._assigned.pop(key, None)
                self._held_back[key] = self._held_back.get(key, 0) + self._buf.tp_records.get(key, 0)
            dropped = self._buf.drop(keys)
        if dropped:
            self.timings.metrics.drop("revoked", dropped)
            self._count("dropped_revoked", dropped)
        return keys

    def _in_flight(self, keys: Iterable[TP]) -> int:
        """Records of ``keys`` in the application's hands: delivered, not finished, and neither
        dropped from the buffer nor given back by a failure since :meth:`_withhold`."""
        with self._buf.cond:
            held_back = {key: self._held_back.get(key, 0) for key in keys}
        return sum(max(0, self.tracker.unfinished(key) - n) for key, n in held_back.items())

    async def _await_in_flight(self, consumer: KafkaConsumer, keys: set[TP]) -> None:
        """Wait up to ``revoke_wait_ms`` for the records of ``keys`` the application holds to be
        acked (or failed); :meth:`close` ends the wait. On kafka-python's event loop, so heartbeats
        go on meanwhile. Records still unacked then are counted (``revoke_wait_unacked``): their
        acks will be stale and the new owner processes them again, as without the wait."""
        left = self._in_flight(keys)
        if not left:
            return
        started = time.monotonic()
        deadline = started + self.config.revoke_wait_ms / 1000
        while left and time.monotonic() < deadline and not self._closing.is_set():
            await kafka_compat.loop_sleep(consumer, min(REVOKE_POLL_S, max(0.0, deadline - time.monotonic())))
            left = self._in_flight(keys)
        self._count("revoke_waits")
        self._count("revoke_wait_ms", round((time.monotonic() - started) * 1000))
        if left:
            self._count("revoke_wait_expired")
            self._count("revoke_wait_unacked", left)
            log.warning(
                "revoke: %d records of %d partitions not acked within revoke_wait_ms=%d; "
                "the new owner processes them again",
                left,
                len(keys),
                self.config.revoke_wait_ms,
            )

    def _release(self, tps: Iterable[TopicPartition]) -> dict[TP, int]:
        """Forget revoked partitions; return the done prefix to commit for them."""
        keys = self._withhold(tps)
        with self._buf.cond:
            for key in keys:
                self._held_back.pop(key, None)
        offsets = {}
        for key in keys:
            revoked = self.tracker.revoke(key)
            if revoked.resume is not None:
                with self._buf.cond:
                    self._resume[key] = revoked.resume
            self._count("at_risk_on_revoke", revoked.at_risk)
            if revoked.commit is not None:
                offsets[key] = revoked.commit
        self._count("revocations", len(keys))
        return offsets if self.config.group_id else {}

    def _committed(self, offsets: dict[TP, int]) -> None:
        self.tracker.mark_committed(offsets)
        self._count("commits")

    # ----------------------------------------------------------------- the pump thread

    def _pump(self) -> None:
        assert self._consumer is not None
        consumer = self._consumer
        last_commit = last_publish = time.monotonic()
        try:
            while not self._closing.is_set():
                self._check_deleted_topics(consumer, time.monotonic())
                self._plan_fetch(consumer)
                with self._buf.cond:
                    epochs = dict(self._assigned)
                try:
                    batch = consumer.poll(timeout_ms=self.config.pump_poll_ms, max_records=1_000_000)
                except KafkaError as e:
                    self._on_fetch_error(consumer, e)
                    continue
                self._accept(consumer, batch, epochs)
                now = time.monotonic()
                if self._commit_now.is_set():
                    self._commit(consumer)
                elif now - last_commit >= self.config.commit_interval_ms / 1000:
                    self._commit(consumer, sync=False)
                    last_commit = now
                if now - last_publish >= self.config.metrics_window_s:
                    self._publish()
                    last_publish = now
        except BaseException as e:
            log.exception("fetch pump stopped")
            self._error = e
        finally:
            with contextlib.suppress(Exception):
                self._commit(consumer)
            with contextlib.suppress(Exception):
                self._publish()  # the last (partial) window
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False, timeout_ms=10_000)
            with self._buf.cond:
                self._buf.cond.notify_all()

    def _on_fetch_error(self, consumer: KafkaConsumer, e: KafkaError) -> None:
        """Errors surfaced by poll (corrupt record batches, …): counted by type; a partition
        that fails at the same offset more than ``max_retries`` times in a row takes the
        exhausted path there (the unreadable offset is dead-lettered and skipped, or the
        partition stops), so one bad batch never wedges the consumer or retries forever."""
        name = type(e).__name__
        self.timings.metrics.drop(name)
        self._count(f"fetch_error_{name}")
        log.warning("fetch error: %s", e)
        tp = kafka_compat.failing_partition(consumer, e)
        key = (tp.topic, tp.partition) if tp is not None else None
        offset = kafka_compat.position(consumer, tp) if tp is not None else None
        if key is None or offset is None:
            time.sleep(0.1)
            return
        failures = 1
        if self._unreadable is not None and self._unreadable[:2] == (key, offset):
            failures = self._unreadable[2] + 1
        self._unreadable = (key, offset, failures)
        if failures <= self.config.max_retries:
            time.sleep(0.1)
            return
        self._unreadable = None
        error = f"unreadable: {e}"
        with self._buf.cond:
            epoch = self._assigned.get(key)
        if epoch is None:
            return
        self._count("unreadable_records")
        if self.config.on_exhausted == "dead_letter" and self._dead_letters.send(
            key[0], key[1], offset, None, b"", [], error
        ):
            consumer.seek(tp, offset + 1)
            return
        self.tracker.stop(key, epoch, offset)
        self._count("partitions_stopped")
        log.error("partition %s-%s stopped at offset %s: %s", key[0], key[1], offset, error)

    def _check_deleted_topics(self, consumer: KafkaConsumer, now: float) -> None:
        """Stop consuming partitions of topics that were deleted (:mod:`.topic_watch`): counted
        ``partitions_deleted``, their buffered records dropped; the other partitions go on."""
        if not self._topic_watch.due(now):
            return
        with self._buf.cond:
            topics = {tp[0] for tp in self._assigned} | set(self._topics)
        gone = self._topic_watch.check(kafka_compat.cluster(consumer), topics, now)
        if not gone:
            return
        for topic in gone:
            log.error("topic %s was deleted while consumed: its partitions are no longer consumed", topic)
        self._count("topics_deleted", len(gone))
        with self._buf.cond:
            lost = [TopicPartition(*tp) for tp in self._assigned if tp[0] in gone]
        self._release(lost)
        self._count("partitions_deleted", len(lost))
        self.timings.metrics.drop("partition_deleted", len(lost))
        if self._topics:
            self._topics = [t for t in self._topics if t not in gone]
            if self._topics:
                consumer.subscribe(self._topics, listener=_Listener(self))
            else:
                consumer.unsubscribe()
        else:
            self._partitions = [tp for tp in self._partitions if tp[0] not in gone]
            consumer.assign([TopicPartition(*tp) for tp in self._partitions])

    def _accept(
        self, consumer: KafkaConsumer, batch: dict[TopicPartition, list[Delivery]], epochs: dict[TP, int]
    ) -> None:
        if not batch:
            return
        with self._buf.cond:
            for tp, recs in batch.items():
                key = (tp.topic, tp.partition)
                self._topic_watch.seen(tp.topic)
                epoch = self._assigned.get(key)
                if epoch is None or epoch != epochs.get(key):
                    self._refetch_later(consumer, tp, recs)
                    continue
                accepted = self.tracker.delivered_many(key, epoch, list(map(_OFFSET, recs)))
                if accepted < len(recs):
                    self._count("dropped_stopped", len(recs) - accepted)
                    recs = recs[len(recs) - accepted :]
                if accepted:
                    for d in recs:
                        d.epoch = epoch
                    self._buf.put_many(key, recs)
            self._buf.cond.notify_all()
            buffered = (self._buf.bytes, len(self._buf.queue))
        self.timings.buffer(*buffered)

    def _refetch_later(self, consumer: KafkaConsumer, tp: TopicPartition, recs: list[Any]) -> None:
        """Records fetched under an assignment that changed during the poll: not delivered.

        kafka-python already moved its position past them; if the partition is assigned
        again, seek back so they are fetched (and tracked) under the new assignment.
        """
        self.timings.metrics.drop("assignment_changed", len(recs))
        self._count("refetch_after_rebalance", len(recs))
        if tp in consumer.assignment():
            current = kafka_compat.position(consumer, tp)
            first = recs[0].offset
            consumer.seek(tp, first if current is None else min(first, current))

    def _plan_fetch(self, consumer: KafkaConsumer) -> None:
        """Pause partitions whose buffer share is full; resume the others (bounded in-flight)."""
        cfg = self.config
        stopped = self.tracker.stopped()
        with self._buf.cond:
            assigned = list(self._assigned)
            n = max(1, len(assigned))
            share_bytes = max(1, cfg.buffer_max_bytes // n)
            share_records = max(1, cfg.buffer_max_records // n)
            full = self._buf.bytes >= cfg.buffer_max_bytes or len(self._buf.queue) >= cfg.buffer_max_records
            load = {tp: self._buf.tp_bytes.get(tp, 0) for tp in assigned}
            records = {tp: self._buf.tp_records.get(tp, 0) for tp in assigned}
        want = (
            []
            if full
            else [
                tp
                for tp in assigned
                if tp not in stopped
                and load[tp] < share_bytes
                and records[tp] < share_records
                and self.tracker.uncommitted(tp) < cfg.max_uncommitted_per_partition
            ]
        )
        if cfg.max_partitions_in_flight and len(want) > cfg.max_partitions_in_flight:
            want.sort(key=lambda tp: load[tp])  # emptiest first: those the application waits on
            want = want[: cfg.max_partitions_in_flight]
        wanted = {TopicPartition(*tp) for tp in want}
        assigned_tps = {TopicPartition(*tp) for tp in assigned}
        paused = consumer.paused()
        to_pause = (assigned_tps - wanted) - paused
        to_resume = wanted & paused
        if to_pause:
            consumer.pause(*to_pause)
        if to_resume:
            consumer.resume(*to_resume)

    def _commit(self, consumer: KafkaConsumer, sync: bool = True) -> None:
        """Commit the processed prefix. Periodic commits are asynchronous so a slow group
        coordinator never holds up fetching; explicit commit() and close wait for the result."""
        waiters, self._commit_waiters = self._commit_waiters, []
        self._commit_now.clear()
        try:
            offsets = self.tracker.committable()
            if offsets and self.config.group_id:
                with self._buf.cond:
                    offsets = {tp: off for tp, off in offsets.items() if tp in self._assigned}
                if sync:
                    consumer.commit(_kafka_offsets(offsets), timeout_ms=10_000)
                    self._committed(offsets)
                elif not self._commit_in_flight:
                    self._commit_in_flight = True
                    consumer.commit_async(_kafka_offsets(offsets), callback=self._on_async_commit)
        except KafkaError as e:
            log.warning("commit failed (retried at the next interval): %s", e)
            self._count("commit_failed")
        finally:
            for w in waiters:
                w.set()

    def _on_async_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], response: Any) -> None:
        self._commit_in_flight = False
        if isinstance(response, BaseException):
            log.warning("commit failed (retried at the next interval): %s", response)
            self._count("commit_failed")
        else:
            self._committed({(tp.topic, tp.partition): om.offset for tp, om in offsets.items()})

    def _publish(self) -> None:
        records = self.timings.flush()
        if not self.config.publish_samples:
            return
        try:
            with self._producer_lock:
                if self._producer is None:
                    self._producer = KafkaProducer(bootstrap_servers=self.config.bootstrap_servers.split(","))
            for rec in records:
                self._producer.send(SAMPLES_TOPIC, value=rec.to_json(), key=rec.dedup_key().encode())
        except KafkaError as e:
            log.warning("publishing client timings failed: %s", e)
            self.timings.metrics.drop("samples_send_failed", len(records))
