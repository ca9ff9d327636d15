"""Commit latency per group coordinator broker: one probe group coordinated by every broker.

A group's coordinator is the leader of partition ``abs(hashCode(group)) % P`` of
``__consumer_offsets`` (Kafka's ``Utils.abs(groupId.hashCode())``, ``P`` =
``offsets.topic.num.partitions``): :func:`coordinator_partition`. :func:`pick_groups` chooses
names ``<prefix>.<n>`` so that every broker leading a ``__consumer_offsets`` partition
coordinates one, keeping a group while its coordinator stays, re-picking when leadership moves
(a broker that leads no such partition is no coordinator and has no group: rule, not error).

:class:`CommitProber` commits one offset (the probe topic's partition 0, a counter) for each
group, straight to the broker it expects to coordinate it (the admin client's OffsetCommit,
as a group with no members; a cluster without ``__consumer_offsets`` yet gets it created by a
coordinator lookup), and times each commit into that broker's window:
:class:`CommitWindow` (a latency sketch, ms, no upper clamp; ``ok``; ``errors`` by reason).
A commit answered ``NOT_COORDINATOR`` (or failing otherwise) is counted by error name and makes
the prober read ``__consumer_offsets`` leadership again before its next round. Commits of one
round go one after another: a stalled coordinator delays the others' next commit (each is still
timed alone), never the produce/read-back probes, which run on another thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from linkwatch.sketch import LatencySketch

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
MAX_NAMES_TRIED = 100_000  # names tried per pick; with P partitions ~P·ln(P) suffice


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(group: str, partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka's ``Utils.abs``: MIN_VALUE → 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def pick_groups(
    prefix: str, leaders: Mapping[int, int], brokers: Iterable[int], current: Mapping[int, str] | None = None
) -> dict[int, str]:
    """broker -> a group it coordinates, for every broker in ``brokers`` leading a partition of
    ``__consumer_offsets`` (``leaders``: partition -> leader). A group of ``current`` whose
    coordinator is unchanged is kept."""
    n = len(leaders)
    if n == 0:
        return {}
    coordinators = set(leaders.values()) & set(brokers)
    chosen = {
        b: g
        for b, g in (current or {}).items()
        if b in coordinators and leaders.get(coordinator_partition(g, n)) == b
    }
    for i in count():
        if len(chosen) == len(coordinators) or i >= MAX_NAMES_TRIED:
            break
        group = f"{prefix}.{i}"
        b = leaders.get(coordinator_partition(group, n))
        if b in coordinators and b not in chosen:
            chosen[b] = group
    return chosen


@dataclass
class CommitWindow:
    """What the commits to one coordinator broker did in one window."""

    broker: int
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latency: LatencySketch = field(default_factory=LatencySketch)


class CommitProber:
    """Commit to every coordinator broker every ``interval_s``; per-broker windows.

    ``admin`` is a ``KafkaAdminClient`` used by this prober only (its own thread). ``topic`` is
    the partition the probe groups commit for (it must exist). Thread-safe: :meth:`take_windows`
    is called from the probe loop.
    """

    def __init__(
        self,
        admin: Any,
        topic: str,
        group_prefix: str,
        interval_s: float,
        check_interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admin = admin
        self.topic = topic
        self.group_prefix = group_prefix
        self.interval_s = interval_s
        self.check_interval_s = check_interval_s
        self._clock = clock
        self.groups: dict[int, str] = {}  # coordinator broker -> group
        self._windows: dict[int, CommitWindow] = {}
        self._lock = threading.Lock()
        self._offset = 0
        self._checked_at: float | None = None
        self.check_errors = 0

    def check_coordinators(self) -> None:
        """Read ``__consumer_offsets`` leadership and the live brokers; re-pick groups."""
        brokers = [b["broker_id"] for b in self.admin.describe_cluster()["brokers"]]
        leaders = self._offsets_leaders()
        if not leaders:
            # A cluster no group has used yet has no __consumer_offsets: a coordinator lookup
            # creates it (Kafka does so on FindCoordinator); leadership is read again next round.
            self.admin.list_group_offsets([f"{self.group_prefix}.0"])
            self._checked_at = None
            self.groups = {}
            return
        groups = pick_groups(self.group_prefix, leaders, brokers, self.groups)
        if groups != self.groups:
            log.info(
                "probe commit groups: %s", ", ".join(f"broker {b}: {g}" for b, g in sorted(groups.items()))
            )
        self.groups = groups
        self._checked_at = self._clock()

    def _offsets_leaders(self) -> dict[int, int]:
        leaders: dict[int, int] = {}
        try:
            described = self.admin.describe_topics([OFFSETS_TOPIC])
        except KafkaError:  # UnknownTopicOrPartitionError before its creation
            return leaders
        for t in described:
            if t.get("error_code", 0) == 0:
                for p in t.get("partitions") or []:
                    leaders[p["partition_index"]] = p.get("leader_id", -1)
        return leaders

    def commit_round(self) -> None:
        """One commit per coordinator broker, each timed into its window."""
        now = self._clock()
        if self._checked_at is None or now - self._checked_at >= self.check_interval_s:
            try:
                self.check_coordinators()
            except Exception as e:  # no metadata now: commit to the groups known, look again later
                self.check_errors += 1
                self._checked_at = now
                log.warning("probe commit: reading the coordinators failed: %s", e)
        self._offset += 1
        offsets = {TopicPartition(self.topic, 0): OffsetAndMetadata(self._offset, "", -1)}
        for broker, group in sorted(self.groups.items()):
            started = self._clock()
            try:
                result = self.admin.alter_group_offsets(group, offsets, group_coordinator_id=broker)
                errors = sorted({e.__name__ for e in result.values() if e.__name__ != "NoError"})
                error = errors[0] if errors else None
            except Exception as e:  # timeouts, connection errors: the broker's commit failed
                error = type(e).__name__
            self._record(broker, self._clock() - started, error)
            if error is not None:
                self._checked_at = None  # coordinator moved or broker gone: look again first

    def _record(self, broker: int, seconds: float, error: str | None) -> None:
        with self._lock:
            w = self._windows.get(broker)
            if w is None:
                w = self._windows[broker] = CommitWindow(broker)
            if error is None:
                w.ok += 1
                w.latency.add(seconds * 1000)
            else:
                w.errors[error] += 1

    def take_windows(self) -> dict[int, CommitWindow]:
        with self._lock:
            out, self._windows = self._windows, {}
            return out

    def run(self, stop: threading.Event) -> None:
        """Commit rounds every ``interval_s`` until ``stop``; a round's error is logged, never fatal."""
        while not stop.is_set():
            started = self._clock()
            try:
                self.commit_round()
            except Exception as e:
                log.warning("probe commit round failed: %s", e)
            stop.wait(max(0.0, self.interval_s - (self._clock() - started)))
