"""One acting remediator per cluster: a lease held through Kafka's group membership.

Why a consumer group and not a file lock or a record with an expiry: it works across hosts with
nothing but the cluster being remediated, and Kafka's group coordinator already does what a
lease needs — one partition of a one-partition topic is assigned to exactly one live member, a
member that stops heartbeating (SIGKILL, host gone, network cut) is expelled after
``session.timeout.ms`` and the partition is assigned to a standby. A record-with-expiry lease
would have to re-implement that compare-and-set on a log; a file lock only works on one host.

The holder must re-check :meth:`KafkaLease.held` before every step (not once per action): a
member that lost its session (a long GC, a partition from the coordinator) learns it on its next
poll and stops. ``held`` also turns false when polls stop succeeding for ``session_timeout``,
so a holder cut off from the coordinator stands down no later than the coordinator expels it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.errors import TopicAlreadyExistsError

from remediation.config import LeaseConfig

log = logging.getLogger(__name__)


def ensure_lease_topic(admin: Any, topic: str) -> None:
    with contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 1, -1)], raise_errors=True)


class KafkaLease:
    def __init__(self, bootstrap: str, cfg: LeaseConfig, member: str, admin: Any) -> None:
        self.cfg = cfg
        self.member = member
        ensure_lease_topic(admin, cfg.topic)
        self._consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=cfg.group,
            client_id=f"linkwatch-remediator-{member}",
            enable_auto_commit=False,
            session_timeout_ms=cfg.session_timeout_ms,
            heartbeat_interval_ms=min(cfg.heartbeat_interval_ms, cfg.session_timeout_ms // 3),
            max_poll_interval_ms=max(cfg.session_timeout_ms * 5, 30_000),
            # Sticky: a standby joining (or restarting) never takes the lease from a live holder.
            partition_assignment_strategy=[StickyPartitionAssignor],
        )
        self._consumer.subscribe([cfg.topic])
        self._tp = TopicPartition(cfg.topic, 0)
        self._held = False
        self._last_ok = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._lock:
                    self._consumer.poll(timeout_ms=200)
                    held = self._tp in self._consumer.assignment()
                self._last_ok = time.monotonic()
                if held != self._held:
                    log.info("lease %s: %s", self.cfg.group, "acquired" if held else "lost")
                self._held = held
            except Exception:  # a failed poll must not end the thread; held() times out instead
                log.exception("lease poll failed")
                self._stop.wait(0.5)

    def held(self) -> bool:
        fresh = time.monotonic() - self._last_ok < self.cfg.session_timeout_ms / 1000
        return self._held and fresh

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


class LocalLease:
    """Always held: for ``lease.enabled: false`` (one remediator by construction) and unit tests."""

    def held(self) -> bool:
        return True

    def wait(self, timeout_s: float) -> bool:
        return True

    def close(self) -> None:
        pass
