"""Samples record keys from data topics and counts them with lossy counting, per topic.

A plain consumer (no group, no commits) reads from the end of each topic; every
``sample_every``-th record's key is counted. Memory per topic is bounded by lossy counting;
each poll is bounded by ``max_records`` and ``max_poll_s``.

A sampler that falls behind does not read each partition's backlog in turn: a fetch drains one
partition before the next, so the hottest partition's keys would be read last and undercounted
against the others for as long as it stays behind. Instead, before each poll whose backlog
exceeds what one poll reads (``max_records``, and what the sampler has read per second times
``max_poll_s``), every partition skips ahead by the same share of its own backlog: what is
read then covers the same recent span of time on every partition, and the keys' counts keep
their proportions. The records skipped are counted (``skipped``); the lossy-counting
guarantees hold over the records read.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import TypeVar

from kafka.errors import KafkaError

from linkwatch.aggregates import HotKey
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from linkwatch.lossy_counting import LossyCounter

log = logging.getLogger(__name__)

MAX_PARTITIONS_PER_KEY = 16

P = TypeVar("P")


def catch_up_skips(backlog: Mapping[P, int], budget: int) -> dict[P, int]:
    """Records to skip per partition so that at most ``budget`` of the ``backlog`` remain, each
    partition keeping the same share of its own backlog (rounded down, so never more than the
    budget in all); nothing is skipped when the backlog fits the budget."""
    total = sum(max(0, n) for n in backlog.values())
    if total <= budget:
        return {}
    keep = max(0, budget) / total
    return {p: n - int(n * keep) for p, n in backlog.items() if n > 0 and n - int(n * keep) > 0}


class KeySampler:
    def __init__(
        self,
        kafka: KafkaClientConfig | str,
        topics: list[str],
        support: float = 0.05,
        epsilon: float = 0.005,
        sample_every: int = 1,
        max_records: int = 20_000,
        from_beginning: bool = False,
        max_poll_s: float = 1.0,
    ) -> None:
        from kafka import KafkaConsumer

        self.topics = list(topics)
        self.sample_every = max(1, sample_every)
        self.max_records = max_records
        self.max_poll_s = max_poll_s
        self.counters = {t: LossyCounter(support, epsilon) for t in self.topics}
        self._partitions: dict[tuple[str, str], set[int]] = defaultdict(set)
        self._seen = 0
        self.skipped = 0  # records skipped ahead while behind (see the module docstring)
        self.catch_up_failures = 0  # polls whose offsets could not be read in time
        self._read_per_s: float | None = None  # the reading speed seen, for the next budget
        self._consumer = KafkaConsumer(
            **kafka_python_kwargs(kafka, "key-sampler"),
            enable_auto_commit=False,
            auto_offset_reset="earliest" if from_beginning else "latest",
            group_id=None,
        )
        self._assigned = False

    def _assign(self) -> None:
        from kafka import TopicPartition

        tps = [
            TopicPartition(t, p)
            for t in self.topics
            for p in sorted(self._consumer.partitions_for_topic(t) or [])
        ]
        if tps:
            self._consumer.assign(tps)
            self._assigned = True

    def poll(self, timeout_ms: int = 200) -> int:
        """Read and count what is available now (at most ``max_records`` and ``max_poll_s``);
        returns the number of records read."""
        if not self._assigned:
            self._assign()
            if not self._assigned:
                return 0
        self._catch_up()
        read = 0
        started = time.monotonic()
        deadline = started + self.max_poll_s
        while read < self.max_records and time.monotonic() < deadline:
            batch = self._consumer.poll(timeout_ms=timeout_ms, max_records=min(5000, self.max_records - read))
            if not batch:
                break
            for tp, records in batch.items():
                for rec in records:
                    read += 1
                    self._seen += 1
                    if rec.key is None or self._seen % self.sample_every:
                        continue
                    key = rec.key.decode("utf-8", "replace")
                    self.counters[tp.topic].add(key)
                    parts = self._partitions[(tp.topic, key)]
                    if len(parts) < MAX_PARTITIONS_PER_KEY:
                        parts.add(tp.partition)
        took = time.monotonic() - started
        if took >= self.max_poll_s and read:  # cut by the time limit: reading speed was the bound
            rate = read / took
            self._read_per_s = rate if self._read_per_s is None else 0.5 * self._read_per_s + 0.5 * rate
        # Forget partitions of keys the counters dropped (keeps this map as bounded as they are).
        live = {(t, k) for t, c in self.counters.items() for k, _ in c.frequent()}
        for ident in [i for i in self._partitions if i not in live]:
            del self._partitions[ident]
        return read

    def _catch_up(self) -> None:
        """Skip ahead by the same share of every partition's backlog when it exceeds one poll's
        budget (the module docstring says why)."""
        budget = self.max_records
        if self._read_per_s is not None:
            budget = min(budget, int(self._read_per_s * self.max_poll_s))
        tps = sorted(self._consumer.assignment(), key=lambda tp: (tp.topic, tp.partition))
        if not tps:
            return
        # Bounded like the poll: a broker away must not hold the analyzer's tick (the client's
        # own request timeout is minutes). Without the offsets, this poll reads as it comes.
        timeout_ms = int(self.max_poll_s * 1000)
        try:
            ends = self._consumer.end_offsets(tps, timeout_ms=timeout_ms)
            positions = {tp: self._consumer.position(tp, timeout_ms=timeout_ms) for tp in tps}
        except KafkaError as e:
            self.catch_up_failures += 1
            log.debug("key sampler: no offsets to catch up by this poll: %s", e)
            return
        backlog = {
            tp: max(0, ends[tp] - positions[tp]) for tp in tps if positions[tp] is not None and tp in ends
        }
        for tp, skip in catch_up_skips(backlog, budget).items():
            self._consumer.seek(tp, positions[tp] + skip)
            self.skipped += skip

    def hot_keys(self) -> tuple[HotKey, ...]:
        out = []
        for topic, c in self.counters.items():
            for key, count in c.frequent():
                out.append(
                    HotKey(
                        topic=topic,
                        key=str(key),
                        count=count,
                        n=c.n,
                        support=c.support,
                        epsilon=c.epsilon,
                        partitions=tuple(sorted(self._partitions.get((topic, key), ()))),
                    )
                )
        return tuple(out)

    def close(self) -> None:
        self._consumer.close()
