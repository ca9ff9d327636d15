"""Every use the consumer makes of kafka-python's private internals, in one place.

The async-fetch consumer runs on kafka-python **3.0.12** (pinned in ``pyproject.toml``) and
reaches past its public API for a few things the public API does not offer: the per-broker
fetch round trip, committing from inside a rebalance callback, the fetch position of a
partition, the cluster metadata, three group-join races, a corrupt batch that wedges ``poll``,
the pacing of the group-coordinator lookup and the close of the coordinator's connection;
and, for the producer's tracing helper (:mod:`producer.tracing`), which Produce request
(broker, correlation id) carried a record (:func:`note_produce_requests`). Each function
below names the private attribute it touches; nothing else in :mod:`consumer` or
:mod:`producer` touches one (the decoder in :mod:`.delivery` subclasses
kafka-python's ``PartitionRecords`` and is proven field by field against it by
``tests/consumer/test_delivery.py``).

These internals change between releases without notice, so the consumer refuses another
version at construction: :func:`check_version` raises :class:`UnsupportedKafkaPythonError`
naming both versions. Upgrading means re-checking each function here (and running
``tests/consumer/``), then changing :data:`SUPPORTED_VERSION` and the pin together.
"""

from __future__ import annotations

import functools
import logging
import re
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any

import kafka
from kafka import KafkaConsumer
from kafka.cluster import ClusterMetadata
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

SUPPORTED_VERSION = "3.0.12"
_log = logging.getLogger(__name__)


class UnsupportedKafkaPythonError(RuntimeError):
    """The installed kafka-python is not the version whose internals this package patches."""

    def __init__(self, installed: str) -> None:
        self.installed = installed
        super().__init__(
            f"kafka-python {installed} is installed, but linkwatch's consumer package patches the internals of "
            f"kafka-python {SUPPORTED_VERSION} (see consumer/kafka_compat.py): "
            f"install kafka-python=={SUPPORTED_VERSION}"
        )


def check_version(installed: str | None = None) -> None:
    """Raise :class:`UnsupportedKafkaPythonError` unless ``installed`` (default: the imported
    kafka-python's version) is :data:`SUPPORTED_VERSION`."""
    version = kafka.__version__ if installed is None else installed
    if version != SUPPORTED_VERSION:
        raise UnsupportedKafkaPythonError(version)


def cluster(consumer: KafkaConsumer) -> ClusterMetadata:
    """The consumer's cluster metadata (``_cluster``): topics, leaders, ``request_update``."""
    return consumer._cluster


def disable_auto_create(consumer: KafkaConsumer) -> None:
    """kafka-python does not pass ``allow_auto_create_topics`` on to its metadata client
    (``_cluster.config``): a consumer of a deleted topic would otherwise create it again."""
    consumer._cluster.config["allow_auto_create_topics"] = False


def leader_for(consumer: KafkaConsumer, tp: TopicPartition) -> int | None:
    return consumer._cluster.leader_for_partition(tp)


def position(consumer: KafkaConsumer, tp: TopicPartition) -> int | None:
    """The fetch position of an assigned partition without the network round trip that the
    public ``position()`` may make (``_subscription.assignment``); None if unknown."""
    state = consumer._subscription.assignment.get(tp)
    if state is None or state.position is None:
        return None
    return state.position.offset


def set_partition_records(consumer: KafkaConsumer, cls: type) -> None:
    """Make the consumer's fetcher decode responses with ``cls`` (``_fetcher.PartitionRecords``,
    looked up on the instance)."""
    consumer._fetcher.PartitionRecords = cls


def time_fetches(consumer: KafkaConsumer, on_latency: Callable[[int, float], None]) -> None:
    """Call ``on_latency(node_id, seconds)`` for every fetch response: the fetcher's response
    callback (``_fetcher._handle_fetch_response``) receives node id and send time."""
    fetcher = consumer._fetcher
    original = fetcher._handle_fetch_response

    def timed(node_id: int, fetch_offsets: Any, send_time: float, response: Any) -> Any:
        on_latency(node_id, time.monotonic() - send_time)
        return original(node_id, fetch_offsets, send_time, response)

    fetcher._handle_fetch_response = timed


def commit_in_callback(
    consumer: KafkaConsumer, offsets: dict[TopicPartition, OffsetAndMetadata], timeout_ms: int
) -> Coroutine[Any, Any, Any]:
    """A synchronous commit to await inside an async rebalance callback (on the IO thread,
    where the public ``commit`` would deadlock): ``_coordinator._commit_offsets_sync_async``."""
    return consumer._coordinator._commit_offsets_sync_async(offsets, timeout_ms)


async def loop_sleep(consumer: KafkaConsumer, seconds: float) -> None:
    """Sleep inside a rebalance callback without blocking kafka-python's event loop (heartbeats
    go on): the loop's own sleep, ``_coordinator._manager._net.sleep``."""
    await consumer._coordinator._manager._net.sleep(seconds)


_TP_IN_ERROR = re.compile(r"TopicPartition\(topic='([^']+)', partition=(\d+)\)")


def failing_partition(consumer: KafkaConsumer, e: KafkaError) -> TopicPartition | None:
    """The partition a fetch error is about (kafka-python names it in the message), with the
    broken parsed response discarded: kafka-python 3.0.12 otherwise keeps re-reading the
    exhausted iterator of a batch that failed its CRC check and ``poll`` never returns
    (``_fetcher._next_partition_records``)."""
    fetcher = consumer._fetcher
    broken = fetcher._next_partition_records
    match = _TP_IN_ERROR.search(str(e))
    tp = TopicPartition(match.group(1), int(match.group(2))) if match else None
    if broken is not None and (tp is None or broken.topic_partition == tp):
        tp = broken.topic_partition
        broken.drain()
        fetcher._next_partition_records = None
    return tp


def finish_late_joins(consumer: KafkaConsumer) -> None:
    """Complete a group join whose answer came between two polls instead of throwing it away.

    kafka-python 3.0.12's ``join_group_async`` runs JoinGroup+SyncGroup as a task
    (``_coordinator._join_task``) and stops waiting for it when the caller's poll timeout
    expires, keeping the task for the next poll. But the next poll starts a *new* join when it
    finds that task already done (``if self._join_task is None or self._join_task.is_done``):
    an assignment that arrived while no poll was waiting is dropped and JoinGroup sent again.
    When the member is the group leader its JoinGroup starts another rebalance. Polls that come
    and go in tens of milliseconds (the remediation lease's 20 ms turns, a pump's short polls)
    leave gaps of a few milliseconds between them, about as long as a SyncGroup takes on
    loopback: with 20 ms polls and nothing else, a standby joining the lease's group set off a
    rebalance storm (generation 109 after 20 s). ``tests/consumer/test_rebalance.py`` reproduces
    the race with kafka-python alone and shows the join completed with this fix.

    Fix: a finished join task met by the next poll is replaced by a pending one that resolves,
    on kafka-python's event loop, with the finished task's result (or raises its error), so the
    library's own completion path (state, heartbeats, ``on_partitions_assigned``) runs on the
    answer the group gave. Touches ``_coordinator.join_group_async``, ``_join_task`` and
    ``_manager.call_soon``.
    """
    coordinator = consumer._coordinator
    manager = coordinator._manager
    join_group_async = coordinator.join_group_async

    async def join_or_finish(timeout_ms: float | None = None) -> bool:
        task = coordinator._join_task
        if task is not None and task.is_done:
            # Runs on the event loop, like this coroutine: it cannot resolve before the library
            # has checked the task (nothing awaits in between while the coordinator is known).
            _log.debug("group %s: completing a join answered between two polls", coordinator.group_id)
            coordinator._join_task = manager.call_soon(functools.partial(_outcome, task))
        return await join_group_async(timeout_ms=timeout_ms)

    coordinator.join_group_async = join_or_finish


def _outcome(future: Any) -> Any:
    """A finished future's value, or its exception raised."""
    if future.exception is not None:
        raise future.exception
    return future.value


def steady_group_join(consumer: KafkaConsumer, join_wait_ms: int) -> None:
    """Work around three kafka-python 3.0.12 group-join races that short polls hit.

    1. The coordinator compares the metadata it assigned with (``_assignment_snapshot``) to the
       latest one and rejoins when they differ. Its snapshot is only rebuilt on a metadata
       *update*; when the topic's metadata was already loaded before ``subscribe`` (as
       ``AsyncFetchConsumer._await_metadata`` does), the first assignment is made with an
       empty snapshot, the next metadata refresh differs, and the group rebalances right after
       its first join — records delivered in between become stale and are delivered again.
       Fix: build the snapshot from the metadata at hand right after ``subscribe``.
    2. ``join_group_async`` runs JoinGroup+SyncGroup as a task and gives up waiting when the
       caller's poll timeout expires, leaving the task in flight for the next poll — but only
       while ``need_rejoin()`` is still true. The leader's own assignment equalises the two
       snapshots during that task, so ``need_rejoin()`` turns false, the finished join is never
       completed (no ``on_partitions_assigned``, partitions left pending revocation) and the
       consumer fetches nothing until the session ends. Fix: a join task in flight means a
       rejoin is still needed, and a join is awaited for up to ``join_wait_ms`` per poll (so a
       join is not abandoned every 20 ms pump poll in the first place).
    3. A join answered between two polls is thrown away: :func:`finish_late_joins`.
    """
    finish_late_joins(consumer)
    coordinator = consumer._coordinator
    coordinator._metadata_snapshot = coordinator._build_metadata_snapshot(
        consumer._subscription, consumer._cluster
    )
    need_rejoin = coordinator.need_rejoin
    join_group_async = coordinator.join_group_async

    def need_rejoin_or_joining() -> bool:
        return coordinator._join_task is not None or need_rejoin()

    async def join_patiently(timeout_ms: float | None = None) -> bool:
        wait = join_wait_ms if timeout_ms is None else max(timeout_ms, join_wait_ms)
        return await join_group_async(timeout_ms=wait)

    coordinator.need_rejoin = need_rejoin_or_joining
    coordinator.join_group_async = join_patiently


class CoordinatorBackoff:
    """Exponential backoff of the group-coordinator lookup after the coordinator was marked dead.

    kafka-python 3.0.12's ``ensure_coordinator_ready_async`` loops ``while coordinator_unknown()``
    and backs off only on a *failed* lookup. When the coordinator's broker dies, the other
    brokers keep answering FindCoordinator with the dead node until the coordinator moves; the
    lookup succeeds, ``coordinator()`` finds the node disconnected and marks it dead, and the
    loop asks again at once: 1,000–2,000 lookups (and "Marking the coordinator dead" warnings)
    a second, the process CPU doubled. With this backoff, a lookup after a death waits
    ``initial_ms``, doubling per death in a row up to ``max_ms``; a coordinator that stayed
    alive for ``max_ms`` resets it. The wait runs on kafka-python's event loop (heartbeats and
    fetches go on), inside the lookup task that ``lookup_coordinator`` shares between callers.
    """

    def __init__(self, initial_ms: float, max_ms: float) -> None:
        self.initial_s = initial_ms / 1000
        self.max_s = max_ms / 1000
        self.deaths_in_a_row = 0
        self.dead_at: float | None = None
        self.found_at: float | None = None
        self.lookups = 0
        self.waited_s = 0.0

    def on_dead(self, now: float) -> None:
        if self.found_at is not None and now - self.found_at >= self.max_s:
            self.deaths_in_a_row = 0
        self.deaths_in_a_row += 1
        self.dead_at = now

    def delay(self, now: float) -> float:
        """Seconds a lookup starting now waits first (0 when no death is recent)."""
        if self.dead_at is None or self.deaths_in_a_row == 0:
            return 0.0
        backoff = min(self.max_s, self.initial_s * 2 ** (self.deaths_in_a_row - 1))
        return max(0.0, self.dead_at + backoff - now)


def back_off_coordinator_lookup(
    consumer: KafkaConsumer, initial_ms: float, max_ms: float
) -> CoordinatorBackoff:
    """Install :class:`CoordinatorBackoff` on the consumer's coordinator (``coordinator_dead``
    and ``_send_group_coordinator_request``, looked up on the instance; the sleep is the
    event loop's own, ``_manager._net.sleep``)."""
    coordinator = consumer._coordinator
    backoff = CoordinatorBackoff(initial_ms, max_ms)
    coordinator_dead = coordinator.coordinator_dead
    send_lookup = coordinator._send_group_coordinator_request
    net = coordinator._manager._net

    def coordinator_dead_noted(error: Any) -> None:
        if coordinator.coordinator_id is not None:
            backoff.on_dead(time.monotonic())
        coordinator_dead(error)

    async def send_lookup_after_backoff() -> Any:
        wait = backoff.delay(time.monotonic())
        if wait > 0:
            backoff.waited_s += wait
            await net.sleep(wait)
        backoff.lookups += 1
        result = await send_lookup()
        backoff.found_at = time.monotonic()
        return result

    coordinator.coordinator_dead = coordinator_dead_noted
    coordinator._send_group_coordinator_request = send_lookup_after_backoff
    return backoff


def mark_coordinator_dead_on_close(consumer: KafkaConsumer) -> None:
    """Mark the group coordinator dead as soon as the consumer's connection to it closes.

    kafka-python 3.0.12's ``coordinator()`` marks the coordinator dead only when its node is
    disconnected *and* in reconnect backoff; a connection that closes sets no backoff (only a
    failed connect does). So when the coordinator's broker dies, the member learns it only from
    a request failing on the connection or when a check falls inside a failed reconnect's
    backoff, else when the session expires: for an idle member, the next heartbeat's refused
    reconnect, 2.6 s after a SIGKILL in two runs (up to ``heartbeat_interval_ms``). With this
    hook, the close of the connection to the current coordinator node (a lost or a refused
    connection, whatever the error) calls ``coordinator_dead`` at once, on kafka-python's event
    loop where the close is handled: 0.03 s after the SIGKILL. ``coordinator_dead`` is looked up
    on the instance when called, so :func:`back_off_coordinator_lookup` counts the death and
    paces the lookups that follow, whichever of the two is installed first. Ignored: the close
    of a connection to a node that is no longer the coordinator, and every close once the
    client is shutting down (``_manager.closed``).

    Touches ``_coordinator._manager``: its ``get_connection`` (looked up on the instance,
    wrapped so that each connection it creates is watched), its ``_conns`` (those already
    open are watched too) and each connection's ``close_future``.
    """
    coordinator = consumer._coordinator
    manager = coordinator._manager
    get_connection = manager.get_connection
    watched: weakref.WeakSet[Any] = weakref.WeakSet()

    def on_close(node_id: Any, error: BaseException | None) -> None:
        if not manager.closed and coordinator.coordinator_id == node_id:
            coordinator.coordinator_dead(f"Connection closed ({error or 'EOF'})")

    def watch(conn: Any) -> None:
        if conn not in watched:
            watched.add(conn)
            conn.close_future.add_both(on_close, conn.node_id)

    def get_connection_watched(node_id: Any, *args: Any, **kwargs: Any) -> Any:
        conn = get_connection(node_id, *args, **kwargs)
        watch(conn)
        return conn

    manager.get_connection = get_connection_watched
    for conn in list(manager._conns.values()):
        watch(conn)


class ProduceRequests:
    """Which Produce request carried each batch of a kafka-python producer: see
    :func:`note_produce_requests`.

    :meth:`carrier` answers only on the thread completing a batch, inside the response handler
    (record futures' callbacks run there): ``(node_id, correlation_id)`` of the request whose
    response completed the record's batch, else ``None`` (a failed request, or acks=0).
    Bounded: requests created but neither answered nor failed (the sender dropped them) are
    forgotten past ``max_pending`` batches, counted in ``evicted``.
    """

    def __init__(self, max_pending: int) -> None:
        self.max_pending = max_pending
        self.evicted = 0
        self._pending: OrderedDict[int, tuple[Any, Any]] = (
            OrderedDict()
        )  # id(produce future) -> (future, request)
        self._lock = threading.Lock()
        self._answering = threading.local()

    def created(self, node_id: int, request: Any, batches: Any) -> None:
        with self._lock:
            for batch in batches:
                pf = batch.produce_future
                self._pending[id(pf)] = (pf, request)
            while len(self._pending) > self.max_pending:
                self._pending.popitem(last=False)
                self.evicted += 1

    def answered(self, node_id: int, batches: Any) -> dict[int, tuple[int, int]]:
        """Forget ``batches``; id(produce future) -> (node, correlation id) of their request."""
        out = {}
        with self._lock:
            for batch in batches:
                entry = self._pending.pop(id(batch.produce_future), None)
                header = entry[1].header if entry is not None else None
                if header is not None:
                    out[id(batch.produce_future)] = (node_id, header.correlation_id)
        return out

    def carrier(self, record_future: Any) -> tuple[int, int] | None:
        current = getattr(self._answering, "batches", None)
        return current.get(id(record_future._produce_future)) if current else None


def note_produce_requests(producer: Any, max_pending: int = 100_000) -> ProduceRequests:
    """Note, per batch, the Produce request that carried it (``_sender._create_produce_requests``,
    ``_sender._handle_produce_response``, ``_sender._failed_produce``, the request's ``header``
    and the record future's ``_produce_future``), so a record's callback can ask
    :meth:`ProduceRequests.carrier` for the (broker, correlation id) the broker logged it under.
    A retried batch is answered by its last request."""
    check_version()
    sender = producer._sender
    requests = ProduceRequests(max_pending)
    create = sender._create_produce_requests
    handle = sender._handle_produce_response
    failed = sender._failed_produce

    def create_noted(collated: Any) -> Any:
        made = create(collated)
        for node_id, request in made.items():
            requests.created(node_id, request, collated[node_id])
        return made

    def handle_noted(node_id: int, send_time: float, batches: Any, response: Any) -> Any:
        requests._answering.batches = requests.answered(node_id, batches)
        try:
            return handle(node_id, send_time, batches, response)
        finally:
            requests._answering.batches = None

    def failed_noted(batches: Any, node_id: int, error: Any) -> Any:
        requests.answered(node_id, batches)
        return failed(batches, node_id, error)

    sender._create_produce_requests = create_noted
    sender._handle_produce_response = handle_noted
    sender._failed_produce = failed_noted
    return requests
