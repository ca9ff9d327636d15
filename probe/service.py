"""Run the probe: keep the topic, send probes, read them back, report windows.

:class:`ProbeService` owns its Kafka clients. Threads:

* the *probe loop* (:meth:`run`): probes to every partition with an online leader, attributed
  to that leader, each partition on its own schedule (``interval_ms`` apart on average; with
  ``schedule: poisson`` the gaps are exponential, the standard for active measurement: a
  periodic stall cannot hide between probes that keep the same phase); read-backs from the async-fetch consumer
  (:mod:`consumer.async_fetch`, manually assigned to every partition, starting at the end
  offsets taken before the first probe, so no probe is missed); deadlines; and every
  ``window_s`` (on wall-clock boundaries) one window per broker → metrics and ``ProbeSample``
  records. Nothing in it waits on an admin call, so a stalled broker delays only its own probes.
* the *topic keeper*: every ``topic.check_interval_s`` reads the cluster and the topic and
  (with ``topic.manage``) applies :func:`probe.topic.plan`; it publishes the partition →
  leader map the loop probes. A failed check is logged and counted; the last map stays.
* kafka-python's producer I/O thread: acks (recorded in the :class:`~probe.ledger.ProbeLedger`).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from consumer.async_fetch import AsyncFetchConsumer, ConsumerConfig
from linkwatch.kafka_client import (
    BOOTSTRAP_TIMEOUT_MS,
    admin_client,
    client_id,
    explained_connect_errors,
    kafka_python_kwargs,
)
from linkwatch.metrics_server import MetricsServer
from linkwatch.records import ProbeSample
from probe.commits import CommitProber, CommitWindow
from probe.config import ProbeConfig
from probe.ledger import BrokerWindow, ProbeLedger
from probe.metrics import ProbeMetrics
from probe.topic import NO_LEADER, apply, plan, read_view

log = logging.getLogger(__name__)

CONSUME_RETRY_S = 1.0  # after a failed read of the probed partitions' ends

TP = tuple[str, int]


def next_gap_s(schedule: str, mean_s: float, rng: random.Random) -> float:
    """The wait before a partition's next probe: ``mean_s`` (``fixed``) or an exponential draw
    of mean ``mean_s`` (``poisson``: memoryless, so the probes' phase against any period is
    uniform)."""
    return rng.expovariate(1 / mean_s) if schedule == "poisson" else mean_s


class _EndOffsets:
    """Offset store for the consumer: start every partition at its end before probing."""

    def __init__(self, offsets: Mapping[TP, int]) -> None:
        self._offsets = dict(offsets)

    def offsets(self) -> dict[TP, int]:
        return dict(self._offsets)


def probe_records(
    windows: Mapping[int, BrokerWindow],
    cfg: ProbeConfig,
    window_start_ms: int,
    commits: Mapping[int, CommitWindow] | None = None,
) -> list[ProbeSample]:
    """One record per broker that led a probed partition or coordinated a probe group."""
    commits = commits or {}
    windows = {b: windows.get(b) or BrokerWindow(b) for b in set(windows) | set(commits)}
    none = CommitWindow(-1)
    return [
        ProbeSample(
            cluster=cfg.cluster,
            source=cfg.instance,
            ts_ms=window_start_ms,
            broker=b,
            topic=cfg.topic.name,
            window_s=cfg.window_s,
            deadline_ms=cfg.deadline_ms,
            sent=w.sent,
            acked=w.acked,
            ok=w.ok,
            unavailable=dict(w.unavailable),
            produce=w.produce.to_dict(),
            end_to_end=w.end_to_end.to_dict(),
            commit_ok=commits.get(b, none).ok,
            commit_errors=dict(commits.get(b, none).errors),
            commit_latency=commits.get(b, none).latency.to_dict(),
        )
        for b, w in sorted(windows.items())
    ]


class ProbeService:
    def __init__(self, config: ProbeConfig, registry: CollectorRegistry | None = None) -> None:
        self.config = config
        cfg = config
        with explained_connect_errors(cfg.kafka):  # the first connection: a wrong password shows here
            self.admin = admin_client(
                **kafka_python_kwargs(cfg.kafka, "probe-admin"), bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS
            )
        self.producer = KafkaProducer(
            **kafka_python_kwargs(cfg.kafka, f"probe-{cfg.instance}"),
            acks=1 if cfg.acks == "leader" else "all",
            linger_ms=0,
            max_block_ms=1000,  # a send never holds the loop longer (metadata unavailable: send_error)
            request_timeout_ms=min(30_000, cfg.forget_after_ms),
            delivery_timeout_ms=cfg.forget_after_ms + 1000,
        )
        self.ledger = ProbeLedger(cfg.deadline_ms / 1000, cfg.forget_after_ms / 1000, cfg.max_pending)
        self.metrics = ProbeMetrics(cfg.cluster)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(self.metrics)
        self.publish_errors = 0
        self.last_commits: dict[int, CommitWindow] = {}
        self._committer: threading.Thread | None = None
        self._leaders: dict[int, int] = {}  # partition -> leader; replaced whole by the keeper
        self._leaders_lock = threading.Lock()
        self._consumer: AsyncFetchConsumer | None = None
        self._consumed: frozenset[int] = frozenset()
        self._consume_retry_at = 0.0  # monotonic: no new try to (re)assign the consumer before
        self.consumer_retries = 0  # reads of the probed partitions' ends that failed and were retried
        self._seq = time.time_ns() // 1000  # unique per run: an earlier run's probes never match
        self._ends_admin: KafkaAdminClient | None = None
        self._rng = random.Random()
        self._due: dict[int, float] = {}  # partition -> monotonic time of its next probe
        self._http: MetricsServer | None = None
        self._keeper: threading.Thread | None = None
        self.commits: CommitProber | None = None
        self._commit_admin: KafkaAdminClient | None = None
        if cfg.commit.enabled:
            # its own admin client: commits run on their own thread, beside the topic keeper's calls
            self._commit_admin = admin_client(
                **kafka_python_kwargs(cfg.kafka, f"probe-commit-{cfg.instance}")
            )
            self.commits = CommitProber(
                self._commit_admin,
                cfg.topic.name,
                f"{cfg.commit.group_prefix}.{cfg.instance}",
                cfg.commit.interval_ms / 1000,
                cfg.topic.check_interval_s,
            )

    # --- the topic keeper ---------------------------------------------------------------------

    def check_topic(self) -> bool:
        """One keeper step: plan, apply (when managed), publish the leaders. Errors propagate.

        Returns whether the topic looked settled (nothing planned, every partition led)."""
        cfg = self.config.topic
        view = read_view(self.admin, cfg.name)
        p = plan(view, cfg.replication_factor) if cfg.manage else None
        if p is not None and not p.empty:
            log.info(p.describe())
            apply(self.admin, cfg.name, view, p)
            for action, n in (
                ("create", len(p.create)),
                ("reassign", len(p.reassign)),
                ("elect", len(p.elect)),
            ):
                if n:
                    self.metrics.count_action(action, n)
            view = read_view(self.admin, cfg.name)
        leaders = {part: b for part, b in view.leaders.items() if b != NO_LEADER}
        with self._leaders_lock:
            self._leaders = leaders
        return (p is None or p.empty) and len(leaders) == len(view.replicas) and not view.reassigning

    def _keep_topic(self, stop: threading.Event, settled: bool) -> None:
        # An unsettled topic (just created, moving, leaderless) is looked at again within a
        # second, so new partitions are probed as soon as they have leaders.
        while not stop.wait(
            self.config.topic.check_interval_s if settled else min(1.0, self.config.topic.check_interval_s)
        ):
            try:
                settled = self.check_topic()
            except Exception as e:
                settled = False
                self.metrics.count_action("check_failed")
                log.warning("probe topic check failed (probing goes on with the last leaders): %s", e)

    def leaders(self) -> dict[int, int]:
        with self._leaders_lock:
            return dict(self._leaders)

    # --- the probe loop ----------------------------------------------------------------------

    def _ensure_consumer(self, partitions: frozenset[int]) -> None:
        """(Re)assign the consumer when the probed partitions change, starting at their ends.
        The consumer in place keeps reading back until the new one can start: a leader moving
        (a broker restarted) must not leave the probe reading nothing."""
        if partitions == self._consumed or time.monotonic() < self._consume_retry_at:
            return
        if not partitions:
            self._close_consumer()
            self._consumed = partitions
            return
        topic = self.config.topic.name
        try:
            ends = self._ends_client().list_partition_offsets(
                {TopicPartition(topic, p): OffsetSpec.LATEST for p in partitions}
            )
        except KafkaError as e:
            # Just after the topic was created (or a partition moved) a broker may not know it
            # yet (UnknownTopicOrPartition); after a broker restarted, this client's metadata may
            # not know the broker (UnknownBrokerId): a fresh client, a second later.
            self._drop_ends_client()
            self._consume_retry_at = time.monotonic() + CONSUME_RETRY_S
            self.consumer_retries += 1
            log.warning(
                "probe: reading the ends of %s failed (%s); retrying in %.0f s", topic, e, CONSUME_RETRY_S
            )
            return
        self._close_consumer()
        self._consumed = partitions
        cc = ConsumerConfig(
            kafka=self.config.kafka,
            client_id=client_id(self.config.kafka, f"probe-{self.config.instance}"),
            cluster=self.config.cluster,
            auto_offset_reset="latest",
            fetch_max_wait_ms=200,
        )
        self._consumer = AsyncFetchConsumer(
            cc,
            partitions=[(topic, p) for p in sorted(partitions)],
            offset_store=_EndOffsets({(tp.topic, tp.partition): o.offset for tp, o in ends.items()}),
        ).start()

    def _ends_client(self) -> KafkaAdminClient:
        """The admin client that reads the probed partitions' ends (not the topic keeper's: it
        is replaced after a failure, and the keeper runs in its own thread)."""
        if self._ends_admin is None:
            self._ends_admin = admin_client(**kafka_python_kwargs(self.config.kafka, "probe-ends"))
        return self._ends_admin

    def _drop_ends_client(self) -> None:
        admin, self._ends_admin = self._ends_admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    def _close_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def leader_now(self, part: int, mapped: int) -> int:
        """The broker this partition's probe goes to: the producer's own metadata, which it
        refreshes at once when a leader moves (NOT_LEADER), else the topic keeper's map (read
        every ``topic.check_interval_s``). A probe is attributed to the broker that served it,
        not to one its leadership left: a broker shut down for a restart is not probed as slow."""
        try:
            leader = self.producer._metadata.leader_for_partition(
                TopicPartition(self.config.topic.name, part)
            )
        except Exception:  # the client's internals moved: the keeper's map is still right within a check
            return mapped
        return leader if isinstance(leader, int) and leader >= 0 else mapped

    def next_gap_s(self) -> float:
        return next_gap_s(self.config.schedule, self.config.interval_ms / 1000, self._rng)

    def send_due(self, now_s: float) -> float:
        """Probe every partition whose time has come (a partition seen for the first time is due
        after a random part of one gap, so the partitions do not start in step); returns the
        monotonic time the next one is due."""
        leaders = self.leaders()
        for part in list(self._due):
            if part not in leaders:
                del self._due[part]  # bounded by the partitions that have a leader
        for part in leaders:
            if part not in self._due:
                self._due[part] = now_s + self._rng.uniform(0, self.config.interval_ms / 1000)
        due = {p: b for p, b in leaders.items() if self._due[p] <= now_s}
        self.send_round(now_s, due)
        for part in due:
            self._due[part] = max(self._due[part] + self.next_gap_s(), now_s)
        return min(self._due.values(), default=now_s + self.config.interval_ms / 1000)

    def send_round(self, now_s: float, leaders: Mapping[int, int] | None = None) -> int:
        """One probe to every partition of ``leaders`` (partition → leader; default: every one
        with a leader); returns how many were sent."""
        cfg = self.config
        padding = "x" * cfg.payload_bytes
        sent = 0
        for part, mapped in sorted((self.leaders() if leaders is None else leaders).items()):
            broker = self.leader_now(part, mapped)
            self._seq += 1
            seq = self._seq
            if not self.ledger.sent(seq, broker, now_s):
                continue
            value = orjson.dumps({"i": cfg.instance, "s": seq, "t": int(time.time() * 1000), "p": padding})
            try:
                future = self.producer.send(
                    cfg.topic.name, value=value, key=cfg.instance.encode(), partition=part
                )
            except Exception as e:
                log.debug("probe send to partition %d failed: %s", part, e)
                self.ledger.failed(seq, time.monotonic())
                continue
            future.add_callback(lambda _md, s=seq: self.ledger.acked(s, time.monotonic()))
            future.add_errback(lambda _e, s=seq: self.ledger.failed(s, time.monotonic()))
            sent += 1
        return sent

    def read_back(self, timeout_s: float) -> int:
        """Read what arrived (waiting at most ``timeout_s`` for the first); returns the count."""
        if self._consumer is None:
            time.sleep(timeout_s)
            return 0
        got = self._consumer.poll(timeout_s=timeout_s)
        now = time.monotonic()
        for d in got:
            try:
                body = orjson.loads(d.raw_value or b"")
                instance, seq = body["i"], body["s"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                self.ledger.drop("bad_value")
                continue
            if instance != self.config.instance:
                self.ledger.drop("other_instance")
                continue
            self.ledger.read_back(int(seq), now)
        if got:
            self._consumer.ack_many(got)
            # No group, no commits: the probe restarts at the end offsets. What is read is done;
            # forgetting it keeps the tracker bounded (else the partition pauses after
            # max_uncommitted_per_partition probes).
            tracker = self._consumer.tracker
            tracker.mark_committed(tracker.committable())
        return len(got)

    def close_window(self, window_start_ms: int, publish: bool = True) -> dict[int, BrokerWindow]:
        """End a window: metrics, and its ``ProbeSample`` records on the samples topic unless
        ``publish`` is False."""
        windows = self.ledger.take_windows()
        self.metrics.update(windows, self.ledger.dropped, self.ledger.pending)
        commits = self.commits.take_windows() if self.commits is not None else {}
        self.metrics.update_commits(commits)
        self.last_commits = commits
        if self.config.publish_samples and publish:
            for rec in probe_records(windows, self.config, window_start_ms, commits):
                try:
                    self.producer.send(
                        self.config.samples_topic, key=rec.dedup_key().encode(), value=rec.to_json()
                    )
                except Exception as e:
                    self.publish_errors += 1
                    self.ledger.drop("publish_error")
                    log.warning("publish to %s failed: %s", self.config.samples_topic, e)
        return windows

    def run(
        self,
        stop: threading.Event,
        on_window: Callable[[int, dict[int, BrokerWindow]], Any] | None = None,
    ) -> None:
        """Probe until ``stop`` is set; ``on_window(window_start_ms, windows)`` after each window."""
        cfg = self.config
        settled = self.check_topic()
        keeper_stop = threading.Event()
        self._keeper = threading.Thread(
            target=self._keep_topic, args=(keeper_stop, settled), name="probe-topic", daemon=True
        )
        self._keeper.start()
        if self.commits is not None:
            self._committer = threading.Thread(
                target=self.commits.run, args=(keeper_stop,), name="probe-commit", daemon=True
            )
            self._committer.start()
        window_ms = cfg.window_s * 1000
        window_start = int(time.time() * 1000) // window_ms * window_ms
        first = True
        try:
            while not stop.is_set():
                self._ensure_consumer(frozenset(self.leaders()))
                next_send = self.send_due(time.monotonic())
                self.read_back(max(0.0, min(next_send - time.monotonic(), 0.2)))
                self.ledger.expire(time.monotonic())
                wall_ms = int(time.time() * 1000)
                if wall_ms >= window_start + window_ms:
                    # The first window is partial and holds the clients' connection set-up and
                    # first metadata reads: the analyzer would judge the leaders by it. Shown, not
                    # published.
                    windows = self.close_window(window_start, publish=not first)
                    first = False
                    if on_window is not None:
                        on_window(window_start, windows)
                    window_start = wall_ms // window_ms * window_ms
        finally:
            keeper_stop.set()

    def serve_metrics(self) -> int:
        """Start the /metrics endpoint (loopback by default); returns the bound port."""
        self._http = MetricsServer(self.registry, self.config.metrics.host, self.config.metrics.port).start()
        return self._http.server_port

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
        closers = [lambda: self.producer.close(timeout=5), self.admin.close, self._drop_ends_client]
        if self._committer is not None:  # stopped with the loop; its last commit may be in flight
            self._committer.join(timeout=10)
        if self._commit_admin is not None:
            closers.append(self._commit_admin.close)
        for closer in closers:
            try:
                closer()
            except Exception as e:
                log.debug("close: %s", e)
        if self._http is not None:
            self._http.close()


def format_window(window_start_ms: int, windows: Mapping[int, BrokerWindow]) -> str:
    """One line per broker: probes, availability, produce and end-to-end p50/p99."""

    def q(w: BrokerWindow, which: str, p: float) -> str:
        s = getattr(w, which)
        v = s.quantile(p) if s.count else None
        return "-" if v is None else f"{v:.0f}"

    lines = [f"-- window {time.strftime('%H:%M:%S', time.gmtime(window_start_ms / 1000))} UTC"]
    for b, w in sorted(windows.items()):
        avail = "-" if w.availability is None else f"{w.availability:.3f}"
        lines.append(
            f"broker {b:<4} sent {w.sent:<5} availability {avail:<6} produce p50/p99 "
            f"{q(w, 'produce', 0.5)}/{q(w, 'produce', 0.99)} ms  end-to-end p50/p99 "
            f"{q(w, 'end_to_end', 0.5)}/{q(w, 'end_to_end', 0.99)} ms"
        )
    return "\n".join(lines)
