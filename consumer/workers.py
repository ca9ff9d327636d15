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
* records go to the workers in runs (one per worker and poll; acked per run); each worker
  queue holds at most ``queue_records`` records; when one is full the dispatcher waits for it, the consumer's buffer fills and its pump pauses fetching — memory stays bounded
  by the consumer's buffer plus ``workers × queue_records`` records;
* :meth:`run` returns when ``stop`` is set; records already dispatched are handled first
  (unless ``drain=False``), so acked work is committed by the consumer's :meth:`close`.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from itertools import groupby
from operator import attrgetter

from consumer.async_fetch import AsyncFetchConsumer, Delivery
from linkwatch.errors import ConfigError

log = logging.getLogger(__name__)

Handler = Callable[[Delivery], object]
_TP = attrgetter("tp")


class _WorkQueue:
    """Runs of deliveries for one worker, bounded by record count (a run larger than the bound
    is accepted into an empty queue, so no run can wait forever)."""

    def __init__(self, max_records: int) -> None:
        self.max_records = max_records
        self.runs: deque[list[Delivery] | None] = deque()
        self.records = 0
        self.cond = threading.Condition()

    def put(self, run: list[Delivery] | None, stop: threading.Event | None = None) -> bool:
        """Queue ``run`` (None: end of work); False if ``stop`` was set while waiting for room."""
        n = len(run) if run else 0
        with self.cond:
            while self.records and self.records + n > self.max_records:
                if stop is not None and stop.is_set():
                    return False
                self.cond.wait(0.2)
            self.runs.append(run)
            self.records += n
            self.cond.notify_all()
        return True

    def get(self) -> list[Delivery] | None:
        with self.cond:
            while not self.runs:
                self.cond.wait()
            run = self.runs.popleft()
            self.records -= len(run) if run else 0
            self.cond.notify_all()
            return run


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
        self.queue_records = queue_records
        self._queues = [_WorkQueue(queue_records) for _ in range(workers)]
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.handled = 0
        self.failed = 0

    def _worker(self, q: _WorkQueue, drain: threading.Event) -> None:
        while True:
            run = q.get()
            if run is None:
                return
            if not drain.is_set():
                continue  # stopping without draining: left unacked (redelivered later)
            done: list[Delivery] = []
            failed = 0
            for d in run:
                try:
                    self.handler(d)
                except Exception as e:  # the record failed, not the worker
                    if done:  # keep acks in order with the failure
                        self.consumer.ack_many(done)
                        done = []
                    self.consumer.fail(d, repr(e))
                    failed += 1
                    log.debug("handler failed on %r: %r", d, e)
                else:
                    done.append(d)
            if done:
                self.consumer.ack_many(done)
            with self._lock:
                self.handled += len(run) - failed
                self.failed += failed

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
                batch = self.consumer.poll(timeout_s=self.poll_timeout_s)
                # One run per worker and poll; a partition's records keep their order in it.
                runs: dict[int, list[Delivery]] = {}
                for tp, part in groupby(batch, _TP):
                    runs.setdefault(hash(tp) % self.workers, []).extend(part)
                for i, run in runs.items():
                    for start in range(0, len(run), self.queue_records):
                        if not self._queues[i].put(run[start : start + self.queue_records], stop):
                            break
        finally:
            if not drain:
                draining.clear()
            for q in self._queues:
                q.put(None)  # after the queued runs
            for t in self._threads:
                t.join()
