"""The producer side: where records go when some keys are much hotter than others.

* :mod:`.partitioner` — :class:`SkewAwarePartitioner` for kafka-python: cold keys exactly where
  Kafka's murmur2 default puts them, hot keys on the least-loaded of d candidate partitions;
* :mod:`.hot_keys` — which keys are hot now (windowed lossy counting, bounded memory);
* :mod:`.load` — the per-partition load this producer itself sees (decaying sent / acked counts);
* :mod:`.confluent` — the same placement for confluent-kafka, which has no Python partitioner hook;
* :mod:`.tracing` — W3C trace context in record headers and a produce span per record
  (kafka-python and confluent-kafka; ``docs/tracing.md``).

``docs/skew.md`` says what a split key costs the consumers (see ``consumer/split_keys.py``).
"""

from producer.partitioner import (
    SkewAwarePartitioner,
    candidate_partitions,
    hot_key_candidates,
    murmur2_partition,
)

__all__ = ["SkewAwarePartitioner", "candidate_partitions", "hot_key_candidates", "murmur2_partition"]
