"""Async-fetch consumer (on kafka-python): background fetching from every broker into a bounded
buffer, processed-offset commits, a transactional SQLite sink, client-side timings.

* :mod:`.async_fetch` — :class:`AsyncFetchConsumer`: what the application calls (poll, ack, fail,
  commit), the deliveries' timings and spans
* :mod:`.fetch_loop` — :class:`FetchLoop`: the pump thread fetching from every broker into the
  buffer, the assignment and rebalances, the commits it makes
* :mod:`.config` — :class:`ConsumerConfig`
* :mod:`.buffer` — the bounded buffer between the fetch loop and the application
* :mod:`.dead_letter` — writes exhausted records to the dead-letter topic
* :mod:`.topic_watch` — notices a consumed topic that was deleted
* :mod:`.kafka_compat` — every kafka-python internal the consumer touches, guarded by its version
* :mod:`.log_limit` — rate limit for what kafka-python's retry loops log
* :mod:`.delivery` — :class:`Delivery` and the fetch decoder that makes them
* :mod:`.commits` — contiguous processed-offset tracker (pure)
* :mod:`.sink` — :class:`SqliteSink`: output and offsets in one transaction
* :mod:`.metrics` — wait-for-fetch, fetch latency per broker, end-to-end, buffer occupancy
"""

from consumer.async_fetch import AsyncFetchConsumer, ConsumerConfig, Delivery
from consumer.commits import CommitTracker, Outcome, PartitionOffsets

__all__ = ["AsyncFetchConsumer", "CommitTracker", "ConsumerConfig", "Delivery", "Outcome", "PartitionOffsets"]
