"""The probe's bookkeeping: which probe went to which leader, and what became of it.

Pure and clock-free: every method takes ``now_s`` (a monotonic clock reading), so tests drive
it with a table of events. Thread-safe: acks arrive on the producer's I/O thread, read-backs
and expiry on the probe loop.

Per leader broker, over one window, it keeps:

* ``produce`` — send → ack latency (a :class:`~linkwatch.sketch.LatencySketch`, ms);
* ``end_to_end`` — send → read back by the probe's consumer (ms). No upper clamp: a probe read
  back after its deadline still adds its real latency here (until ``forget_after_s``);
* availability — a probe is *available* when it was acked and read back within ``deadline_s``
  of its send. Each probe is decided once: ``ok`` at its read-back, or ``unavailable`` (with a
  reason: ``send_error``, ``deadline``) at its failure or when its deadline passes. A window's
  availability is ``ok / (ok + unavailable)`` over the probes *decided* in it.

Bounded: at most ``max_pending`` probes are remembered; a send beyond that is not recorded and
is counted in ``dropped["pending_full"]`` (the caller does not send it). Read-backs of unknown
probes (another instance's, or forgotten ones) are counted in ``dropped["unknown_probe"]``.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

from linkwatch.sketch import LatencySketch

UNAVAILABLE_REASONS = ("send_error", "deadline")


@dataclass
class BrokerWindow:
    """What one leader broker's probes did in one window."""

    broker: int
    sent: int = 0
    acked: int = 0
    ok: int = 0
    unavailable: Counter[str] = field(default_factory=Counter)
    produce: LatencySketch = field(default_factory=LatencySketch)
    end_to_end: LatencySketch = field(default_factory=LatencySketch)

    @property
    def decided(self) -> int:
        return self.ok + sum(self.unavailable.values())

    @property
    def availability(self) -> float | None:
        """Share of the probes decided in the window that were available; ``None`` if none was."""
        return self.ok / self.decided if self.decided else None


@dataclass
class _Pending:
    broker: int
    sent_s: float
    acked_s: float | None = None
    decided: bool = False


class ProbeLedger:
    """Pending probes by sequence number, and the per-broker windows they report into."""

    def __init__(self, deadline_s: float, forget_after_s: float, max_pending: int) -> None:
        if not 0 < deadline_s <= forget_after_s:
            raise ValueError(f"need 0 < deadline_s ({deadline_s}) <= forget_after_s ({forget_after_s})")
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.deadline_s = deadline_s
        self.forget_after_s = forget_after_s
        self.max_pending = max_pending
        self.dropped: Counter[str] = Counter()
        self._pending: dict[int, _Pending] = {}  # insertion order = send order
        self._windows: dict[int, BrokerWindow] = {}
        self._lock = threading.Lock()

    def _window(self, broker: int) -> BrokerWindow:
        w = self._windows.get(broker)
        if w is None:
            w = self._windows[broker] = BrokerWindow(broker)
        return w

    def sent(self, seq: int, broker: int, now_s: float) -> bool:
        """Remember a probe about to be sent to ``broker``'s partition; False = do not send it."""
        with self._lock:
            if len(self._pending) >= self.max_pending:
                self.dropped["pending_full"] += 1
                return False
            self._pending[seq] = _Pending(broker, now_s)
            self._window(broker).sent += 1
            return True

    def acked(self, seq: int, now_s: float) -> None:
        with self._lock:
            p = self._pending.get(seq)
            if p is None or p.acked_s is not None:
                return
            p.acked_s = now_s
            w = self._window(p.broker)
            w.acked += 1
            w.produce.add((now_s - p.sent_s) * 1000)

    def failed(self, seq: int, now_s: float) -> None:
        """The send failed (the producer gave up): unavailable at once, and forgotten."""
        with self._lock:
            p = self._pending.pop(seq, None)
            if p is not None and not p.decided:
                self._window(p.broker).unavailable["send_error"] += 1

    def read_back(self, seq: int, now_s: float) -> None:
        with self._lock:
            p = self._pending.pop(seq, None)
            if p is None:
                self.dropped["unknown_probe"] += 1
                return
            w = self._window(p.broker)
            age_s = now_s - p.sent_s
            w.end_to_end.add(age_s * 1000)
            if p.decided:
                return
            # Read back means it was written: an ack still in flight counts as acked in time.
            if age_s <= self.deadline_s:
                w.ok += 1
            else:
                w.unavailable["deadline"] += 1

    def expire(self, now_s: float) -> None:
        """Decide probes past their deadline as unavailable; forget those past ``forget_after_s``."""
        with self._lock:
            forget = []
            for seq, p in self._pending.items():
                age_s = now_s - p.sent_s
                if age_s <= self.deadline_s:
                    break  # send order: the rest are younger
                if not p.decided:
                    p.decided = True
                    self._window(p.broker).unavailable["deadline"] += 1
                if age_s > self.forget_after_s:
                    forget.append(seq)
            for seq in forget:
                del self._pending[seq]

    def drop(self, reason: str) -> None:
        """Count something the caller could not use (a bad read-back, a failed publish)."""
        with self._lock:
            self.dropped[reason] += 1

    def take_windows(self) -> dict[int, BrokerWindow]:
        """The windows since the last call, by broker; starts new ones."""
        with self._lock:
            out, self._windows = self._windows, {}
            return out

    @property
    def pending(self) -> int:
        return len(self._pending)
