"""The impact guard: does an action hurt what it was meant to help?

Before an action's first step the remediator reads the cluster's health signals the action might
hurt (:class:`Reading`); while it runs and for ``impact.settle_s`` after its last step it reads
them again every ``impact.check_every_s`` and compares with :func:`harm` (a pure rule). When the
signals are worse than the configured bounds in ``impact.breach_checks`` readings in a row, the
action is stopped: moves in flight cancelled (KIP-455), its throttles cleared, its applied steps
undone, the pipeline paused and the breaker opened until a person resets it.

The signals, each optional:

* ``under_replicated`` — partitions whose ISR is smaller than their replica set, not counting
  partitions being reassigned (their new replicas catch up by design). Read from the cluster.
* ``probe_p99_ms`` — the probe's produce p99 per **leader broker** (``probe/``: one partition led
  by every broker), merged from the ``ProbeSample`` records of the last ``impact.probe.window_s``
  on ``impact.probe.topic``. A broker's own timers start a request's clock only when the broker
  reads it; the probe sees a leader that is slow to read too. Compared per leader, so an action
  that moves clients onto a slow broker shows although the slowest broker was slow before.
* ``lag_seconds`` — per critical group (``impact.lag.groups``), its largest lag in seconds over
  the ``ConsumerLag`` records of the last ``impact.lag.window_s`` on ``impact.lag.topic``
  (what the lag collector publishes).

What it cannot see: a harm slower than the settle period, a harm to a client that is not a
critical group nor the probe, and anything while the signal has no data (no probe records: the
rule has nothing to compare and says nothing).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from linkwatch.records import ConsumerLag, ProbeSample, RecordError, decode
from linkwatch.sketch import LatencySketch
from remediation.config import ImpactConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading:
    """The health signals at one moment; a signal without data is None / absent."""

    at: float
    under_replicated: int | None = None
    probe_p99_ms: dict[int, float] = field(default_factory=dict)
    lag_seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["probe_p99_ms"] = {str(b): round(v, 1) for b, v in self.probe_p99_ms.items()}
        d["lag_seconds"] = {g: round(v, 1) for g, v in self.lag_seconds.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Reading:
        return cls(
            at=float(d["at"]),
            under_replicated=d.get("under_replicated"),
            probe_p99_ms={int(b): float(v) for b, v in (d.get("probe_p99_ms") or {}).items()},
            lag_seconds={str(g): float(v) for g, v in (d.get("lag_seconds") or {}).items()},
        )


# The rule: pure, thresholds as arguments.
def harm(before: Reading, now: Reading, cfg: ImpactConfig) -> str | None:
    """What got worse than ``cfg`` allows between ``before`` and ``now``, or None."""
    out = []
    if (
        before.under_replicated is not None
        and now.under_replicated is not None
        and now.under_replicated - before.under_replicated > cfg.max_urp_increase
    ):
        out.append(
            f"under-replicated partitions {before.under_replicated} -> {now.under_replicated}"
            f" (max increase {cfg.max_urp_increase})"
        )
    for b, p99 in sorted(now.probe_p99_ms.items()):
        was = before.probe_p99_ms.get(b)
        if was is not None and p99 > cfg.probe.floor_ms and p99 - was > cfg.probe.max_increase_ms:
            out.append(
                f"probe p99 of leader {b} {was:.0f} -> {p99:.0f} ms (max +{cfg.probe.max_increase_ms:.0f})"
            )
    for g, lag in sorted(now.lag_seconds.items()):
        was = before.lag_seconds.get(g)
        if was is not None and lag - was > cfg.lag.max_increase_s:
            out.append(f"lag of group {g} {was:.0f} -> {lag:.0f} s (max +{cfg.lag.max_increase_s:.0f})")
    return "; ".join(out) or None


def under_replicated(partitions: Iterable[Any], reassigning: Iterable[tuple[str, int]]) -> int:
    moving = set(reassigning)
    return sum(1 for p in partitions if p.under_replicated and (p.topic, p.partition) not in moving)


def probe_p99(records: Iterable[ProbeSample]) -> dict[int, float]:
    """Per leader broker, the p99 of every probe's produce latency in ``records`` (merged sketches)."""
    merged: dict[int, LatencySketch] = {}
    for r in records:
        try:
            s = LatencySketch.from_dict(r.produce)
        except (TypeError, ValueError, KeyError):
            continue
        merged.setdefault(r.broker, LatencySketch()).merge(s)
    return {b: q for b, s in merged.items() if (q := s.quantile(0.99)) is not None}


def lag_seconds(records: Iterable[ConsumerLag], groups: Iterable[str]) -> dict[str, float]:
    """Per critical group, the largest lag in seconds of its latest record per partition."""
    wanted = set(groups)
    latest: dict[tuple[str, str, int], ConsumerLag] = {}
    for r in records:
        key = (r.group, r.topic, r.partition)
        if (
            r.group in wanted
            and r.lag_seconds is not None
            and (key not in latest or latest[key].ts_ms <= r.ts_ms)
        ):
            latest[key] = r
    out: dict[str, float] = {}
    for (g, _, _), r in latest.items():
        out[g] = max(out.get(g, 0.0), float(r.lag_seconds or 0.0))
    return out


class TopicTail:
    """Reads the records of the last ``window_s`` of a topic (every partition), decoded; records
    that do not decode are skipped. One consumer, kept between reads."""

    def __init__(self, bootstrap: KafkaClientConfig | str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self._consumer: Any = None

    def read(self, window_s: float, now_s: float, timeout_s: float = 5.0) -> list[Any]:
        from kafka import KafkaConsumer, TopicPartition

        if self._consumer is None:
            self._consumer = KafkaConsumer(
                **kafka_python_kwargs(self.bootstrap, "remediator-impact"),
                group_id=None,
                enable_auto_commit=False,
                allow_auto_create_topics=False,
            )
        c = self._consumer
        parts = [TopicPartition(self.topic, p) for p in sorted(c.partitions_for_topic(self.topic) or ())]
        if not parts:
            return []
        c.assign(parts)
        end = c.end_offsets(parts)
        start = c.offsets_for_times({tp: int((now_s - window_s) * 1000) for tp in parts})
        for tp in parts:
            at = start.get(tp)
            c.seek(tp, at.offset if at is not None else end[tp])
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while any(c.position(tp) < end[tp] for tp in parts) and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=200).values():
                for rec in batch:
                    with contextlib.suppress(RecordError):
                        out.append(decode(rec.value))
        return out

    def close(self) -> None:
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                self._consumer.close()
            self._consumer = None


class HealthSignals:
    """Reads a :class:`Reading`: URP from ``urp()``, the probe and lag from their topics."""

    def __init__(
        self,
        cfg: ImpactConfig,
        bootstrap: KafkaClientConfig | str,
        urp: Callable[[], int | None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg, self.urp, self.clock = cfg, urp, clock
        self._probe = TopicTail(bootstrap, cfg.probe.topic) if cfg.probe.topic else None
        self._lag = TopicTail(bootstrap, cfg.lag.topic) if cfg.lag.groups else None

    def read(self) -> Reading:
        now = self.clock()
        urp = self._safe(self.urp, None)
        probe: dict[int, float] = {}
        if self._probe is not None:
            tail = self._probe
            records = self._safe(lambda: tail.read(self.cfg.probe.window_s, now), [])
            probe = probe_p99(r for r in records if isinstance(r, ProbeSample))
        lag: dict[str, float] = {}
        if self._lag is not None:
            tail_lag = self._lag
            records = self._safe(lambda: tail_lag.read(self.cfg.lag.window_s, now), [])
            lag = lag_seconds((r for r in records if isinstance(r, ConsumerLag)), self.cfg.lag.groups)
        return Reading(at=now, under_replicated=urp, probe_p99_ms=probe, lag_seconds=lag)

    @staticmethod
    def _safe(fn: Callable[[], Any], default: Any) -> Any:
        try:
            return fn()
        except Exception as e:  # a signal that cannot be read is "no data", never a verdict
            log.warning("impact signal unavailable: %s", e)
            return default

    def close(self) -> None:
        for t in (self._probe, self._lag):
            if t is not None:
                t.close()


class ImpactBreach(Exception):
    """Raised inside an action when its impact crossed the bounds; the message says what."""


@dataclass
class Watch:
    """One action's watch: its before figures, the readings since, and the breach streak. Plain
    data, kept in the action's persisted record so a new lease holder continues it."""

    before: dict[str, Any]
    readings: list[dict[str, Any]] = field(default_factory=list)
    streak: int = 0
    last_check: float = 0.0
    settle_until: float | None = None
    verdict: str | None = None

    MAX_READINGS = 60

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": self.before,
            "readings": self.readings[-self.MAX_READINGS :],
            "streak": self.streak,
            "last_check": self.last_check,
            "settle_until": self.settle_until,
            "verdict": self.verdict,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Watch:
        return cls(
            before=dict(d["before"]),
            readings=list(d.get("readings") or []),
            streak=int(d.get("streak") or 0),
            last_check=float(d.get("last_check") or 0.0),
            settle_until=d.get("settle_until"),
            verdict=d.get("verdict"),
        )

    def check(self, signals: HealthSignals, cfg: ImpactConfig, phase: str, now: float) -> str | None:
        """Read (at most every ``check_every_s``) and return the harm once it held in
        ``breach_checks`` readings in a row; None otherwise."""
        if now - self.last_check < cfg.check_every_s:
            return None
        self.last_check = now
        reading = signals.read()
        found = harm(Reading.from_dict(self.before), reading, cfg)
        self.readings.append({"phase": phase, **reading.to_dict(), "harm": found})
        self.readings = self.readings[-self.MAX_READINGS :]
        self.streak = self.streak + 1 if found else 0
        return found if found and self.streak >= cfg.breach_checks else None
