"""Ship records to ``linkwatch.samples`` through the on-disk spool.

:meth:`KafkaSink.submit` only appends to the spool (never blocks on Kafka); a background thread
(:meth:`start`) sends the oldest spooled records, acknowledges them once the broker confirmed
each one, and retries after ``retry_backoff_s`` while Kafka is unreachable.

Duplicates. The producer is idempotent and keeps retrying a sent record for up to
``delivery_timeout_s`` (the broker drops its own retries' duplicates). The sink never sends a
record again while the producer still holds it — an outage shorter than the delivery timeout
produces no duplicates, however long the sink waits — and never sends again a record the broker
confirmed. A record is sent a second time only when the producer gave up on it (its delivery
timeout passed, or a restart of the agent came between delivery and acknowledgement): the broker
may have written it, so that can duplicate it; it is counted
(``linkwatch_agent_spool_resent_total``), and the record key, ``dedup_key()``, lets the analyzer
drop the copy.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from agent.config import KafkaOutputConfig
from agent.health import Health
from agent.output.spool import Spool
from linkwatch.kafka_client import kafka_python_kwargs
from linkwatch.records import Record

log = logging.getLogger("linkwatch.agent.kafka")
BATCH = 500


class KafkaSink:
    SOURCE = "kafka_output"

    def __init__(self, config: KafkaOutputConfig, health: Health) -> None:
        self.config = config
        self.health = health
        self.spool = Spool(config.spool_dir, config.spool_max_bytes, config.segment_bytes)
        self._producer = None
        self._batch: list[tuple[bytes, bytes]] = []
        self._futures: list[Any] = []  # per batch record: the producer's future while it holds it
        self._delivered: list[bool] = []
        self._sent_at: float | None = None  # when the batch's oldest unresolved send went out
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self._reported = (0, 0)

    @property
    def resent(self) -> int:
        """Records sent again after the producer gave up on them (kept in :class:`Health`)."""
        return self.health.spool_resent

    def submit(self, records: Iterable[Record]) -> None:
        for r in records:
            self.spool.append(r.dedup_key().encode(), r.to_json())
        self._sync_health()
        self._wake.set()

    def _sync_health(self) -> None:
        oldest, errors = self.spool.dropped_oldest, self.spool.dropped_write_error
        if (oldest, errors) != self._reported:
            d_old, d_err = oldest - self._reported[0], errors - self._reported[1]
            if d_old:
                self.health.drop(
                    "spool_full", f"{d_old} oldest records", n=d_old, context=str(self.config.spool_dir)
                )
            if d_err:
                self.health.drop(
                    "spool_write_error", f"{d_err} records", n=d_err, context=str(self.config.spool_dir)
                )
            self._reported = (oldest, errors)
        self.health.spool_records = len(self.spool)

    # -- sending ------------------------------------------------------------------------------
    def start(self) -> KafkaSink:
        self._thread = threading.Thread(target=self._run, name="linkwatch-kafka-sink", daemon=True)
        self._thread.start()
        return self

    def stop(self, drain_s: float = 5.0) -> None:
        deadline = time.monotonic() + drain_s
        while len(self.spool) and time.monotonic() < deadline and self.health.source_up.get(self.SOURCE):
            self._wake.set()
            time.sleep(0.1)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=drain_s + self.config.send_timeout_s)
        self._close_producer()
        done = next((i for i, ok in enumerate(self._delivered) if not ok), len(self._delivered))
        if done:  # the confirmed head of an unfinished batch is not sent again after a restart
            self.spool.ack(done)
            self.sent += done
        self.spool.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                progressed = self.pump()
            except Exception as e:  # isolate: a sink bug must not kill the agent
                log.exception("kafka sink failed: %s", e)
                progressed = False
            if not progressed:
                self._wake.wait(self.config.retry_backoff_s)
                self._wake.clear()

    def pump(self) -> bool:
        """Send one batch, or wait on the one in flight; True if the spool shrank (call again)."""
        if not self._batch:
            self._batch = self.spool.peek(BATCH)
            self._futures = [None] * len(self._batch)
            self._delivered = [False] * len(self._batch)
            if not self._batch:
                self._sync_health()
                return False
        producer = self._connect()
        if producer is None:
            return False
        for i, (key, value) in enumerate(self._batch):
            if self._delivered[i] or self._futures[i] is not None:
                continue  # confirmed, or still held by the producer: never sent twice
            try:
                self._futures[i] = producer.send(self.config.topic, key=key, value=value)
            except Exception as e:  # KafkaTimeoutError on metadata while Kafka is down
                self._down(e)
                break
            if self._sent_at is None:
                self._sent_at = time.monotonic()
        self._await(self.config.send_timeout_s)
        if not all(self._delivered):
            return False
        self.spool.ack(len(self._batch))
        self.sent += len(self._batch)
        self._batch, self._futures, self._delivered, self._sent_at = [], [], [], None
        self.health.set_up(self.SOURCE, True)
        self._sync_health()
        return True

    def _await(self, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for the batch's futures; mark what is confirmed, take back
        what failed (to send again), and leave what is pending with the producer."""
        deadline = time.monotonic() + timeout_s
        for fut in self._futures:
            if fut is None or fut.is_done:
                continue
            with contextlib.suppress(Exception):  # not done in time: looked at below
                fut.get(timeout=max(0.0, deadline - time.monotonic()))
        failed = pending = 0
        error: BaseException | None = None
        for i, fut in enumerate(self._futures):
            if fut is None or self._delivered[i]:
                continue
            if fut.succeeded():
                self._delivered[i] = True
                self._futures[i] = None
            elif fut.is_done:
                failed += 1
                error = fut.exception
                self._futures[i] = None
            else:
                pending += 1
        if pending and self._sent_at is not None and time.monotonic() - self._sent_at > self._give_up_s():
            # The producer should have failed these after its delivery timeout; a client that
            # holds them much longer is stuck: start a fresh one and send them again.
            failed += pending
            pending = 0
            error = TimeoutError(f"no outcome {self._give_up_s():.0f} s after sending")
            self._close_producer()
        if failed:
            self.health.spool_resent += failed
            self._sent_at = None
            self._down(error or RuntimeError("delivery failed"))
            if not pending:
                self._close_producer()  # a fresh client for the retry: no stale metadata or epoch
        elif pending:
            self._down(TimeoutError(f"{pending} records not yet confirmed after {timeout_s:g} s"))

    def _give_up_s(self) -> float:
        return self.config.delivery_timeout_s + self.config.send_timeout_s + 30.0

    def _down(self, e: BaseException) -> None:
        self.health.set_up(self.SOURCE, False, f"{type(e).__name__}: {e}")

    def _connect(self):
        if self._producer is not None:
            return self._producer
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        from linkwatch.errors import UnreachableError
        from linkwatch.reach import check_kafka

        timeout_ms = int(self.config.send_timeout_s * 1000)
        try:
            # Seconds and one line (the source's detail, logged when it changes) for a cluster
            # that does not answer, not a bootstrap timeout and the client's retry chatter.
            check_kafka(self.config, "kafka.bootstrap_servers")
            # Idempotent with unbounded retries inside the delivery timeout: the broker drops
            # the producer's own re-sends, so only the sink's re-sends can duplicate a record.
            kw = kafka_python_kwargs(self.config, "agent")
            self._producer = KafkaProducer(
                **(kw | {"client_id": self.config.client_id} if self.config.client_id else kw),
                acks="all",
                enable_idempotence=True,
                linger_ms=50,
                max_block_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
                delivery_timeout_ms=int(self.config.delivery_timeout_s * 1000),
            )
        except (KafkaError, OSError, UnreachableError) as e:
            self._down(e)
            return None
        return self._producer

    def _close_producer(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=2)
            self._producer = None
            # What it confirmed while closing counts; what it still held is taken back (sent
            # again later, and may then be a duplicate: the broker may have written it).
            for i, fut in enumerate(self._futures):
                if fut is not None and fut.succeeded():
                    self._delivered[i] = True
            self._futures = [None] * len(self._batch)
            self._sent_at = None
