"""``SkewAwarePartitioner``: Kafka's placement for cold keys, least-loaded of d candidates for hot ones.

Contract, per record with a key:

* a key that is not hot goes **exactly** where Kafka's default partitioner puts it
  (:func:`murmur2_partition`: murmur2 of the key bytes, made positive, modulo the partition
  count; the same as the Java client and kafka-python's ``DefaultPartitioner``), so consumers keep
  per-key order for it;
* a key that lossy counting finds hot (:mod:`producer.hot_keys`) goes to the least-loaded of its
  ``d`` candidate partitions (:func:`candidate_partitions`, home first, derived from the key
  alone), load as this producer sees it (:mod:`producer.load`) times an optional per-broker
  latency factor; ties go to the earlier candidate, so an idle cluster keeps a hot key home;
* a key that cools returns to its home partition (within two counting windows).

Records without a key are placed like ``DefaultPartitioner`` does (random among partitions with a
leader) and counted in the load. Memory is bounded (tracked keys capped per topic, one load entry
per partition, topics capped); every method is thread-safe (one lock, held only for counting and
choosing, never while calling ``broker_latency_s`` or doing I/O).

kafka-python 3.x takes an instance (``KafkaProducer(partitioner=SkewAwarePartitioner())``) and calls
:meth:`SkewAwarePartitioner.partition`; kafka-python 2.x took a callable
``(key_bytes, all_partitions, available)``, which :meth:`SkewAwarePartitioner.__call__` serves.
Acks come back through :meth:`SkewAwarePartitioner.watch` (``partitioner.watch(producer.send(...))``)
or :meth:`SkewAwarePartitioner.on_ack`.

Cost on the producer's hot path (``send`` runs the partitioner in the caller's thread, acks run
in the producer's I/O thread, and both share one GIL): a cold key costs what Kafka's default
costs (one murmur2) plus one lossy-counting step and one load update, under one lock; a hot key's
candidate list is computed once per counting window, not per record; load comparisons need no
decay (:mod:`producer.load`); and :meth:`SkewAwarePartitioner.watch` accounts acks per *batch*:
when kafka-python completes a batch, its I/O thread (the one that sends the batches) only appends
it to a queue, without a lock, instead of running two callbacks and taking the lock per record;
the next placement takes the queue into the loads.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kafka.partitioner import Partitioner, murmur2
from kafka.structs import TopicPartition

from producer.hot_keys import HotKeyTracker
from producer.load import PartitionLoad

# Broker id -> recent request latency in seconds (e.g. the p99 linkwatch publishes), None if unknown.
BrokerLatency = Callable[[int], float | None]


def murmur2_partition(key_bytes: bytes, num_partitions: int) -> int:
    """Kafka's default placement of a keyed record: ``toPositive(murmur2(key)) % numPartitions``."""
    return (murmur2(key_bytes) & 0x7FFFFFFF) % num_partitions


def candidate_partitions(key_bytes: bytes, num_partitions: int, d: int) -> list[int]:
    """``min(d, num_partitions)`` distinct partitions for a key, home partition first.

    Deterministic in the key alone (every producer computes the same list, so a hot key's records
    are spread over the same few partitions whichever producer sends them): candidate i is
    murmur2 of the key salted with i, with collisions resolved by probing the next partition.
    """
    if num_partitions < 1:
        raise ValueError(f"num_partitions must be >= 1, got {num_partitions}")
    want = min(d, num_partitions)
    out = [murmur2_partition(key_bytes, num_partitions)]
    seen = set(out)
    salt = 1
    while len(out) < want:
        p = murmur2_partition(key_bytes + b"\x00" + salt.to_bytes(2, "big"), num_partitions)
        while p in seen:  # probe: terminates because fewer than num_partitions are taken
            p = (p + 1) % num_partitions
        out.append(p)
        seen.add(p)
        salt += 1
    return out


def hot_key_candidates(share: float, num_partitions: int) -> int:
    """d for a hot key with ``share`` of the records, when ``candidates`` is not fixed.

    A key with at least 1/n of the records can never fit in one partition, and spread over a
    few it still tops its candidates with their own cold keys on them: it gets every partition
    (W-Choices, arXiv 1510.05714). A hot key under 1/n gets the seed's max(2, n // 5): the
    least-loaded of two already evens out what is left (see docs/skew.md for the measurements).
    """
    return num_partitions if share * num_partitions >= 1 else max(2, num_partitions // 5)


# How long the partitions with a leader are taken as read for hot keys' candidates: a leader
# change shows within this (kafka-python's default partitioner ignores availability for keyed
# records altogether).
AVAILABILITY_TTL_S = 0.1


@dataclass
class _Topic:
    tracker: HotKeyTracker
    load: PartitionLoad
    max_cached: int  # keys each cache below holds at most (it is emptied when full)
    n: int = 0  # the partition count the caches below are for
    ordered: list[int] = field(default_factory=list)  # sorted partitions (Kafka indexes into them)
    window: int = -1  # the tracker's window the candidate lists were computed in
    up: frozenset[int] = frozenset()  # partitions with a leader, as last read
    up_at: float = -math.inf
    # (key, d) -> (candidates, those with a leader): for the window and availability read last
    candidates: dict[tuple[bytes, int], tuple[list[int], list[int]]] = field(default_factory=dict)
    homes: dict[bytes, int] = field(default_factory=dict)  # key -> its home partition

    def home(self, key: bytes) -> int:
        """Kafka's partition for ``key`` (murmur2, the default partitioner's cost, paid once per
        key while it stays in the cache)."""
        p = self.homes.get(key)
        if p is None:
            if len(self.homes) >= self.max_cached:
                self.homes.clear()
            p = self.homes[key] = self.ordered[murmur2_partition(key, self.n)]
        return p

    def partitions(self, all_partitions: Sequence[int] | set[int]) -> list[int]:
        """The sorted partitions (cached while the count stays: Kafka only ever adds partitions)."""
        if len(all_partitions) != self.n:
            self.ordered = sorted(all_partitions)
            self.n = len(self.ordered)
            self.candidates.clear()
            self.homes.clear()
        return self.ordered

    def candidates_of(
        self, key: bytes, d: int, available: Callable[[], Sequence[int]], now: float
    ) -> tuple[list[int], list[int]]:
        """The key's candidate partitions (home first) and those of them with a leader (all,
        when none is known to have one), cached for the counting window; the partitions with a
        leader are read again every :data:`AVAILABILITY_TTL_S`."""
        if now - self.up_at > AVAILABILITY_TTL_S or now < self.up_at:
            up = frozenset(available())
            self.up_at = now
            if up != self.up:
                self.up = up
                self.candidates.clear()
        if self.window != self.tracker.windows or len(self.candidates) >= self.max_cached:
            self.candidates.clear()
            self.window = self.tracker.windows
        cached = self.candidates.get((key, d))
        if cached is None:
            cands = [self.ordered[i] for i in candidate_partitions(key, self.n, d)]
            usable = [c for c in cands if c in self.up] if self.up else cands
            cached = self.candidates[(key, d)] = (cands, usable)
        return cached


class SkewAwarePartitioner(Partitioner):
    def __init__(
        self,
        support: float = 0.01,
        epsilon: float = 0.002,
        candidates: int | None = None,
        window_records: int = 10_000,
        warmup_records: int | None = None,
        max_tracked_keys: int = 2_000,
        max_topics: int = 1_000,
        half_life_s: float = 5.0,
        in_flight_weight: float = 1.0,
        load_unit: str = "records",
        broker_latency_s: BrokerLatency | None = None,
        latency_scale_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``candidates`` is d; None sizes d per hot key (:func:`hot_key_candidates`: every
        partition for a key with ≥ 1/partitions of the records, else max(2, partitions // 5);
        candidate lists are prefix-stable, so a key whose share changes keeps its first candidates).
        ``support`` s = 0.01 and ``epsilon`` ε = 0.002 by default: a key that stays home adds at
        most s × partitions of an average partition's load to its home (0.12 at 12 partitions;
        the seed's 0.05 left 0.6); ε = s / 5 keeps a window's lossy counter, (1/ε)·ln(ε·W) ≈ 1 500
        entries at W = 10 000, under the ``max_tracked_keys`` cap, and the hot set is at most
        1/(s − ε) = 125 keys.
        ``load_unit`` is ``"records"`` (the seed's message counts) or ``"bytes"`` (value + key bytes).
        ``broker_latency_s`` (optional) multiplies a candidate's load by
        ``1 + latency / latency_scale_s`` for the broker leading it; it is called under no lock and
        must be cheap (e.g. read a cached value); it raising or returning None counts as no signal."""
        if candidates is not None and candidates < 1:
            raise ValueError(f"candidates must be >= 1 or None, got {candidates}")
        if load_unit not in ("records", "bytes"):
            raise ValueError(f"load_unit must be 'records' or 'bytes', got {load_unit!r}")
        if latency_scale_s <= 0:
            raise ValueError(f"latency_scale_s must be > 0, got {latency_scale_s}")
        if max_topics < 1:
            raise ValueError(f"max_topics must be >= 1, got {max_topics}")
        self._new_tracker = lambda: HotKeyTracker(
            support, epsilon, window_records, warmup_records, max_tracked_keys
        )
        self._new_tracker()  # validates the counting parameters now, not at the first record
        PartitionLoad(half_life_s, in_flight_weight)  # validates the load parameters
        self._half_life_s = half_life_s
        self._in_flight_weight = in_flight_weight
        self.candidates = candidates
        self.max_topics = max_topics
        self.max_tracked_keys = max_tracked_keys
        self.load_unit = load_unit
        self.broker_latency_s = broker_latency_s
        self.latency_scale_s = latency_scale_s
        self._clock = clock
        self._lock = threading.Lock()
        self._topics: dict[str, _Topic] = {}
        self.counts: dict[str, int] = {
            "home": 0,
            "moved": 0,
            "unkeyed": 0,
            "acks_ignored": 0,
            "ack_errors": 0,
        }
        self.dropped_topics = 0
        self._batches: dict[Any, int] = {}  # a batch's future -> its records watched (acked together)
        self._done: deque[tuple[Any, TopicPartition, float]] = deque()  # completed, not yet taken

    # kafka-python 3.x entry point
    def partition(
        self,
        topic: str,
        key: Any,
        serialized_key: bytes | None,
        value: Any,
        serialized_value: bytes | None,
        cluster: Any,
    ) -> int:
        parts = cluster.partitions_for_topic(topic)
        if not parts:
            raise ValueError(f"Topic {topic} not found in ClusterMetadata")
        size = _size(serialized_key) + _size(serialized_value)

        def available() -> Sequence[int]:
            return cluster.available_partitions_for_topic(topic) or ()

        def leader_of(p: int) -> int | None:
            leader = cluster.leader_for_partition(TopicPartition(topic, p))
            return leader if isinstance(leader, int) and leader >= 0 else None

        return self._choose(topic, serialized_key, parts, available, size, leader_of)

    # kafka-python 2.x entry point: partitioner(key_bytes, all_partitions, available)
    def __call__(
        self, key_bytes: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
    ) -> int:
        return self.choose("", key_bytes, all_partitions, available, _size(key_bytes), None)

    def choose(
        self,
        topic: str,
        key_bytes: bytes | None,
        all_partitions: Sequence[int],
        available: Sequence[int] = (),
        size: int = 0,
        leader_of: Callable[[int], int | None] | None = None,
    ) -> int:
        """The partition for one record (every client adapter ends here).

        ``all_partitions`` in any order (Kafka indexes into them sorted); ``available`` are
        those with a leader now (empty: unknown, all are taken as available)."""
        return self._choose(topic, key_bytes, all_partitions, lambda: available, size, leader_of)

    def _choose(
        self,
        topic: str,
        key_bytes: bytes | None,
        all_partitions: Sequence[int] | set[int],
        available: Callable[[], Sequence[int]],
        size: int,
        leader_of: Callable[[int], int | None] | None,
    ) -> int:
        """:meth:`choose` with ``available`` read only when needed (a hot key or no key)."""
        if not all_partitions:
            raise ValueError(f"no partitions for topic {topic!r}")
        amount = 1 if self.load_unit == "records" else max(size, 1)
        if key_bytes is None:
            with self._lock:
                ordered = self._topic(topic).partitions(all_partitions)
            p = random.choice(list(available()) or ordered)
            with self._lock:
                if self._done:
                    self._take_acks_locked()
                self._topic(topic).load.sent(p, amount, self._clock())
                self.counts["unkeyed"] += 1
            return p
        key_bytes = bytes(key_bytes)
        # One lock for a record: count its key, place it, add its load. A latency signal is read
        # outside the lock (its contract), so a hot key with one takes the lock twice.
        with self._lock:
            if self._done:
                self._take_acks_locked()
            t = self._topic(topic)
            ordered = t.partitions(all_partitions)
            now = self._clock()
            if not t.tracker.observe(key_bytes):
                home = t.home(key_bytes)
                t.load.sent(home, amount, now)
                self.counts["home"] += 1
                return home
            share = t.tracker.share(key_bytes) if self.candidates is None else 0.0
            d = self.candidates if self.candidates is not None else hot_key_candidates(share, t.n)
            cands, usable = t.candidates_of(key_bytes, d, available, now)
            if self.broker_latency_s is None or leader_of is None or len(usable) < 2:
                return self._place(t, cands, usable, _NO_FACTORS, amount, now)
        factors = self._latency_factors(usable, leader_of)
        with self._lock:
            return self._place(self._topic(topic), cands, usable, factors, amount, self._clock())

    def _place(
        self, t: _Topic, cands: list[int], usable: list[int], factors: list[float], amount: float, now: float
    ) -> int:
        """KG2: the usable candidate with the least load (ties: the earlier one), home when none
        is usable; its load added. Under the lock."""
        if usable:
            scores = t.load.relative_scores(usable)
            if factors is not _NO_FACTORS:
                scores = [s * f for s, f in zip(scores, factors, strict=True)]
            p = usable[scores.index(min(scores))]
        else:
            p = cands[0]
        t.load.sent(p, amount, now)
        self.counts["moved" if p != cands[0] else "home"] += 1
        return p

    def _latency_factors(
        self, parts: list[int], leader_of: Callable[[int], int | None] | None
    ) -> list[float]:
        if self.broker_latency_s is None or leader_of is None:
            return _NO_FACTORS
        out = []
        for p in parts:
            try:
                broker = leader_of(p)
                lat = self.broker_latency_s(broker) if broker is not None else None
            except Exception:  # an outside signal: a failure means "no signal", never a lost record
                lat = None
            out.append(1.0 + max(0.0, lat) / self.latency_scale_s if lat is not None else 1.0)
        return out

    def _topic(self, topic: str) -> _Topic:
        """Per-topic state, created on first use; past ``max_topics`` the oldest is dropped (counted)."""
        t = self._topics.get(topic)
        if t is None:
            if len(self._topics) >= self.max_topics:
                del self._topics[next(iter(self._topics))]
                self.dropped_topics += 1
            t = self._topics[topic] = _Topic(
                self._new_tracker(),
                PartitionLoad(self._half_life_s, self._in_flight_weight),
                self.max_tracked_keys,
            )
        return t

    def on_ack(self, topic: str, partition: int, size: int = 0) -> None:
        """One record acked by the broker. Acks for a partition this producer never sent to are
        ignored and counted (``counts["acks_ignored"]``), so bad input cannot grow memory."""
        self._acked(topic, partition, 1 if self.load_unit == "records" else max(size, 1))

    def _acked(self, topic: str, partition: int, amount: float) -> None:
        with self._lock:
            self._acked_locked(topic, partition, amount)

    def _acked_locked(self, topic: str, partition: int, amount: float) -> None:
        t = self._topics.get(topic)
        if t is None or not t.load.knows(partition):
            self.counts["acks_ignored"] += 1
            return
        t.load.acked(partition, amount, self._clock())

    def watch(self, future: Any) -> Any:
        """Feed the ack of a kafka-python ``send()`` future into the load; returns the future.

        Counted per batch: kafka-python 3's record future carries its batch's future
        (``_produce_future``, with its ``topic_partition``); the records watched in a batch are
        counted here, and when the batch completes the I/O thread only appends it to a queue
        (no lock: a lock the sending thread holds would make the I/O thread wait for the GIL
        too, up to a switch interval, before it sends anything more); the next placement takes
        the queue into the loads (:meth:`take_acks`). A batch that failed counts its records in
        ``counts["ack_errors"]`` (a record the broker rejected inside an acked batch counts as
        acked). With ``load_unit="bytes"``, or a future without a batch future, each record's
        own callbacks are used."""
        batch = getattr(future, "_produce_future", None)
        tp = getattr(batch, "topic_partition", None)
        if tp is None or self.load_unit != "records":
            future.add_callback(self._record_acked)
            future.add_errback(lambda _exc: self.on_ack_error())
            return future
        with self._lock:
            first = batch not in self._batches
            self._batches[batch] = self._batches.get(batch, 0) + 1
        if first:  # a batch already done calls back at once; its records are taken then
            batch.add_both(self._batch_done, batch, tp)
        return future

    def _record_acked(self, md: Any) -> None:
        self.on_ack(md.topic, md.partition, max(md.serialized_key_size, 0) + max(md.serialized_value_size, 0))

    def _batch_done(self, batch: Any, tp: TopicPartition, _result: Any) -> None:
        self._done.append((batch, tp, self._clock()))  # deque.append: atomic, no lock

    def take_acks(self) -> None:
        """Take the batches completed since the last call into the loads (every placement
        does; call it before reading the loads yourself)."""
        with self._lock:
            self._take_acks_locked()

    def _take_acks_locked(self) -> None:
        done = self._done
        while done:
            batch, tp, at = done.popleft()
            n = self._batches.pop(batch, 0)
            if batch.exception is not None:
                self.counts["ack_errors"] += n
            elif n:
                t = self._topics.get(tp.topic)
                if t is None or not t.load.knows(tp.partition):
                    self.counts["acks_ignored"] += n
                else:
                    t.load.acked(tp.partition, n, at)

    def on_ack_error(self) -> None:
        """One record failed; counted only: its share of "in flight" decays away (producer.load)."""
        with self._lock:
            self.counts["ack_errors"] += 1

    def hot_keys(self, topic: str) -> list[bytes]:
        with self._lock:
            t = self._topics.get(topic)
            return [k for k in t.tracker.hot_keys() if isinstance(k, bytes)] if t else []

    def cached_keys(self) -> int:
        """Keys held by the per-topic caches of home partitions and hot keys' candidates (each
        at most ``max_tracked_keys`` per topic)."""
        with self._lock:
            return sum(len(t.homes) + len(t.candidates) for t in self._topics.values())

    def tracked_keys(self) -> int:
        """Keys held in memory over all topics (bounded by max_topics × (cap + 1/(s − ε)))."""
        with self._lock:
            return sum(t.tracker.tracked() for t in self._topics.values())


_NO_FACTORS: list[float] = []  # no latency signal: the loads alone decide


def _size(b: bytes | None) -> int:
    return len(b) if b is not None else 0
