"""What a pass produces: Prometheus metrics, ``ConsumerLag`` samples, lag findings.

* :class:`LagMetrics` is a ``prometheus_client`` collector that renders the *last* pass (names
  in ``docs/metrics.md``), so a group or partition that disappears stops being exported instead
  of keeping its last value.
* :func:`lag_records` turns a pass into ``ConsumerLag`` records for ``linkwatch.samples``.
* :class:`LagFindings` turns group statuses into ``Finding`` s: one when a group enters a
  non-OK status (an *episode*), a closing one (``active=False``) when it returns to OK, and a
  repeat of each open episode every ``refresh_s`` so a late reader learns what is active. It
  never emits on a pass where nothing changed. The finding's ``ts_ms`` is the episode start, so
  every message about one episode carries the same record key. The episodes are kept by the
  findings tracker (:mod:`findings.tracker`).
* :class:`StatusChanges` is what ``lag run --print`` shows: statuses at first, then changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from findings.tracker import FindingTracker
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


def _status(f: Finding) -> str:
    return str(f.evidence["status"])


class LagFindings:
    """Group status → ``consumer_lag`` findings, only on change (and a bounded-rate repeat while
    an episode lasts).

    Each group in a non-OK status is one finding per pass; the findings tracker
    (:class:`findings.tracker.FindingTracker`) keeps the episodes: a status is an episode
    (``phase``), an open one is repeated every ``refresh_s`` (``repeat_after_ms``), and every
    message about it carries the ``ts_ms`` of its start (``keep_opened_ts``). One entry per group
    with an open episode; a group that disappears while in one gets a closing finding ("group
    no longer listed"), unless the pass could not list groups at all.
    """

    def __init__(self, cluster: str, source: str, refresh_s: float = 300.0) -> None:
        self.cluster = cluster
        self.source = source
        self.tracker = FindingTracker(
            max_tracked=None,
            hold_provisional=False,
            repeat_after_ms=int(refresh_s * 1000),
            phase=_status,
            keep_opened_ts=True,
        )

    def update(self, result: PassResult) -> list[Finding]:
        """The findings of this pass: episodes closed (first), opened and repeated."""
        now_ms = int(result.ts_s * 1000)
        current = [
            self._finding(g, g.verdict.status, now_ms, now_ms, active=True)
            for g in result.groups.values()
            if g.verdict.status is not Status.OK
        ]
        # A pass that could not even list groups says nothing about which groups are gone.
        listed = bool(result.groups) or not result.errors
        changes = self.tracker.update(current, now_ms, complete=listed)
        closed = [
            self._finding(self._group(f, result), Status(_status(f)), f.ts_ms, now_ms, active=False)
            for f in changes.cleared
        ]
        repeated = [
            self._finding(self._group(f, result), Status(_status(f)), f.ts_ms, now_ms, active=True)
            for f in changes.ongoing
        ]
        return [*closed, *changes.appeared, *repeated]

    @staticmethod
    def _group(f: Finding, result: PassResult) -> GroupLag:
        name = f.subject.removeprefix("group:")
        gone = GroupLag(name, "", False, [], GroupVerdict(Status.OK, "group no longer listed", {}))
        return result.groups.get(name, gone)

    def _finding(self, g: GroupLag, st: Status, start_ms: int, now_ms: int, active: bool) -> Finding:
        """The finding about ``g``'s episode in status ``st`` that started at ``start_ms``."""
        evidence: dict[str, Any] = {
            "status": st.value,
            "current_status": g.verdict.status.value,
            "reason": g.verdict.reason,
            "numbers": g.verdict.numbers,
            "lag_messages_max": g.lag_max,
            "lag_messages_sum": g.lag_sum,
            "lag_seconds_max": g.lag_seconds_max,
            "episode_start_ms": start_ms,
            "decided_ms": now_ms,
            "group_state": g.state,
        }
        verb = "is" if active else "was"
        return Finding(
            cluster=self.cluster,
            source=self.source,
            ts_ms=start_ms,
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
        return {f.subject.removeprefix("group:"): Status(_status(f)) for f in self.tracker.active.values()}


class StatusChanges:
    """What ``lag run --print`` shows, a pass at a time: every group's status at the first
    pass, then only the groups whose status changed since the pass before (with the status it
    had), the groups that are gone, pass errors and the findings sent. A pass that changed
    nothing shows nothing: statuses are visible without Prometheus, and quiet while steady."""

    def __init__(self) -> None:
        self._last: dict[str, Status] | None = None

    def lines(self, result: PassResult, sent: list[Finding], stamp: str) -> list[str]:
        now = {g: lag.verdict.status for g, lag in result.groups.items()}
        before = self._last
        self._last = now
        out = []
        for g in sorted(result.groups):
            lag = result.groups[g]
            was = None if before is None else before.get(g)
            if before is not None and was is now[g]:
                continue
            change = f"{was.value} -> {now[g].value}" if was is not None else now[g].value
            secs = f"{lag.lag_seconds_max:.1f}s" if lag.lag_seconds_max is not None else "?"
            out.append(f"{stamp} {g} {change}: lag max {lag.lag_max} ({secs}); {lag.verdict.reason}")
        out += [
            f"{stamp} {g} gone (was {was.value})" for g, was in sorted((before or {}).items()) if g not in now
        ]
        out += [f"{stamp} pass error: {e}" for e in result.errors]
        out += [f"{stamp} finding [{f.severity}] {f.rule} {f.subject}: {f.summary}" for f in sent]
        return out
