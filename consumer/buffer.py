"""The bounded buffer between the fetch pump and the application: :class:`DeliveryBuffer`.

A FIFO of deliveries in arrival order with per-partition accounting (bytes and records), so the
pump can pause a partition whose share is full. Not thread-safe by itself: every method is
called with ``cond`` held, and the consumer's assignment state shares that lock.
"""

from __future__ import annotations

import threading
from collections import deque
from itertools import groupby
from operator import attrgetter

from consumer.delivery import TP, Delivery

_TP = attrgetter("tp")
_SIZE = attrgetter("size")


class DeliveryBuffer:
    """FIFO of deliveries in arrival order with per-partition accounting (all under ``cond``)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.queue: deque[Delivery] = deque()
        self.bytes = 0
        self.tp_bytes: dict[TP, int] = {}
        self.tp_records: dict[TP, int] = {}
        self.peak_bytes = 0

    def _count(self, d: Delivery, sign: int) -> None:
        self.bytes += sign * d.size
        self.tp_bytes[d.tp] = self.tp_bytes.get(d.tp, 0) + sign * d.size
        self.tp_records[d.tp] = self.tp_records.get(d.tp, 0) + sign

    def put(self, d: Delivery, front: bool = False) -> None:
        (self.queue.appendleft if front else self.queue.append)(d)
        self._count(d, 1)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def put_many(self, tp: TP, ds: list[Delivery]) -> None:
        """Append a fetched run of one partition (one accounting update for the run)."""
        size = sum(d.size for d in ds)
        self.queue.extend(ds)
        self.bytes += size
        self.tp_bytes[tp] = self.tp_bytes.get(tp, 0) + size
        self.tp_records[tp] = self.tp_records.get(tp, 0) + len(ds)
        self.peak_bytes = max(self.peak_bytes, self.bytes)

    def take(self, n: int) -> list[Delivery]:
        queue = self.queue
        k = min(n, len(queue))
        popleft = queue.popleft
        out = [popleft() for _ in range(k)]
        # Accounting once per run of one partition (the queue holds fetched runs back to back).
        for tp, run in groupby(out, _TP):
            sizes = list(map(_SIZE, run))
            size = sum(sizes)
            self.bytes -= size
            self.tp_bytes[tp] = self.tp_bytes.get(tp, 0) - size
            self.tp_records[tp] = self.tp_records.get(tp, 0) - len(sizes)
        return out

    def drop(self, tps: set[TP]) -> int:
        keep = deque(d for d in self.queue if d.tp not in tps)
        dropped = len(self.queue) - len(keep)
        self.queue = keep
        for tp in tps:
            self.bytes -= self.tp_bytes.pop(tp, 0)
            self.tp_records.pop(tp, None)
        return dropped
