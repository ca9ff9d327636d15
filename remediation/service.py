"""Running the remediator: build it from config, and the loop behind ``linkwatch remediate run``.

:func:`build` connects (admin client, lease) — the only place that does. :func:`serve` waits for
the lease, then recovers what this remediator left running (only as the lease holder: a restart
must never touch the cluster while another remediator acts), then reads findings from
``findings_topic`` and hands each to :meth:`Remediator.handle`, calling :meth:`Remediator.tick`
between polls. Findings that do not decode are dropped, counted and logged, never fatal.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from linkwatch.errors import SetupError
from linkwatch.records import Finding, RecordError, decode
from remediation.config import RemediatorConfig
from remediation.latency import DEFAULT_QUERY, PrometheusLatency
from remediation.lease import KafkaLease, LocalLease
from remediation.remediator import Remediator

log = logging.getLogger(__name__)


def build(
    cfg: RemediatorConfig,
    member: str | None = None,
    latency_ms: Callable[[], float | None] | None = None,
    with_lease: bool = True,
) -> Remediator:
    admin = KafkaAdminClient(bootstrap_servers=cfg.bootstrap_servers, client_id="linkwatch-remediator")
    if latency_ms is None and cfg.latency.prometheus_url:
        latency_ms = PrometheusLatency(
            cfg.latency.prometheus_url, cfg.latency.query or DEFAULT_QUERY, cfg.latency.timeout_s
        )
    rem = Remediator(cfg, admin, member=member, latency_ms=latency_ms)
    if with_lease and cfg.lease.enabled:
        rem.lease = KafkaLease(cfg.bootstrap_servers, cfg.lease, rem.member, admin)
    else:
        rem.lease = LocalLease()
    return rem


def serve(rem: Remediator, stop: threading.Event, poll_ms: int = 500) -> dict[str, Any]:
    """Run until ``stop`` is set; returns counters."""
    cfg = rem.cfg
    counters = {"findings": 0, "dropped": 0}
    rem.audit.write("started", execute=cfg.execute, member=rem.member)
    while not stop.is_set() and not rem.lease.wait(1.0):
        pass
    if stop.is_set():
        return counters
    rem.audit.write("lease_acquired", member=rem.member)
    rem.recover()
    # No group: every remediator reads every finding from the end; the lease decides who acts.
    consumer = KafkaConsumer(
        bootstrap_servers=cfg.bootstrap_servers,
        client_id=f"linkwatch-remediator-{rem.member}",
        group_id=None,
        enable_auto_commit=False,
    )
    parts = _partitions(consumer, cfg.findings_topic)
    consumer.assign(parts)
    consumer.seek_to_end(*parts)
    rem.audit.write(
        "listening", topic=cfg.findings_topic, positions={tp.partition: consumer.position(tp) for tp in parts}
    )
    try:
        while not stop.is_set():
            for records in consumer.poll(timeout_ms=poll_ms).values():
                for record in records:
                    _one(rem, record.value, counters)
            rem.tick()
    finally:
        consumer.close()
    return counters


def _partitions(consumer: KafkaConsumer, topic: str, timeout_s: float = 30.0) -> list[TopicPartition]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = consumer.partitions_for_topic(topic)
        if found:
            return [TopicPartition(topic, p) for p in sorted(found)]
        if time.monotonic() > deadline:
            raise SetupError(f"findings topic {topic!r} does not exist (create it, or set findings_topic)")
        time.sleep(0.5)


def _one(rem: Remediator, raw: bytes, counters: dict[str, int]) -> None:
    try:
        finding = decode(raw)
    except RecordError as e:
        counters["dropped"] += 1
        log.warning("dropped a record on the findings topic (%s)", e.reason)
        return
    if not isinstance(finding, Finding):
        return
    counters["findings"] += 1
    try:
        rem.handle(finding)
    except Exception:  # one bad finding (or a cluster hiccup) must not stop the remediator
        rem.errors_total += 1
        log.exception("handling %s failed", finding.dedup_key())
