"""The fetch loop: fetch from every broker continuously into the bounded buffer (:class:`FetchLoop`).

How (kafka-python 3.0.12): one *pump* thread owns a ``KafkaConsumer`` and calls its ``poll``
continuously, draining every completed fetch into the buffer (:mod:`.buffer`). Each poll sends a
FetchRequest to every leader that has no fetch in flight, so each broker is fetched from
independently: a slow or dead broker keeps only its own request pending and delays only its
own partitions. The buffer is bounded (bytes, records): before each poll the pump pauses the
partitions whose share of the buffer is full (or that have too many uncommitted records, or
beyond ``max_partitions_in_flight``) and resumes them when the application catches up.

Memory bound: buffer ≤ ``buffer_max_bytes`` + one fetch response per fetchable partition
(``max_partition_fetch_bytes`` each, and at most ``fetch_max_bytes`` per broker).

The loop also keeps the assignment: each assigned partition gets a new *epoch*, and a fetched
record is accepted only under the epoch it was fetched under. On a rebalance the records the
application holds of revoked partitions are awaited (``revoke_wait_ms``), the done prefix is
committed before the partitions go, and their buffered records are dropped; with an
:class:`OffsetStore` each assigned partition starts at the store's offset instead of the
group's. It commits the processed prefix (:mod:`.commits`) every ``commit_interval_ms`` and when
asked, notices deleted topics (:mod:`.topic_watch`), takes the exhausted path for an offset that
cannot be read, and publishes the client timings.

Every kafka-python internal it relies on is reached through :mod:`.kafka_compat`.

Contract with the application side (:class:`~consumer.async_fetch.AsyncFetchConsumer`):

* Threads: the pump thread is the only caller of the ``KafkaConsumer``; rebalance callbacks run
  on kafka-python's IO thread and never block it; the application thread calls the public
  methods here. The buffer and the assignment (``_assigned``, ``_held_back``) are shared under
  ``buffer.cond``; the commit tracker has its own lock.
* A commit the application asks for (:meth:`FetchLoop.commit`) is made by the pump.
* An exception that stops the pump is kept in :attr:`FetchLoop.error` (the application's next
  poll raises it); the loop then commits what is done, publishes the last window and closes the
  ``KafkaConsumer``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import Any, Protocol

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.subscription_state import AsyncConsumerRebalanceListener
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from consumer import delivery, kafka_compat
from consumer.buffer import DeliveryBuffer
from consumer.commits import CommitTracker
from consumer.config import ConsumerConfig
from consumer.dead_letter import DeadLetterWriter
from consumer.delivery import TP, Delivery
from consumer.log_limit import limit_retry_logs
from consumer.metrics import ClientTimings
from consumer.topic_watch import DeletedTopicWatch
from linkwatch.kafka_client import kafka_python_kwargs
from linkwatch.records import SAMPLES_TOPIC

log = logging.getLogger(__name__)

COORDINATOR_BACKOFF_INITIAL_MS = 100  # kafka-python's retry_backoff_ms
REVOKE_POLL_S = 0.01  # how often a revoke waiting for acks looks again
_OFFSET = attrgetter("offset")

Count = Callable[..., None]  # count(key, n=1): adds to the consumer's stats


class OffsetStore(Protocol):
    """Where processed offsets live next to the output (see :class:`~.sink.SqliteSink`)."""

    def offsets(self) -> dict[TP, int]:
        """Next offset to process per partition (only partitions the store has seen)."""
        ...


class _Listener(AsyncConsumerRebalanceListener):
    """Rebalance callbacks; they run on kafka-python's IO thread and must not block it."""

    def __init__(self, owner: FetchLoop) -> None:
        self.owner = owner

    async def on_partitions_revoked(self, revoked: Iterable[TopicPartition]) -> None:
        owner = self.owner
        revoked = list(revoked)
        if owner.kafka is not None and not owner.closing.is_set():
            # Records the application holds are acked before the done prefix is committed, so
            # the new owner does not process them again (bounded by revoke_wait_ms).
            await owner._await_in_flight(owner.kafka, owner._withhold(revoked))
        offsets = owner._release(revoked)
        if offsets and owner.kafka is not None:
            try:
                await kafka_compat.commit_in_callback(owner.kafka, _kafka_offsets(offsets), 10_000)
                owner._committed(offsets)
            except Exception as e:  # the new owner re-processes from the last commit
                log.warning("commit before revoke failed: %s", e)
                owner._count("commit_failed")

    async def on_partitions_assigned(self, assigned: Iterable[TopicPartition]) -> None:
        self.owner._adopt(assigned)

    async def on_partitions_lost(self, lost: Iterable[TopicPartition]) -> None:
        self.owner._release(lost)  # membership is gone: nothing can be committed


def _kafka_offsets(offsets: dict[TP, int]) -> dict[TopicPartition, OffsetAndMetadata]:
    return {TopicPartition(*tp): OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()}


class FetchLoop:
    """The pump thread and the state it keeps (see the module docstring).

    Either ``topics`` (group membership) or ``partitions`` (manual assignment); the caller
    checked which. Shares ``tracker``, ``timings`` and ``dead_letters`` with the application
    side and reports what it did through ``count``.
    """

    def __init__(
        self,
        config: ConsumerConfig,
        *,
        topics: Sequence[str],
        partitions: Sequence[TP],
        offset_store: OffsetStore | None,
        tracker: CommitTracker,
        timings: ClientTimings,
        dead_letters: DeadLetterWriter,
        count: Count,
    ) -> None:
        self.config = config
        self._topics = list(topics)
        self._partitions = list(partitions)
        self._store = offset_store
        self.tracker = tracker
        self.timings = timings
        self._dead_letters = dead_letters
        self._count = count
        self.buffer = DeliveryBuffer()
        self._assigned: dict[TP, int] = {}  # tp -> epoch; guarded by buffer.cond
        self._epoch = 0
        self.kafka: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._producer_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.closing = threading.Event()
        self._commit_now = threading.Event()
        self._commit_waiters: list[threading.Event] = []
        self._commit_in_flight = False
        self.error: BaseException | None = None
        self._leaders: dict[TP, int] = {}
        # with a group_id, once started: the coordinator lookup's backoff (lookups, waited_s)
        self.coordinator_backoff: kafka_compat.CoordinatorBackoff | None = None
        # partition being revoked -> its unfinished records no longer in the application's hands
        self._held_back: dict[TP, int] = {}
        self._resume: dict[TP, int] = {}  # revoked partition -> offset to refetch from if re-assigned
        self._unreadable: tuple[TP, int, int] | None = None  # (partition, offset, failed fetches in a row)
        self._topic_watch = DeletedTopicWatch(config.topic_gone_s)

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Create the ``KafkaConsumer``, join the group (or assign) and start the pump."""
        cfg = self.config
        consumer = KafkaConsumer(
            **(kafka_python_kwargs(cfg.kafka, "consumer") | {"client_id": cfg.client_id}),
            group_id=cfg.group_id,
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
        self.kafka = consumer
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

    def _await_metadata(self, consumer: KafkaConsumer, timeout_s: float = 10.0) -> None:
        # A group leader whose metadata lacks a subscribed topic assigns none of its partitions
        # (and kafka-python does not refresh it for up to metadata_max_age_ms): load it first.
        deadline = time.monotonic() + timeout_s
        for topic in self._topics:
            while not consumer.partitions_for_topic(topic) and time.monotonic() < deadline:
                time.sleep(0.2)
            if not consumer.partitions_for_topic(topic):
                log.warning("topic %s has no partitions yet; it is assigned once metadata shows it", topic)

    def stop(self, timeout_s: float) -> None:
        """Stop the pump (it commits the processed prefix and leaves the group) and close the
        samples producer. Idempotent."""
        self.closing.set()
        with self.buffer.cond:
            self.buffer.cond.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=5)

    # ----------------------------------------------------------------- for the application side

    def assignment(self) -> set[TP]:
        with self.buffer.cond:
            return set(self._assigned)

    def redeliver(self, d: Delivery) -> None:
        """A failed record to retry: first in line if its partition is still assigned under
        its epoch; if the partition is being revoked it is no longer in the application's
        hands (counted for the revoke's wait); else dropped."""
        with self.buffer.cond:
            if self._assigned.get(d.tp) == d.epoch:
                self.buffer.put(d, front=True)
                self.buffer.cond.notify()
            elif d.tp in self._held_back:
                self._held_back[d.tp] += 1

    def commit(self, timeout_s: float) -> None:
        """Ask the pump to commit the processed prefix now and wait (at most ``timeout_s``)."""
        done = threading.Event()
        self._commit_waiters.append(done)
        self._commit_now.set()
        done.wait(timeout_s)

    def leader(self, tp: TP) -> int:
        """The partition's leader broker as last known (-1 if unknown); cached until it is
        assigned again."""
        leader = self._leaders.get(tp)
        if leader is None and self.kafka is not None:
            leader = kafka_compat.leader_for(self.kafka, TopicPartition(*tp))
            if leader is not None and leader >= 0:
                self._leaders[tp] = leader
        return leader if leader is not None else -1

    # ----------------------------------------------------------------- assignment (IO / pump thread)

    def _adopt(self, tps: Iterable[TopicPartition]) -> None:
        stored = self._store.offsets() if self._store is not None else {}
        with self.buffer.cond:
            for tp in tps:
                key = (tp.topic, tp.partition)
                self._epoch += 1
                self._assigned[key] = self._epoch
                self.tracker.assign(key, self._epoch)
                self._leaders.pop(key, None)
                # kafka-python keeps the fetch position of a partition assigned again; records
                # delivered but not finished before the revoke must be fetched again.
                start = stored.get(key, self._resume.get(key))
                if start is not None and self.kafka is not None:
                    self.kafka.seek(TopicPartition(*key), start)
            self._resume.clear()
        self._count("assigned", 0)

    def _withhold(self, tps: Iterable[TopicPartition]) -> set[TP]:
        """Stop handing out records of partitions being revoked: they leave the assignment (no
        fetched record of theirs is accepted, a failed one is not redelivered) and their
        buffered records are dropped. Acks still count until :meth:`_release`. Returns the keys."""
        keys = {(tp.topic, tp.partition) for tp in tps}
        with self.buffer.cond:
            for key in keys:
                self._assigned.pop(key, None)
                self._held_back[key] = self._held_back.get(key, 0) + self.buffer.tp_records.get(key, 0)
            dropped = self.buffer.drop(keys)
        if dropped:
            self.timings.metrics.drop("revoked", dropped)
            self._count("dropped_revoked", dropped)
        return keys

    def _in_flight(self, keys: Iterable[TP]) -> int:
        """Records of ``keys`` in the application's hands: delivered, not finished, and neither
        dropped from the buffer nor given back by a failure since :meth:`_withhold`."""
        with self.buffer.cond:
            held_back = {key: self._held_back.get(key, 0) for key in keys}
        return sum(max(0, self.tracker.unfinished(key) - n) for key, n in held_back.items())

    async def _await_in_flight(self, consumer: KafkaConsumer, keys: set[TP]) -> None:
        """Wait up to ``revoke_wait_ms`` for the records of ``keys`` the application holds to be
        acked (or failed); :meth:`stop` ends the wait. On kafka-python's event loop, so heartbeats
        go on meanwhile. Records still unacked then are counted (``revoke_wait_unacked``): their
        acks will be stale and the new owner processes them again, as without the wait."""
        left = self._in_flight(keys)
        if not left:
            return
        started = time.monotonic()
        deadline = started + self.config.revoke_wait_ms / 1000
        while left and time.monotonic() < deadline and not self.closing.is_set():
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
        with self.buffer.cond:
            for key in keys:
                self._held_back.pop(key, None)
        offsets = {}
        for key in keys:
            revoked = self.tracker.revoke(key)
            if revoked.resume is not None:
                with self.buffer.cond:
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
        assert self.kafka is not None
        consumer = self.kafka
        last_commit = last_publish = time.monotonic()
        try:
            while not self.closing.is_set():
                self._check_deleted_topics(consumer, time.monotonic())
                self._plan_fetch(consumer)
                with self.buffer.cond:
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
            self.error = e
        finally:
            with contextlib.suppress(Exception):
                self._commit(consumer)
            with contextlib.suppress(Exception):
                self._publish()  # the last (partial) window
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False, timeout_ms=10_000)
            with self.buffer.cond:
                self.buffer.cond.notify_all()

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
        with self.buffer.cond:
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
        with self.buffer.cond:
            topics = {tp[0] for tp in self._assigned} | set(self._topics)
        gone = self._topic_watch.check(kafka_compat.cluster(consumer), topics, now)
        if not gone:
            return
        for topic in gone:
            log.error("topic %s was deleted while consumed: its partitions are no longer consumed", topic)
        self._count("topics_deleted", len(gone))
        with self.buffer.cond:
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
        with self.buffer.cond:
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
                    self.buffer.put_many(key, recs)
            self.buffer.cond.notify_all()
            buffered = (self.buffer.bytes, len(self.buffer.queue))
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
        with self.buffer.cond:
            assigned = list(self._assigned)
            n = max(1, len(assigned))
            share_bytes = max(1, cfg.buffer_max_bytes // n)
            share_records = max(1, cfg.buffer_max_records // n)
            full = (
                self.buffer.bytes >= cfg.buffer_max_bytes or len(self.buffer.queue) >= cfg.buffer_max_records
            )
            load = {tp: self.buffer.tp_bytes.get(tp, 0) for tp in assigned}
            records = {tp: self.buffer.tp_records.get(tp, 0) for tp in assigned}
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
        coordinator never holds up fetching; an asked-for commit and the last one wait for the
        result."""
        waiters, self._commit_waiters = self._commit_waiters, []
        self._commit_now.clear()
        try:
            offsets = self.tracker.committable()
            if offsets and self.config.group_id:
                with self.buffer.cond:
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
                    # A send waits at most 1 s for metadata (a samples topic missing or its
                    # leader away): publishing the client's timings never stalls fetching for
                    # kafka-python's default minute; what is not sent is counted below.
                    self._producer = KafkaProducer(
                        **kafka_python_kwargs(self.config.kafka, "consumer-samples"), max_block_ms=1000
                    )
            for rec in records:
                self._producer.send(SAMPLES_TOPIC, value=rec.to_json(), key=rec.dedup_key().encode())
        except KafkaError as e:
            log.warning("publishing client timings failed: %s", e)
            self.timings.metrics.drop("samples_send_failed", len(records))
