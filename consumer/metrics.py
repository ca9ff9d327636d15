"""Client-side timings of the async-fetch consumer: Prometheus metrics and ``ClientFetch`` records.

What is measured (names as in ``docs/metrics.md``):

* wait-for-fetch — how long :meth:`AsyncFetchConsumer.poll` waited for the buffer to hold a
  record (0 when records were ready): a slow *client* shows ~0 here, a slow *broker* does not;
* fetch latency per broker — send to response of each FetchRequest;
* end-to-end — now − record timestamp when the record is handed to the application;
* buffer occupancy (bytes and records).

Besides the Prometheus series, every ``window_s`` :meth:`ClientTimings.flush` returns one
``ClientFetch`` record per broker (fetch latency and end-to-end of the partitions it led) and
one with ``broker = -1`` holding the application-side wait-for-fetch, so summing sketches
over brokers never counts a wait twice. Recording is thread-safe (the fetch latency is
recorded on kafka-python's IO thread).
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections import Counter as Tally
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from linkwatch.records import ClientFetch
from linkwatch.sketch import LatencySketch

APP_BROKER = -1  # ClientFetch.broker of the application-side record (wait-for-fetch)

# Log-spaced seconds, 1 ms .. ~65 s.
BUCKETS_S = tuple(0.001 * 2**i for i in range(17))


class ClientMetrics:
    """The Prometheus series of one consumer instance (own registry unless one is given)."""

    def __init__(self, cluster: str, client_id: str, group: str, registry: CollectorRegistry | None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        labels = ("cluster", "client_id", "group")
        self._values = (cluster, client_id, group)
        r = self.registry
        self.wait_fetch = Histogram(
            "linkwatch_client_wait_fetch_seconds",
            "Time the application waited for records",
            labels,
            buckets=BUCKETS_S,
            registry=r,
        ).labels(*self._values)
        self.fetch_latency = Histogram(
            "linkwatch_client_fetch_latency_seconds",
            "Fetch request round trip per broker",
            (*labels, "broker"),
            buckets=BUCKETS_S,
            registry=r,
        )
        self.end_to_end = Histogram(
            "linkwatch_client_end_to_end_seconds",
            "now - record timestamp at delivery",
            (*labels, "topic"),
            buckets=BUCKETS_S,
            registry=r,
        )
        self.buffer_bytes = Gauge(
            "linkwatch_client_buffer_bytes", "Buffered bytes", labels, registry=r
        ).labels(*self._values)
        self.buffer_records = Gauge(
            "linkwatch_client_buffer_records", "Buffered records", labels, registry=r
        ).labels(*self._values)
        self.dropped = Counter(
            "linkwatch_client_dropped_total", "Records dropped, by reason", (*labels, "reason"), registry=r
        )
        self.dead_letter = Counter(
            "linkwatch_client_dead_letter_total", "Records sent to the dead-letter topic", labels, registry=r
        ).labels(*self._values)

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped.labels(*self._values, reason).inc(n)


class ClientTimings:
    """Window sketches + Prometheus series; :meth:`flush` turns a window into records."""

    def __init__(
        self,
        cluster: str,
        client_id: str,
        group: str,
        window_s: int = 10,
        registry: CollectorRegistry | None = None,
        end_to_end_sketches: bool = True,
    ) -> None:
        self.cluster, self.client_id, self.group, self.window_s = cluster, client_id, group, window_s
        # The per-broker end-to-end sketches only feed the ClientFetch records: without
        # publishing they are not kept (they were the costliest per-record step).
        self.end_to_end_sketches = end_to_end_sketches
        self.metrics = ClientMetrics(cluster, client_id, group, registry)
        self._lock = threading.Lock()
        self._wait = LatencySketch()
        self._fetch: dict[int, LatencySketch] = {}
        self._e2e: dict[int, LatencySketch] = {}
        self._max_buffer_bytes = 0
        self._window_start = time.time()
        self._fetch_children: dict[int, Any] = {}
        self._e2e_children: dict[str, Any] = {}

    def wait_fetch(self, seconds: float) -> None:
        self.metrics.wait_fetch.observe(seconds)
        with self._lock:
            self._wait.add(seconds * 1000)

    def fetch_latency(self, broker: int, seconds: float) -> None:
        child = self._fetch_children.get(broker)
        if child is None:
            child = self._fetch_children[broker] = self.metrics.fetch_latency.labels(
                *self.metrics._values, str(broker)
            )
        child.observe(seconds)
        with self._lock:
            self._fetch.setdefault(broker, LatencySketch()).add(seconds * 1000)

    def end_to_end_runs(self, runs: list[tuple[int, str, list[float]]]) -> None:
        """Record (broker, topic, [seconds, ...]) runs for a batch of deliveries (one lock round;
        the histogram is updated once per bucket touched, not once per record). Negative
        values (clock skew between producer and consumer) count as 0."""
        by_topic: dict[str, list[float]] = {}
        by_broker: dict[int, list[float]] = {}
        keep = self.end_to_end_sketches
        for broker, topic, values in runs:
            if min(values) < 0.0:
                values = [v if v > 0.0 else 0.0 for v in values]
            by_topic.setdefault(topic, []).extend(values)
            if keep:
                by_broker.setdefault(broker, []).extend(values)
        for topic, values in by_topic.items():
            child = self._e2e_children.get(topic)
            if child is None:
                child = self._e2e_children[topic] = self.metrics.end_to_end.labels(
                    *self.metrics._values, topic
                )
            observe_many(child, values)
        if not keep:
            return
        with self._lock:
            for broker, values in by_broker.items():
                sketch = self._e2e.get(broker)
                if sketch is None:
                    sketch = self._e2e[broker] = LatencySketch()
                for seconds in values:
                    sketch.add(seconds * 1000)

    def end_to_end(self, broker: int, topic: str, seconds: float) -> None:
        self.end_to_end_runs([(broker, topic, [seconds])])

    def buffer(self, n_bytes: int, n_records: int) -> None:
        self.metrics.buffer_bytes.set(n_bytes)
        self.metrics.buffer_records.set(n_records)
        with self._lock:
            self._max_buffer_bytes = max(self._max_buffer_bytes, n_bytes)

    def flush(self, now: float | None = None) -> list[ClientFetch]:
        """Close the window: one record per broker seen plus the application record."""
        now = time.time() if now is None else now
        with self._lock:
            wait, fetch, e2e = self._wait, self._fetch, self._e2e
            buffer_bytes = self._max_buffer_bytes
            self._wait, self._fetch, self._e2e = LatencySketch(), {}, {}
            self._max_buffer_bytes = 0
            self._window_start = now
        empty = LatencySketch().to_dict()
        common = {
            "cluster": self.cluster,
            "source": f"client-{self.client_id}",
            "ts_ms": int(now * 1000),
            "client_id": self.client_id,
            "group": self.group,
            "window_s": self.window_s,
        }
        out = [
            ClientFetch(
                **common,
                broker=APP_BROKER,
                wait_fetch=wait.to_dict(),
                fetch_latency=empty,
                end_to_end=empty,
                buffer_bytes=buffer_bytes,
            )
        ]
        for broker in sorted(set(fetch) | set(e2e)):
            out.append(
                ClientFetch(
                    **common,
                    broker=broker,
                    wait_fetch=empty,
                    fetch_latency=(fetch.get(broker) or LatencySketch()).to_dict(),
                    end_to_end=(e2e.get(broker) or LatencySketch()).to_dict(),
                    buffer_bytes=0,
                )
            )
        return out


def observe_many(child: Any, values: list[float]) -> None:
    """``Histogram.observe`` for many values at once: the same bucket counts and sum, one
    increment per bucket touched (prometheus_client's child keeps ``_upper_bounds``,
    ``_buckets`` and ``_sum``; falls back to per-value observe if that ever changes)."""
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None:
        for v in values:
            child.observe(v)
        return
    for i, n in Tally(map(partial(bisect_left, bounds), values)).items():
        buckets[i].inc(n)
    total.inc(sum(values))
