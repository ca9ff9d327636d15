"""What a pass produces: Prometheus metrics, ``ConsumerLag`` samples, lag findings.

* :class:`LagMetrics` is a ``prometheus_client`` collector that renders the *last* pass (names
  in ``docs/metrics.md``), so a group or partition that disappears stops being exported instead
  of keeping its last value.
* :func:`lag_records` turns a pass into ``ConsumerLag`` records for ``linkwatch.samples``.
* :class:`FindingTracker` turns group statuses into ``Finding`` s: one when a group enters a
  non-OK status (an *episode*), a closing one (``active=False``) when it returns to OK, and a
  repeat of each open episode every ``refresh_s`` so a late reader learns what is active. It
  never emits on a pass where nothing changed. The finding's ``ts_ms`` is the episode start, so
  every message about one episode carries the same record key.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from lag.collector import GroupLag, PassResult
from lag.rules import GroupVerdict, Status
from linkwatch.records import ConsumerLag, Finding

RULE = "consumer_lag"
SEVERITY = {
    Status.WARN: "warning",
    Status.ERR: "warning",
    Status.REWIND: "warning",
    Status.STALL: "critical",
    Status.STOP: "critical",
}
ACTIONS = {
    Status.WARN: "the consumer is slower than its producers: add consumers/partitions or find its bottleneck",
    Status.STALL: "consumers are connected but stuck: check for a poison record, a blocked thread or a failing sink",
    Status.STOP: "no consumer is running for this group: restart it (data keeps arriving)",
    Status.REWIND: "committed offsets moved back: expect reprocessing; check for a manual reset or a bug",
    Status.ERR: "the lag of this group could not be evaluated: see the reason",
}


class LagMetrics(Collector):
    """Renders the last :class:`PassResult`. Register it in a ``CollectorRegistry``."""

    def __init__(self, cluster: str, cold_read: dict[tuple[str, str, int], int] | None = None) -> None:
        self.cluster = cluster
        self.last: PassResult | None = None
        self.clamped_total = 0
        # (group, topic, partition) -> leader broker, for partitions at cold-read risk.
        self.cold_read: dict[tuple[str, str, int], int] = cold_read or {}

    def update(self, result: PassResult, clamped_total: int) -> None:
        self.last = result
        self.clamped_total = clamped_total

    def collect(self) -> Iterator[Metric]:
        c = self.cluster
        lag = GaugeMetricFamily(
            "linkwatch_consumer_lag_messages",
            "End offset minus the offset the group reads next (fresh, clamped at 0).",
            labels=["cluster", "group", "topic", "partition"],
        )
        secs = GaugeMetricFamily(
            "linkwatch_consumer_lag_seconds",
            "Now minus the timestamp of the record at the committed offset.",
            labels=["cluster", "group", "topic", "partition", "method"],
        )
        glag = GaugeMetricFamily(
            "linkwatch_consumer_group_lag_messages",
            "Group lag (max or sum).",
            labels=["cluster", "group", "agg"],
        )
        gsecs = GaugeMetricFamily(
            "linkwatch_consumer_group_lag_seconds",
            "Group lag in seconds (max).",
            labels=["cluster", "group", "agg"],
        )
        status = GaugeMetricFamily(
            "linkwatch_consumer_group_status",
            "1 for the group's current status, 0 for the others.",
            labels=["cluster", "group", "status"],
        )
        cold = GaugeMetricFamily(
            "linkwatch_consumer_cold_read_risk",
            "1 when lag seconds exceed the leader's page-cache window.",
            labels=["cluster", "group", "topic", "partition", "broker"],
        )
        for g in self.last.groups.values() if self.last else []:
            for p in g.partitions:
                if p.end >= 0:
                    lag.add_metric([c, g.group, p.topic, str(p.partition)], p.lag_messages)
                if p.lag_seconds is not None:
                    secs.add_metric([c, g.group, p.topic, str(p.partition), p.method], p.lag_seconds)
            glag.add_metric([c, g.group, "max"], g.lag_max)
            glag.add_metric([c, g.group, "sum"], g.lag_sum)
            if g.lag_seconds_max is not None:
                gsecs.add_metric([c, g.group, "max"], g.lag_seconds_max)
            for s in Status:
                status.add_metric([c, g.group, s.value], 1.0 if g.verdict.status is s else 0.0)
        for (group, topic, partition), broker in sorted(self.cold_read.items()):
            cold.add_metric([c, group, topic, str(partition), str(broker)], 1.0)
        clamped = CounterMetricFamily(
            "linkwatch_lag_negative_clamped", "Negative lag readings clamped to 0.", labels=["cluster"]
        )
        clamped.add_metric([c], self.clamped_total)
        yield from (lag, secs, glag, gsecs, status, cold, clamped)


def lag_records(result: PassResult, cluster: str, source: str) -> Iterator[ConsumerLag]:
    ts_ms = int(result.ts_s * 1000)
    for g in result.groups.values():
        for p in g.partitions:
            yield ConsumerLag(
                cluster=cluster,
                source=source,
                ts_ms=ts_ms,
                group=g.group,
                topic=p.topic,
                partition=p.partition,
                committed_offset=p.committed,
                end_offset=p.end,
                lag_messages=p.lag_messages,
                lag_seconds=p.lag_seconds,
                lag_seconds_method=p.method,
                status=p.verdict.status.value,
                reason=p.verdict.reason,
                leader=p.leader,
            )


@dataclass
class _Episode:
    status: Status
    start_ms: int
    last_sent_ms: int


class FindingTracker:
    """Group status → findings, only on change (and a bounded-rate refresh while active).

    Bounded: one entry per group with an open episode; groups that disappear while in an
    episode get a closing finding ("group no longer listed").
    """

    def __init__(self, cluster: str, source: str, refresh_s: float = 300.0) -> None:
        self.cluster = cluster
        self.source = source
        self.refresh_ms = int(refresh_s * 1000)
        self._open: dict[str, _Episode] = {}

    def update(self, result: PassResult) -> list[Finding]:
        now_ms = int(result.ts_s * 1000)
        out: list[Finding] = []
        for name, g in result.groups.items():
            st = g.verdict.status
            ep = self._open.get(name)
            if st is Status.OK:
                if ep is not None:
                    out.append(self._finding(g, ep, now_ms, active=False))
                    del self._open[name]
                continue
            if ep is None or ep.status is not st:
                if ep is not None:
                    out.append(self._finding(g, ep, now_ms, active=False))
                ep = _Episode(st, now_ms, now_ms)
                self._open[name] = ep
                out.append(self._finding(g, ep, now_ms, active=True))
            elif now_ms - ep.last_sent_ms >= self.refresh_ms:
                ep.last_sent_ms = now_ms
                out.append(self._finding(g, ep, now_ms, active=True))
        # A pass that could not even list groups says nothing about which groups are gone.
        if result.groups or not result.errors:
            for name in [n for n in self._open if n not in result.groups]:
                ep = self._open.pop(name)
                gone = GroupLag(name, "", False, [], GroupVerdict(Status.OK, "group no longer listed", {}))
                out.append(self._finding(gone, ep, now_ms, active=False))
        return out

    def _finding(self, g: GroupLag, ep: _Episode, now_ms: int, active: bool) -> Finding:
        st = ep.status
        evidence: dict[str, Any] = {
            "status": st.value,
            "current_status": g.verdict.status.value,
            "reason": g.verdict.reason,
            "numbers": g.verdict.numbers,
            "lag_messages_max": g.lag_max,
            "lag_messages_sum": g.lag_sum,
            "lag_seconds_max": g.lag_seconds_max,
            "episode_start_ms": ep.start_ms,
            "decided_ms": now_ms,
            "group_state": g.state,
        }
        verb = "is" if active else "was"
        return Finding(
            cluster=self.cluster,
            source=self.source,
            ts_ms=ep.start_ms,
            rule=RULE,
            subject=f"group:{g.group}",
            severity=SEVERITY.get(st, "warning") if active else "info",
            summary=f"group {g.group} {verb} {st.value}: {g.verdict.reason}",
            evidence=evidence,
            action=ACTIONS.get(st, "") if active else "none: the episode ended",
            active=active,
        )

    @property
    def open_episodes(self) -> dict[str, Status]:
        return {k: v.status for k, v in self._open.items()}
