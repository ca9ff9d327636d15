"""Samples record keys from data topics and counts them with lossy counting, per topic.

A plain consumer (no group, no commits) reads from the end of each topic; every
``sample_every``-th record's key is counted. Memory per topic is bounded by lossy counting;
each poll is bounded by ``max_records``.
"""

from __future__ import annotations

import time
from collections import defaultdict

from linkwatch.aggregates import HotKey
from linkwatch.lossy_counting import LossyCounter

MAX_PARTITIONS_PER_KEY = 16


class KeySampler:
    def __init__(
        self,
        bootstrap: str,
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
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            client_id="linkwatch-key-sampler",
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
        read = 0
        deadline = time.monotonic() + self.max_poll_s
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
        # Forget partitions of keys the counters dropped (keeps this map as bounded as they are).
        live = {(t, k) for t, c in self.counters.items() for k, _ in c.frequent()}
        for ident in [i for i in self._partitions if i not in live]:
            del self._partitions[ident]
        return read

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
