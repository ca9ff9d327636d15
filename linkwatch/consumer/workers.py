"""Process records on a pool of worker threads, in order per partition, with processed-offset commits.

Why: with kafka-python's ``KafkaConsumer`` the committed position is the polled position, so an
application that handles records concurrently either commits records it has not finished (lost
on a crash) or gives up concurrency. :class:`AsyncFetchConsumer` commits only the contiguous
prefix of *acked* offsets, so records may finish out of order across partitions and nothing
unfinished is ever committed. An application whose per-record work waits (a database call, an
HTTP request, a disk write) then gets ``workers`` times the capacity of one poll loop, and a slow
record delays only its own partition.

Contract:

* every record of a partition goes to the same worker (``hash(partition) % workers``), so
  records of one partition are handled in offset order (a retried record is redelivered first in
  line to the same worker, after those of its partition already queued there);
* ``handler(delivery)`` returning normally acks the record; raising fails it (retried up to the
  consumer's ``max_retries``, then dead-lettered or the partition stops, as configured);
* each worker queue holds at most ``queue_records`` records; when one is full the dispatcher
  waits for it, the consumer's buffer fills and its pump pauses fetching — memory stays bounded
  by the consumer's buffer plus ``workers × queue_records`` records;
* :meth:`run` returns when ``stop`` is set; records already dispatched are handled first
  (unless ``drain=False``), so acked work is committed by the consumer's :meth:`close`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from linkwatch.consumer.async_fetch import AsyncFetchConsumer, Delivery
from linkwatch.errors import ConfigError

log = logging.getLogger(__name__)

Handler = Callable[[Delivery], object]
_DONE = None  # end-of-work marker in a worker queue


class PartitionWorkers:
    """``workers`` threads fed from one :class:`AsyncFetchConsumer` (see the module docstring)."""

    def __init__(
        self,
        consumer: AsyncFetchConsumer,
        handler: Handler,
        *,
        workers: int = 4,
        queue_records: int = 1000,
        poll_timeout_s: float = 0.2,
    ) -> None:
        problems = []
        if workers < 1:
            problems.append(f"workers: must be >= 1, got {workers}")
        if queue_records < 1:
            problems.append(f"queue_records: must be >= 1, got {queue_records}")
        if problems:
            raise ConfigError("consumer workers", problems)
        self.consumer = consumer
        self.handler = handler
        self.workers = workers
        self.poll_timeout_s = poll_timeout_s
        self._queues: list[queue.Queue[Delivery | None]] = [
            queue.Queue(queue_records) for _ in range(workers)
        ]
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.handled = 0
        self.failed = 0

    def _worker(self, q: queue.Queue[Delivery | None], drain: threading.Event) -> None:
        while True:
            d = q.get()
            if d is _DONE:
                return
            if not drain.is_set():
                continue  # stopping without draining: leave it unacked (redelivered later)
            try:
                self.handler(d)
            except Exception as e:  # the record failed, not the worker
                self.consumer.fail(d, repr(e))
                with self._lock:
                    self.failed += 1
                log.debug("handler failed on %r: %r", d, e)
            else:
                self.consumer.ack(d)
                with self._lock:
                    self.handled += 1

    def run(self, stop: threading.Event, drain: bool = True) -> None:
        """Poll, dispatch and handle until ``stop`` is set; then let the workers finish."""
        draining = threading.Event()
        draining.set()
        self._threads = [
            threading.Thread(
                target=self._worker, args=(q, draining), name=f"consumer-worker-{i}", daemon=True
            )
            for i, q in enumerate(self._queues)
        ]
        for t in self._threads:
            t.start()
        try:
            while not stop.is_set():
                for d in self.consumer.poll(timeout_s=self.poll_timeout_s):
                    q = self._queues[hash(d.tp) % self.workers]
                    while not stop.is_set():
                        try:
                            q.put(d, timeout=0.2)
                            break
                        except queue.Full:
                            continue
        finally:
            if not drain:
                draining.clear()
            for q in self._queues:
                q.put(_DONE)  # blocks until there is room: after the queued records
            for t in self._threads:
                t.join()
