"""The window state's feed read by the driver itself: ``window_feed: driver`` (the default).

Why not a Spark query: the incremental window state lives in the driver, so every record the
window stream reads is brought to the driver whole (``collect``) and decoded there again; the
Spark query adds only its micro-batch, whose fixed cost on a small machine (3.5–5 s a batch
measured beside the archive query on 2 cores, over the 2 s trigger at 22 records/s as at
4,000) is most of the time from a window's end to its evaluation. This feed reads the samples
topic with a plain Kafka consumer in a driver thread and hands each poll's records to the
state: the state's input is the same, without the micro-batch in front of it. The archive stays
a Spark query (exactly-once Parquet, the drop counters, the batch report's input).

Contract, the same as :func:`spark_metrics.streaming.start_window_stream`'s:

* It starts at ``starting_timestamp_ms`` (the state's horizon; a partition with nothing that
  recent starts at its end) on every start — the driver state does not survive a restart, so
  nothing is committed and no consumer group is joined (no rebalance can stall it); partitions
  added to the topic later are picked up within ``METADATA_REFRESH_S`` from their beginning.
* A record the archive query's checks drop (:func:`spark_metrics.streaming.classify`: a
  tombstone, empty, over ``max_record_bytes``, not a usable envelope, event time outside the
  bounds around the processing time) is dropped here too, uncounted: the archive counts it,
  once (``linkwatch_analyzer_stream_dropped_total``). A record with a usable envelope that the
  state cannot use is counted by the state, as from the Spark query.
* Bounded: one poll brings at most ``max_records`` records (and kafka-python's fetch buffers
  are bounded by its ``fetch_max_bytes``); the state bounds what it keeps.
* Caught up: at the start it notes each partition's end offset (read before the lookup by
  time) and sets :attr:`caught_up` (then calls ``on_caught_up``) once every partition's position
  has reached it. Until then the state holds some partitions' records and not others' (one poll
  brings what the fetches returned, partition by partition), and an evaluation on it would judge
  brokers whose samples are still unread; the service waits for it (the Spark query's first
  micro-batch reads every partition up to the ends at its start, at once).
* ``on_records`` runs in the feed's thread; an exception from it, or from the consumer, stops
  the feed: :attr:`isActive` turns false and :meth:`exception` says why, and the service starts
  a new one from a rebuilt state (as for a failed window query). ``name``, ``isActive``,
  ``exception()``, ``stop()`` and ``recentProgress`` are the part of Spark's
  ``StreamingQuery`` the service and the benches read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from linkwatch import records as R
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs

log = logging.getLogger(__name__)

FEED_NAME = "linkwatch-samples-windows-feed"
METADATA_REFRESH_S = 30.0  # how soon partitions added to the topic are read
POLL_MS = 200  # longest wait for records in one poll (also how soon a stop is seen)
PROGRESS_KEPT = 100  # polls kept in recentProgress (as Spark keeps its last progress reports)


def envelope_reason(obj: object) -> str | None:
    """Why :func:`spark_metrics.streaming.classify` drops a parsed value (its envelope checks,
    in its order, without the event-time bound), or None for a usable envelope."""
    if not isinstance(obj, dict):
        return "not_object"
    v = obj.get("v")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        return "bad_version"
    if v > R.SCHEMA_VERSION:
        return "future_version"
    if obj.get("kind") not in R.KINDS:
        return "unknown_kind"
    ts_ms = obj.get("ts_ms")
    if obj.get("key") is None or ts_ms is None:
        return "missing_field"
    if not isinstance(ts_ms, int) or isinstance(ts_ms, bool):
        return "bad_type"
    if ts_ms < 0:
        return "too_old"
    if ts_ms > R.MAX_TS_MS:
        return "too_new"
    return None


def admitted(
    values: Iterable[bytes | None],
    now_ms: int,
    max_age_ms: int,
    max_lead_ms: int,
    max_record_bytes: int,
    dropped: Any,
    kinds: frozenset[str],
) -> list[R.Record]:
    """The records of ``kinds`` among raw Kafka values. What the archive query's checks drop
    is skipped (the archive counts it); a usable envelope whose body the record schema refuses
    is counted in ``dropped[reason]`` (the state's counter), as the state counts the Spark
    feed's rows. Each value is parsed once (the Spark feed parsed it in the JVM, then again in
    Python)."""
    out: list[R.Record] = []
    low, high = now_ms - max_age_ms, now_ms + max_lead_ms
    for value in values:
        if value is None or len(value) > max_record_bytes or not value.strip():
            continue  # tombstone, oversize, empty
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue  # not_json
        if envelope_reason(obj) is not None or not low <= obj["ts_ms"] <= high:
            continue
        if obj["kind"] not in kinds:
            continue
        try:
            out.append(R.from_dict(obj))
        except R.RecordError as e:
            dropped[e.reason] += 1
    return out


class WindowFeed:
    """A driver thread reading ``topic`` into ``on_records`` (see the module contract)."""

    name = FEED_NAME

    def __init__(
        self,
        kafka: KafkaClientConfig | str,
        topic: str,
        on_records: Callable[[list[R.Record]], None],
        starting_timestamp_ms: int,
        kinds: Iterable[str],
        dropped: Any,
        max_age_ms: int,
        max_lead_ms: int,
        max_record_bytes: int,
        max_records: int = 5_000,
        clock: Callable[[], float] = time.time,
        on_caught_up: Callable[[], None] | None = None,
    ) -> None:
        self.kafka, self.topic = kafka, topic
        self.on_records = on_records
        self.starting_timestamp_ms = starting_timestamp_ms
        self.kinds = frozenset(kinds)
        self.dropped = dropped
        self.max_age_ms, self.max_lead_ms, self.max_record_bytes = max_age_ms, max_lead_ms, max_record_bytes
        self.max_records = max_records
        self.clock = clock
        self.recentProgress: deque[dict[str, Any]] = deque(maxlen=PROGRESS_KEPT)
        self.caught_up = threading.Event()
        self.on_caught_up = on_caught_up
        # Partition -> the end offset it had at the start, until the position reaches it.
        self._behind: dict[Any, int] = {}
        self._read_at_start = 0  # records polled before caught_up (for its log line)
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name=FEED_NAME, daemon=True)
        self._batch = 0

    def start(self) -> WindowFeed:
        self._thread.start()
        return self

    @property
    def isActive(self) -> bool:  # StreamingQuery's spelling
        return self._thread.is_alive()

    def exception(self) -> Exception | None:
        return self._error

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    # --- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = None
        try:
            consumer = self._connect()
            if consumer is None:
                return  # stopped before the cluster answered
            assigned: set[Any] = set()
            refreshed = -METADATA_REFRESH_S
            while not self._stop.is_set():
                # Until the topic has partitions, look every poll (an analyzer started first).
                if not assigned or time.monotonic() - refreshed >= METADATA_REFRESH_S:
                    self._assign_new(consumer, assigned, first=not assigned)
                    refreshed = time.monotonic()
                if not assigned:
                    self._mark_caught_up()  # no partition yet: nothing was there to read
                    self._stop.wait(POLL_MS / 1000)
                    continue
                self._poll_once(consumer)
                if not self.caught_up.is_set():
                    self._check_caught_up(consumer)
        except Exception as e:  # the feed's end is reported (isActive, exception()), not raised
            if not self._stop.is_set():
                self._error = e
                log.exception("the window feed from %s stopped", self.topic)
        finally:
            if consumer is not None:
                try:
                    consumer.close()
                except Exception:
                    log.debug("closing the window feed's consumer failed", exc_info=True)

    def _connect(self) -> Any:
        """The consumer, once the cluster answers (:func:`linkwatch.reach.connect`): an
        unreachable cluster is one warning line naming the address and why, then tries with
        back-off until ``stop`` (as the Spark queries retry) — not an end of the feed, which
        would rebuild the state from the archive at every evaluation."""
        from kafka import KafkaConsumer

        from linkwatch.kafka_client import client_config, security_kwargs
        from linkwatch.reach import KafkaReach, connect

        cfg = client_config(self.kafka)

        def build() -> Any:
            return KafkaConsumer(
                **kafka_python_kwargs(cfg, "analyzer-windows"),
                group_id=None,
                enable_auto_commit=False,
                auto_offset_reset="earliest",  # a position retention removed: the oldest left
                max_poll_records=self.max_records,
                # Partitions added to the topic are in the metadata when the feed looks.
                metadata_max_age_ms=int(METADATA_REFRESH_S * 1000),
            )

        reach = KafkaReach("analyzer-windows", registry=None, logger=log)
        return connect(
            build,
            cfg.servers,
            reach,
            self._stop,
            "kafka.bootstrap_servers",
            client_options=security_kwargs(cfg),
        )

    def _assign_new(self, consumer: Any, assigned: set[Any], first: bool) -> None:
        """Assign partitions not read yet: at the start from ``starting_timestamp_ms``, later
        (partitions added to the topic while the feed runs) from their beginning."""
        from kafka import TopicPartition

        found = consumer.partitions_for_topic(self.topic) or set()
        new = [
            TopicPartition(self.topic, p)
            for p in sorted(found)
            if TopicPartition(self.topic, p) not in assigned
        ]
        if not new:
            return
        consumer.assign([*assigned, *new])
        if first:
            # The ends first: a partition with nothing as recent as the horizon starts at the end
            # it had *before* the lookup by time, so a record appended between the two calls
            # is read, not skipped.
            ends = consumer.end_offsets(new)
            at = consumer.offsets_for_times({tp: self.starting_timestamp_ms for tp in new})
            for tp in new:
                consumer.seek(tp, at[tp].offset if at.get(tp) is not None else ends[tp])
            self._behind = dict(ends)
        else:
            consumer.seek_to_beginning(*new)
        assigned.update(new)

    def _poll_once(self, consumer: Any) -> None:
        started = time.monotonic()
        polled = consumer.poll(timeout_ms=POLL_MS, max_records=self.max_records)
        values = [m.value for batch in polled.values() for m in batch]
        if not values:
            return
        if not self.caught_up.is_set():
            self._read_at_start += len(values)
        recs = admitted(
            values,
            int(self.clock() * 1000),
            self.max_age_ms,
            self.max_lead_ms,
            self.max_record_bytes,
            self.dropped,
            self.kinds,
        )
        self.on_records(recs)
        self.recentProgress.append(
            {
                "name": FEED_NAME,
                "batchId": self._batch,
                "numInputRows": len(values),
                "durationMs": {"triggerExecution": int((time.monotonic() - started) * 1000)},
            }
        )
        self._batch += 1

    def _check_caught_up(self, consumer: Any) -> None:
        """Drop the partitions whose position reached their end at the start; none left is
        :attr:`caught_up`. A position is local after a seek or a fetch (no request)."""
        for tp, end in list(self._behind.items()):
            if consumer.position(tp) >= end:
                del self._behind[tp]
        if not self._behind:
            self._mark_caught_up()

    def _mark_caught_up(self) -> None:
        if self.caught_up.is_set():
            return
        self.caught_up.set()
        log.info(
            "the window feed read %s up to where it started in %.1f s (%d records)",
            self.topic,
            time.monotonic() - self._started,
            self._read_at_start,
        )
        if self.on_caught_up is not None:
            self.on_caught_up()

    @property
    def behind(self) -> list[int]:
        """The partitions not yet read up to their end at the start (for a warning)."""
        return sorted(tp.partition for tp in list(self._behind))
