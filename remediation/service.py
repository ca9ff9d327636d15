"""Running the remediator: build it from config, and the loop behind ``linkwatch remediate run``.

:func:`build` connects (admin client, lease, state) — the only place that does. What it builds
depends on the mode:

* ``execute: false`` (dry run): the state is the local file, no lease is joined and nothing is
  created on the cluster (not even the lease topic);
* ``execute: true`` with ``lease.enabled: false``: one remediator by construction, the file;
* ``execute: true`` with the lease: the lease (group ``lease.group`` on ``lease.topic``, also the
  command inbox) and the shared state in ``lease.state_topic``, both created if missing; every
  state write and every change to the cluster fenced by the lease group's generation.

:func:`serve` waits for the lease; once held, it loads the state the last holder left, finishes
or cancels the actions left running, and reads the findings topic **from the positions judged so
far** (kept in the state, written with every finding; a partition never read starts at the
findings of the last ``intake.max_age_s``, never at the end), handing each record to
:meth:`Remediator.handle` and calling :meth:`Remediator.tick` (operator commands, settle watches,
restores) between polls. Fenced or the lease lost, it stands down and waits for the lease again.
Records that are not findings are dropped at the boundary, counted and audited, never fatal.
:func:`from_config_file` is the remediator a findings pipeline acts through (an entry point, so
the findings package names no subsystem).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, TopicPartition

from linkwatch.errors import SetupError
from linkwatch.kafka_client import admin_client, explained_connect_errors, kafka_python_kwargs
from linkwatch.records import Finding, RecordError, decode
from remediation import intake
from remediation.config import RemediatorConfig, load_remediation_config
from remediation.control import FileInbox, StateLock
from remediation.latency import DEFAULT_QUERY, PrometheusLatency
from remediation.lease import KafkaLease, LocalLease, ensure_lease_topic
from remediation.remediator import STANDBY, Remediator, default_member
from remediation.state import Fenced, TopicStateStore, ensure_state_topic

log = logging.getLogger(__name__)

MAX_LOOP_FAILURES = 5  # taking over or reading failing this often in a row ends the process
HANDLE_ATTEMPTS = 3  # a finding whose handling raised (not a drop) is tried this often, then skipped


class _NotHeld(Exception):
    """The lease was not held when a finding was to be judged: the holder is in a rebalance (a
    standby joining leaves it unconfirmed until the group assigns the lease again) or has lost
    it. The finding is not judged and its position not moved: it is read again once the lease is
    back, or by the next holder from the judged position. (Judged as "refused: standby", a
    finding that arrived while a standby joined was skipped for good by the holder that kept
    the lease: the failover test's holder never acted on its one finding.)"""


def shared(cfg: RemediatorConfig) -> bool:
    """Whether this config acts with the lease and the shared state."""
    return cfg.execute and cfg.lease.enabled


def build(
    cfg: RemediatorConfig,
    member: str | None = None,
    latency_ms: Callable[[], float | None] | None = None,
    with_lease: bool = True,
) -> Remediator:
    with explained_connect_errors(cfg.kafka):
        admin = admin_client(**kafka_python_kwargs(cfg.kafka, "remediator"))
    if latency_ms is None and cfg.latency.prometheus_url:
        latency_ms = PrometheusLatency(
            cfg.latency.prometheus_url, cfg.latency.query or DEFAULT_QUERY, cfg.latency.timeout_s
        )
    if not with_lease:  # a one-off (plan, status): no lock, no inbox, never acts on findings
        return Remediator(cfg, admin, member=member, latency_ms=latency_ms, lease=LocalLease())
    if not shared(cfg):
        lock = StateLock(cfg.state_dir)
        if not lock.acquire():
            raise SetupError(f"another remediator runs on {cfg.state_dir} (it holds {lock.path})")
        lease = LocalLease(inbox=FileInbox(cfg.state_dir), lock=lock)
        return Remediator(cfg, admin, member=member, latency_ms=latency_ms, lease=lease)
    ensure_lease_topic(admin, cfg.lease.topic)
    ensure_state_topic(admin, cfg.lease.state_topic)
    member = member or default_member()
    lease = KafkaLease(cfg.kafka, cfg.lease, member)
    state = TopicStateStore(
        cfg.kafka,
        cfg.lease.state_topic,
        transactional_id=f"{cfg.lease.group}.state",
        lease_tp=lease.tp,
        group_metadata=lease.group_metadata,
        command_position=lease.command_position,
        wait_held=lease.wait_held,
    )
    return Remediator(cfg, admin, member=member, latency_ms=latency_ms, lease=lease, state=state)


def from_config_file(path: Path) -> Remediator:
    """The remediator a findings pipeline acts through (entry point ``default`` of group
    ``linkwatch.remediators``): built from its config file. Without the shared state it recovers
    at once; with it, it recovers when it first holds the lease (on a finding or a tick)."""
    rem = build(load_remediation_config(path))
    if not isinstance(rem.state, TopicStateStore):
        rem.recover()
    return rem


def serve(rem: Remediator, stop: threading.Event, poll_ms: int = 500) -> dict[str, Any]:
    """Run until ``stop`` is set; returns counters."""
    counters = {"findings": 0, "dropped": 0, "errors": 0, "fenced": 0}
    rem.audit.write("started", execute=rem.cfg.execute, member=rem.member, shared=rem.shared)
    failures = 0
    while not stop.is_set():
        if not rem.lease.wait(1.0):
            continue
        try:
            rem.activate()
            _judge(rem, stop, poll_ms, counters)
            failures = 0
        except Fenced as e:
            counters["fenced"] += 1
            rem.stand_down(str(e))
        except Exception as e:  # the cluster unreachable while taking over or reading: try again
            failures += 1
            counters["errors"] += 1
            log.exception("remediator loop failed (%d in a row)", failures)
            rem.stand_down(f"error: {e!r}")
            if failures >= MAX_LOOP_FAILURES:
                raise  # the process ends, leaves the group, and a standby takes over
            stop.wait(2.0 * failures)
    return counters


def _judge(rem: Remediator, stop: threading.Event, poll_ms: int, counters: dict[str, int]) -> None:
    """Read findings from the judged positions while this remediator holds the lease."""
    consumer = KafkaConsumer(
        **kafka_python_kwargs(rem.cfg.kafka, f"remediator-{rem.member}"),
        group_id=None,
        enable_auto_commit=False,
    )
    try:
        parts = _partitions(consumer, rem.cfg.findings_topic)
        consumer.assign(parts)
        positions = start_positions(
            consumer, parts, rem.state.data["offsets"], rem.clock(), rem.cfg.intake.max_age_s
        )
        for tp, offset in positions.items():
            consumer.seek(tp, offset)
        rem.audit.write(
            "listening",
            topic=rem.cfg.findings_topic,
            positions={tp.partition: o for tp, o in positions.items()},
        )
        while not stop.is_set():
            if not rem.lease.held() and not rem.lease.wait_held():
                raise Fenced("the lease was lost")
            for tp, records in consumer.poll(timeout_ms=poll_ms).items():
                for record in records:
                    try:
                        done = _one_with_retries(rem, record.value, counters)
                    except _NotHeld:
                        done = False  # the loop's top waits for the lease (or stands down)
                    if not done:
                        consumer.seek(tp, record.offset)  # not judged: read it again
                        break
                    judged(rem, tp, record.offset + 1)
            rem.tick()
            if isinstance(rem.state, TopicStateStore) and not rem.state.active:
                raise Fenced("stood down")
    finally:
        consumer.close()


def judged(rem: Remediator, tp: TopicPartition, next_offset: int) -> None:
    """Record that every finding of ``tp`` before ``next_offset`` was judged (a fenced write)."""
    rem.state.data["offsets"][f"{tp.topic}:{tp.partition}"] = next_offset
    rem.state.save()


def start_positions(
    consumer: KafkaConsumer,
    parts: list[TopicPartition],
    stored: dict[str, int],
    now_s: float,
    max_age_s: float,
) -> dict[TopicPartition, int]:
    """Where to read each partition from: the judged position kept in the state; a partition
    never judged from its first finding of the last ``max_age_s`` (older ones would be dropped
    as stale anyway), or its end when it has none that recent."""
    out: dict[TopicPartition, int] = {}
    fresh = [tp for tp in parts if f"{tp.topic}:{tp.partition}" not in stored]
    by_time = (
        consumer.offsets_for_times({tp: int((now_s - max_age_s) * 1000) for tp in fresh}) if fresh else {}
    )
    ends = consumer.end_offsets(fresh) if fresh else {}
    begins = consumer.beginning_offsets(parts)
    for tp in parts:
        key = f"{tp.topic}:{tp.partition}"
        if key in stored:
            out[tp] = max(int(stored[key]), begins[tp])  # retention may have removed some
        else:
            at = by_time.get(tp)
            out[tp] = at.offset if at is not None else ends[tp]
    return out


def _partitions(consumer: KafkaConsumer, topic: str, timeout_s: float = 30.0) -> list[TopicPartition]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = consumer.partitions_for_topic(topic)
        if found:
            return [TopicPartition(topic, p) for p in sorted(found)]
        if time.monotonic() > deadline:
            raise SetupError(f"findings topic {topic!r} does not exist (create it, or set findings_topic)")
        time.sleep(0.5)


def _one_with_retries(rem: Remediator, raw: bytes, counters: dict[str, int]) -> bool:
    """Judge one record; False when it should be read again (handling raised, tries left)."""
    for attempt in range(HANDLE_ATTEMPTS):
        if _one(rem, raw, counters):
            return True
        if attempt + 1 < HANDLE_ATTEMPTS:
            time.sleep(0.5 * (attempt + 1))
    rem.audit.write(
        "failed",
        phase="handle",
        reason=f"gave up after {HANDLE_ATTEMPTS} attempts",
        finding=intake.preview(raw),
    )
    return True


def _one(rem: Remediator, raw: bytes, counters: dict[str, int]) -> bool:
    """Decode and hand one record to the remediator; True when judged (acted on, refused or
    dropped), False when handling raised (the cluster unreachable, a bug); :class:`_NotHeld`
    when the lease was not held (not judged either)."""
    try:
        record = decode(raw)
    except RecordError as e:
        counters["dropped"] += 1
        rem.drop(intake.Dropped(e.reason, e.detail[: intake.PREVIEW_CHARS], intake.preview(raw)))
        return True
    if not isinstance(record, Finding):
        return True  # another kind on the topic: not ours to judge
    if not rem.lease.held():
        raise _NotHeld
    try:
        event = rem.handle(record)
    except Fenced:
        raise
    except Exception:  # one finding (or a cluster hiccup) must not stop the remediator
        counters["findings"] += 1
        rem.errors_total += 1
        counters["errors"] += 1
        log.exception("handling %s failed", record.dedup_key())
        return False
    if event.get("event") == "refused" and event.get("reason") == STANDBY:
        raise _NotHeld  # lost between the check above and the handover
    counters["findings"] += 1
    if event.get("event") == "dropped":
        counters["dropped"] += 1
    if event.get("event") == "fenced":
        raise Fenced(event.get("reason", "fenced"))
    return True
