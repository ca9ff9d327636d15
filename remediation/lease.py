"""One acting remediator per cluster: a lease held through Kafka's group membership.

Why a consumer group and not a file lock or a record with an expiry: it works across hosts with
nothing but the cluster being remediated, and Kafka's group coordinator already does what a
lease needs — one partition of a one-partition topic is assigned to exactly one live member, a
member that stops heartbeating (SIGKILL, host gone, network cut) is expelled after
``session.timeout.ms`` and the partition is assigned to a standby. A record-with-expiry lease
would have to re-implement that compare-and-set on a log; a file lock only works on one host.

Holding the lease is necessary, not sufficient: a member frozen longer than its session (a long
GC, SIGSTOP) still *believes* it holds the lease when it resumes, until its next poll. So every
change is fenced by a check the broker makes (:mod:`remediation.fencing`, the shared state's
transactions carry this consumer's :meth:`KafkaLease.group_metadata`), and ``held`` is only the
cheap first answer. ``held`` also turns false when polls stop succeeding for
``session_timeout``, so a holder cut off from the coordinator stands down no later than the
coordinator expels it.

The lease topic is also the holder's **command inbox**: ``linkwatch remediate pause|resume|
reset|cancel|undo`` produce a command record there; only the member assigned the partition
reads it, so commands go through the holder, never around it. The holder's position on it is
committed in the shared state's transactions, so a new holder neither loses nor repeats one.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from typing import Any

import orjson
from kafka import ConsumerRebalanceListener, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import TopicAlreadyExistsError
from kafka.structs import MemberState

from consumer import kafka_compat
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from remediation.config import LeaseConfig

log = logging.getLogger(__name__)

# The lease thread's turn: a poll of up to POLL_MS holding the consumer's lock (KafkaConsumer is
# not thread-safe), then IDLE_S without it, when the remediator's calls take the lock. A caller
# waits at most one short poll (20 ms measured on an idle host; 1.4 s with a 200 ms poll re-taken
# at once). The turn, ~0.1 s, stays well inside the heartbeat interval and the session, so the
# member stays in the group and rejoins promptly; a command arrives within a turn.
POLL_MS = 20
IDLE_S = 0.1
# A poll that (re)joins the group waits up to REJOIN_POLL_MS for the group's answer, and while
# not a confirmed member the polls run back to back, so one is waiting when the group answers.
# Nothing is held while rejoining, so the remediator's calls waiting up to this long cost nothing.
REJOIN_POLL_MS = 250


def ensure_lease_topic(admin: Any, topic: str, ready_within_s: float = 30.0) -> None:
    """Create the lease topic if missing, and return once its partition has a leader (a member
    joins the group only once its metadata lists the partition, :class:`KafkaLease`)."""
    with contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 1, -1)], raise_errors=True)
    deadline = time.monotonic() + ready_within_s
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            [meta] = admin.describe_topics([topic])
            parts = meta.get("partitions") or []
            if parts and all(p.get("leader_id", -1) >= 0 for p in parts):
                return
        time.sleep(0.2)


class KafkaLease:
    """Holds (or waits for) the lease; call :meth:`close` to leave the group."""

    def __init__(self, kafka: KafkaClientConfig | str, cfg: LeaseConfig, member: str, **client: Any) -> None:
        self.cfg = cfg
        self.member = member
        self.tp = TopicPartition(cfg.topic, 0)
        self._commands: collections.deque[tuple[int, Any]] = collections.deque()
        self._position: int | None = None  # next command offset to process
        self._consumer = KafkaConsumer(
            **kafka_python_kwargs(kafka, f"remediator-{member}"),
            group_id=cfg.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=min(cfg.heartbeat_interval_ms, cfg.session_timeout_ms // 3),
            max_poll_interval_ms=max(cfg.session_timeout_ms * 5, 30_000),
            # Sticky: a standby joining (or restarting) never takes the lease from a live holder.
            partition_assignment_strategy=[StickyPartitionAssignor],
            # A lease topic created a moment before may not be in the first metadata the group
            # is assigned from: nobody holds the lease until the metadata is read again (5 min
            # by kafka-python's default; the first remediator of a new deployment waited that
            # long). 5 s: one small metadata request per member.
            metadata_max_age_ms=5000,
            **client,
        )
        self._tp = self.tp
        self._held = False
        self._last_ok = 0.0
        # Set when this process was stopped longer than a session (a long GC, SIGSTOP): the
        # group has moved on without it, but the consumer still shows its old assignment until
        # it has rejoined. Until a rebalance assigns it again, the lease is not held: a holder
        # resumed after a standby took over must not take over again on its stale assignment
        # (it did: its init of the state's producer fenced the new holder mid-action).
        self._stale = False
        self._assigned_at = 0.0  # monotonic time of the group's last assignment to this member
        # The topic's partition in this client's metadata before it joins: a member whose first
        # assignment was computed without it was assigned nothing, and the group did not
        # rebalance when the partition appeared (kafka-python 3.0.12: 2 of 10 fresh starts held
        # nothing for 60 s in the process test).
        deadline = time.monotonic() + 30
        while not self._consumer.partitions_for_topic(cfg.topic) and time.monotonic() < deadline:
            time.sleep(0.2)
        self._consumer.subscribe([cfg.topic], listener=_Rejoined(self))
        # kafka-python 3.0.12's group-join races, each of which left a live holder without the
        # lease (the standby took it: the CI failure "the standby took the lease from a live
        # holder", 3 handovers in 12 on a 3-broker cluster): its first assignment made without
        # the topic's metadata snapshot, so it rejoined at once; that join finished while no
        # poll waited and need_rejoin() had turned false meanwhile, so it was never completed
        # (heartbeats off until the session ended); and a join answered between two polls was
        # thrown away and JoinGroup sent again. See :func:`consumer.kafka_compat.steady_group_join`.
        kafka_compat.steady_group_join(self._consumer, REJOIN_POLL_MS)
        self._stop = threading.Event()
        self._lock = threading.RLock()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        last_turn = time.monotonic()
        while not self._stop.is_set():
            self._check_stopped(last_turn)
            last_turn = time.monotonic()
            try:
                with self._lock:
                    got = self._consumer.poll(timeout_ms=POLL_MS)
                    # Stopped inside the poll (SIGSTOP lands anywhere): checked again after it.
                    self._check_stopped(last_turn)
                    held = (
                        self._tp in self._consumer.assignment()
                        and not self._stale
                        and member_confirmed(self._consumer.group_metadata())
                    )
                    if held and not self._held:
                        # Read lazily (command_position): a dead holder's open transaction makes
                        # the committed position unstable until the new holder fences it.
                        self._commands.clear()
                        self._position = None
                    if not held:
                        self._commands.clear()
                    for rec in got.get(self._tp, []) if held else []:
                        self._commands.append((rec.offset, _command(rec.value)))
                self._check_stopped(last_turn)  # and up to the moment it is published
                held = held and not self._stale
                self._last_ok = time.monotonic()
                if held != self._held:
                    log.info("lease %s: %s", self.cfg.group, "acquired" if held else "lost")
                self._held = held
            except Exception:  # a failed poll must not end the thread; held() times out instead
                log.exception("lease poll failed")
                self._stop.wait(0.5)
            # Outside the lock: the remediator's calls (commands, command_position, processed on
            # every state write) take it between two polls. Re-taken at once, it went to this
            # thread again nearly every time (a lock is not fair): a caller waited 0.7 s median
            # and 1.4 s at most on an idle host, and an action's steps crawled under load.
            # Not while (re)joining: the next poll must be waiting when the group answers.
            if member_confirmed(self._consumer.group_metadata()):
                self._stop.wait(IDLE_S)

    def _check_stopped(self, since: float) -> None:
        """Mark the lease stale when more than a session passed since ``since`` (the process was
        stopped, or a poll hung), unless the group assigned it after that (a rejoin completed
        within the poll that returned late)."""
        now = time.monotonic()
        session_s = self.cfg.session_timeout_ms / 1000
        if now - since > session_s and self._assigned_at < now - session_s:
            if not self._stale:
                log.warning(
                    "lease %s: this process was stopped %.1f s (longer than the session): not held "
                    "until the group assigns it again",
                    self.cfg.group,
                    now - since,
                )
            self._stale = True

    def held(self) -> bool:
        fresh = time.monotonic() - self._last_ok < self.cfg.session_timeout_ms / 1000
        # Read live too: the heartbeat thread learns of an expulsion between two polls.
        return self._held and fresh and member_confirmed(self._consumer.group_metadata())

    def describe(self) -> str:
        """This member's view of the lease in one line (for logs and a failed wait): held, its
        group membership, its assignment and how long since its last successful poll."""
        meta = self._consumer.group_metadata()
        return (
            f"lease {self.cfg.group} member {self.member}: held={self.held()} stale={self._stale} "
            f"state={getattr(meta, 'state', None)} generation={getattr(meta, 'generation_id', None)} "
            f"member_id={getattr(meta, 'member_id', '')!r} assignment={sorted(map(tuple, self._consumer.assignment()))} "
            f"last poll {time.monotonic() - self._last_ok:.1f} s ago"
        )

    def group_metadata(self) -> Any:
        """This member's generation, for the broker to fence the shared state's writes (KIP-447)."""
        return self._consumer.group_metadata()

    def commands(self) -> list[tuple[int, Any]]:
        """Commands received and not yet processed (offset, decoded command or None if unreadable)."""
        with self._lock:
            return list(self._commands)

    def processed(self, offset: int) -> None:
        """The command at ``offset`` was handled: the next state write commits past it."""
        with self._lock:
            while self._commands and self._commands[0][0] <= offset:
                self._commands.popleft()
            self._position = max(self.command_position(), offset + 1)

    def command_position(self) -> int:
        """The first command not processed yet: the committed position when the lease was taken,
        then past every command :meth:`processed`."""
        with self._lock:
            if self._position is None:
                # The consumer's position is past what its polls fetched; a command fetched and
                # not processed yet must stay ahead of the committed position.
                position = self._consumer.position(self._tp)
                if self._commands:
                    position = min(position, self._commands[0][0])
                self._position = position
            return self._position

    def wait_held(self) -> bool:
        """Wait up to a session timeout for the lease (after a rebalance a standby caused)."""
        return self.wait(self.cfg.session_timeout_ms / 1000)

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.held():
                return True
            time.sleep(0.1)
        return self.held()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._consumer.close()


def member_confirmed(meta: Any) -> bool:
    """Whether the coordinator counts this consumer a member of the group's current generation:
    joined, stable, with a generation and a member id.

    An assignment alone is not enough. When the coordinator expels a member (its heartbeats
    answered "unknown member" or "illegal generation": it was late past the session, or the
    group moved on), kafka-python resets the member's generation at once but clears the old
    assignment only when it next rejoins, so for a while the expelled member still shows the
    partition. Two members then both "held" the lease: each one's take-over re-initialised the
    shared state's transactional producer and fenced the other's, for a minute on end, while
    moves went half done (the process test, under CI load). A member rebalancing holds nothing
    until the group has assigned the partition again."""
    return (
        getattr(meta, "state", None) == MemberState.STABLE
        and getattr(meta, "generation_id", -1) >= 0
        and bool(getattr(meta, "member_id", ""))
    )


class _Rejoined(ConsumerRebalanceListener):
    """A new assignment from the group (its current generation) clears a stale lease."""

    def __init__(self, lease: KafkaLease) -> None:
        self.lease = lease

    def on_partitions_revoked(self, revoked: Any) -> None:
        pass

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.lease._assigned_at = time.monotonic()
        self.lease._stale = False


def _command(raw: bytes | None) -> Any:
    try:
        value = orjson.loads(raw or b"")
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


class LocalLease:
    """Always held: for ``lease.enabled: false`` (one remediator by construction), dry runs and
    unit tests. Its command inbox, when given, is a directory (:class:`remediation.control.FileInbox`),
    and ``lock`` (:class:`remediation.control.StateLock`) is released on :meth:`close`."""

    def __init__(self, inbox: Any = None, lock: Any = None) -> None:
        self.inbox, self.lock = inbox, lock

    def held(self) -> bool:
        return True

    def describe(self) -> str:
        return "local lease: always held"

    def wait(self, timeout_s: float) -> bool:
        return True

    def wait_held(self) -> bool:
        return True

    def commands(self) -> list[tuple[Any, Any]]:
        return self.inbox.commands() if self.inbox is not None else []

    def processed(self, token: Any) -> None:
        if self.inbox is not None:
            self.inbox.processed(token)

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()
            self.lock = None
