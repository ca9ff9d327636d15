"""Ship records to ``linkwatch.samples`` through the on-disk spool.

:meth:`KafkaSink.submit` only appends to the spool (never blocks on Kafka); a background thread
(:meth:`start`) sends the oldest spooled records, acknowledges them once the broker confirmed
each one, and retries after ``retry_backoff_s`` while Kafka is unreachable. Within a batch a
record already confirmed is never sent again, so an outage produces no duplicates from this
agent (a crash between delivery and acknowledgement can: the record key, ``dedup_key()``, makes
them detectable downstream).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterable

from agent.config import KafkaOutputConfig
from agent.health import Health
from agent.output.spool import Spool
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
        self._delivered: list[bool] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.sent = 0
        self._reported = (0, 0)

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
        """Send one batch; True if the spool shrank (call again at once)."""
        if not self._batch:
            self._batch = self.spool.peek(BATCH)
            self._delivered = [False] * len(self._batch)
            if not self._batch:
                self._sync_health()
                return False
        producer = self._connect()
        if producer is None:
            return False
        futures = []
        for i, (key, value) in enumerate(self._batch):
            if self._delivered[i]:
                continue
            try:
                futures.append((i, producer.send(self.config.topic, key=key, value=value)))
            except Exception as e:  # KafkaTimeoutError on metadata while Kafka is down
                self._down(e)
                break
        for i, fut in futures:
            try:
                fut.get(timeout=self.config.send_timeout_s * 2)
                self._delivered[i] = True
            except Exception as e:
                self._down(e)
        if not all(self._delivered):
            return False
        self.spool.ack(len(self._batch))
        self.sent += len(self._batch)
        self._batch, self._delivered = [], []
        self.health.set_up(self.SOURCE, True)
        self._sync_health()
        return True

    def _down(self, e: BaseException) -> None:
        self.health.set_up(self.SOURCE, False, f"{type(e).__name__}: {e}")

    def _connect(self):
        if self._producer is not None:
            return self._producer
        from kafka import KafkaProducer
        from kafka.errors import KafkaError

        timeout_ms = int(self.config.send_timeout_s * 1000)
        try:
            self._producer = KafkaProducer(
                bootstrap_servers=self.config.bootstrap_servers,
                client_id=self.config.client_id,
                acks="all",
                linger_ms=50,
                max_block_ms=timeout_ms,
                request_timeout_ms=timeout_ms,
                delivery_timeout_ms=timeout_ms + 50,
                retries=3,
            )
        except (KafkaError, OSError) as e:
            self._down(e)
            return None
        return self._producer

    def _close_producer(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                self._producer.close(timeout=2)
            self._producer = None
