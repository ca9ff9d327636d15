"""One evaluation pass over every consumer group, with few admin calls.

A pass makes, in this order:

1. ``list_groups`` — every group and its state (one ListGroups per broker, inside the client);
   a group is *active* when it has members (any state but ``Empty``/``Dead``).
2. ``list_group_offsets`` for up to ``groups_per_request`` groups at a time (one OffsetFetch
   per coordinator per batch). If a batch fails, its groups are retried one by one so one bad
   group only fails itself.
3. ``describe_topics`` — leaders, replicas and ISR of every topic (also used for rack spread).
4. ``list_partition_offsets`` — fresh end offsets of every committed partition and of the
   partitions without a commit of the topics a group consumes, one call (one ListOffsets per
   leader inside the client), *after* the committed offsets, so lag is never older than the
   commit it is compared with. Negative lag is clamped to 0 and counted.
5. ``list_partition_offsets`` (earliest) — log start offsets, only of partitions that are
   behind (or have no commit and hold messages): a commit below the log start means messages
   were deleted unread (ERR), and lag counts only messages that still exist. A caught-up
   cluster makes no such call.
6. Timestamps of the records at the committed offsets (:mod:`.timestamps`), which also tell
   when the offsets up to the end hold no message (transaction markers), then the status
   rules (:mod:`.rules`).

A group with members that has not committed yet is OK with a reason saying so (nothing to
measure); a partition of a consumed topic without a commit is evaluated with ``committed=-1``.

Per-item problems (group vanished, topic deleted, partition without leader, offset fetch
failure) become ERR items with the reason; the pass goes on. State kept between passes (the
observation windows and the offset→time history) is bounded by ``max_partitions`` and
forgotten for partitions no longer committed.

Evaluation is per topic, as arrays: every (group, partition) pair of a topic is one column of
that topic's observation windows (:class:`TopicWindows`), decided at once by
:mod:`lag.array_rules` (the rules of :mod:`lag.rules`, equal to them by a property test). A
:class:`PartitionLag` with its verdict's words is built only when a reader asks for it
(:class:`PartitionLags`): a pass over 40,000 pairs formats nothing but the groups' verdicts.
The offset→time history takes every point a pass learns (end offsets, records read) before
any estimate, so a pair's lag in seconds does not depend on the order groups are evaluated in.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kafka import TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import UnknownTopicOrPartitionError
from pydantic import Field, field_validator

from lag import array_rules, rules
from lag.pairs import (
    NOT_IN_META,
    Found,
    GroupColumns,
    PartitionLag,
    PartitionLags,
    TopicResult,
    TopicView,
    TopicWindows,
    column_keys,
    fit,
    found_at,
    topic_views,
    unique_pairs,
)
from lag.rules import GroupVerdict, Status, Thresholds
from lag.timestamps import (
    METHOD_CODE,
    UNKNOWN,
    FoundRecord,
    OffsetTimeHistory,
    TimestampReader,
    lag_seconds_array,
)
from linkwatch.config import StrictModel
from linkwatch.records import OWN_NAMES

log = logging.getLogger(__name__)

# "Unknown": listed last pass, but its broker did not answer ListGroups this time; treated as
# active so it is never called STOP on missing evidence (STALL remains possible).
INACTIVE_STATES = frozenset({"Empty", "Dead", ""})


class CollectorConfig(StrictModel):
    """What to evaluate and how (defaults here are the documented defaults)."""

    include: list[str] = Field(default_factory=lambda: [".*"])
    # Default: linkwatch's own groups (the probe's commit groups, lease groups), one shared pattern.
    exclude: list[str] = Field(default_factory=lambda: [OWN_NAMES])
    window_s: float = Field(300.0, gt=0)
    min_evaluations: int = Field(5, ge=2)
    allowed_lag: int = Field(0, ge=0)
    groups_per_request: int = Field(100, ge=1, le=10_000)
    max_partitions: int = Field(200_000, ge=1)
    max_timestamp_reads: int = Field(5_000, ge=0)
    timestamp_timeout_s: float = Field(2.0, gt=0, le=60)
    timestamp_cache_size: int = Field(100_000, ge=0)
    history_points: int = Field(64, ge=4, le=10_000)

    @field_validator("include", "exclude")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for pattern in v:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValueError(f"{pattern!r} is not a valid regular expression ({e})") from None
        return v

    def thresholds(self) -> Thresholds:
        return Thresholds(self.window_s, self.min_evaluations, self.allowed_lag)


@dataclass
class GroupLag:
    group: str
    state: str
    members_active: bool
    partitions: Sequence[PartitionLag]
    verdict: GroupVerdict
    lag_max: int = 0
    lag_sum: int = 0
    lag_seconds_max: float | None = None


@dataclass
class PassResult:
    ts_s: float
    groups: dict[str, GroupLag] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # pass-level problems, in words
    admin_calls: int = 0
    call_seconds: dict[str, float] = field(default_factory=dict)  # admin call name -> time spent
    clamped: int = 0
    duration_s: float = 0.0
    topics: list[dict[str, Any]] = field(default_factory=list)  # describe_topics, for rack spread
    brokers: list[dict[str, Any]] = field(default_factory=list)


class LagCollector:
    """Keeps the windows between passes. ``run_pass`` never raises for per-item problems."""

    def __init__(
        self,
        admin: Any,
        reader: TimestampReader | None,
        config: CollectorConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.admin = admin
        self.reader = reader
        self.config = config
        self.clock = clock
        self._include = [re.compile(p) for p in config.include]
        self._exclude = [re.compile(p) for p in config.exclude]
        self.history = OffsetTimeHistory(config.history_points, config.max_partitions)
        self._windows: dict[str, TopicWindows] = {}
        self._gids: dict[str, int] = {}  # group -> its id in the windows' column keys (never reused)
        self._next_gid = 0
        self._known_groups: dict[str, str] = {}
        self._group_topics: dict[str, frozenset[str]] = {}  # topics each group committed last pass
        self.clamped_total = 0
        self._calls = 0

    def wanted(self, group: str) -> bool:
        return any(p.search(group) for p in self._include) and not any(p.search(group) for p in self._exclude)

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self._calls += 1
        started = time.monotonic()
        try:
            return fn(*args, **kwargs)
        finally:
            name = getattr(fn, "__name__", "call")
            self._call_seconds[name] = self._call_seconds.get(name, 0.0) + time.monotonic() - started

    def run_pass(self) -> PassResult:
        started = time.monotonic()
        self._calls = 0
        self._call_seconds: dict[str, float] = {}
        result = PassResult(ts_s=self.clock())
        listed = self._list_groups(result)
        if listed is None:
            result.admin_calls = self._calls
            return result
        states = {g["group_id"]: g.get("group_state") or "" for g in listed if self.wanted(g["group_id"])}
        if result.errors:
            # A broker that could not list its groups does not make them disappear: keep the
            # groups of the last pass (their offsets may still be fetchable from elsewhere).
            for g in self._known_groups.keys() - states.keys():
                states[g] = "Unknown"
        self._known_groups = dict(states)
        committed, group_errors, never = self._committed_offsets(sorted(states))
        meta = self._metadata(result)
        topics = topic_views(meta)
        columns = self._columns(states, committed, group_errors, never, topics)
        self._budget(result, states, columns)
        self._fresh_end_offsets(columns, meta, topics)
        now_s = self.clock()
        result.ts_s = now_s
        self._start_offsets(result, columns, topics)
        found = self._read_timestamps(columns, topics)
        by_topic = self._evaluate(result, columns, topics, found, states, now_s)
        self._group_lags(result, states, group_errors, never, by_topic)
        self._group_topics = {
            g: frozenset(tp.topic for tp in offs) for g, offs in committed.items() if offs
        } | {g: t for g, t in self._group_topics.items() if g in group_errors and g in states}
        self._forget(by_topic, states)
        result.admin_calls = self._calls
        result.call_seconds = self._call_seconds
        result.duration_s = time.monotonic() - started
        return result

    # -- admin calls ----------------------------------------------------------------------

    def _list_groups(self, result: PassResult) -> list[dict[str, Any]] | None:
        try:
            return self._call(self.admin.list_groups)
        except Exception as e:
            log.info("list_groups failed (%s); asking broker by broker", e)
        # One broker down or still loading its groups must not hide the others' groups.
        try:
            brokers = [b["broker_id"] for b in self._call(self.admin.describe_cluster)["brokers"]]
        except Exception as e:
            result.errors.append(f"cannot list groups: {e}")
            return None
        listed: list[dict[str, Any]] = []
        for b in brokers:
            try:
                listed.extend(self._call(self.admin.list_groups, broker_ids=[b]))
            except Exception as e:
                result.errors.append(f"cannot list groups on broker {b}: {type(e).__name__}: {e}")
        return listed

    def _committed_offsets(
        self, groups: list[str]
    ) -> tuple[dict[str, dict[TopicPartition, int]], dict[str, str], set[str]]:
        """Committed offsets per group; errors per group; groups that never committed (as far
        as this collector knows: no commit now and none at the last pass)."""
        out: dict[str, dict[TopicPartition, int]] = {}
        errors: dict[str, str] = {}
        never: set[str] = set()
        n = self.config.groups_per_request
        for i in range(0, len(groups), n):
            batch = groups[i : i + n]
            try:
                answer = self._fetch_offsets(batch)
            except Exception as e:
                log.info("batched offset fetch failed (%s); retrying %d groups one by one", e, len(batch))
                answer = {}
                for g in batch:
                    try:
                        answer.update(self._fetch_offsets([g]))
                    except Exception as ge:
                        errors[g] = f"offset fetch failed: {type(ge).__name__}: {ge}"
            for g, offsets in answer.items():
                out[g] = {tp: oam.offset for tp, oam in offsets.items() if oam.offset >= 0}
        for g in groups:
            if g not in errors and not out.get(g):
                before = sorted(self._group_topics.get(g, ()))
                if not before:
                    never.add(g)
                errors[g] = (
                    f"committed offsets for {', '.join(before)} disappeared (topic deleted, offsets expired "
                    "or group deleted during the pass)"
                    if before
                    else "no committed offsets (group deleted during the pass, or never committed)"
                )
        return out, errors, never

    def _fetch_offsets(self, groups: list[str]) -> dict[str, Any]:
        try:
            return self._call(self.admin.list_group_offsets, groups)
        except Exception:
            # Coordinators move (broker restart, leader change); kafka-python's admin keeps the
            # old one cached and would fail again, so forget it and ask once more.
            self._forget_coordinators(groups)
            return self._call(self.admin.list_group_offsets, groups)

    def _forget_coordinators(self, groups: list[str]) -> None:
        cache = getattr(
            getattr(getattr(self.admin, "_manager", None), "cluster", None), "_coordinators", None
        )
        if isinstance(cache, dict):
            for key in [k for k in cache if isinstance(k, tuple) and len(k) == 2 and k[1] in set(groups)]:
                cache.pop(key, None)

    def _metadata(self, result: PassResult) -> dict[tuple[str, int], dict[str, Any]]:
        try:
            topics = self._call(self.admin.describe_topics)
        except Exception as e:
            result.errors.append(f"cannot describe topics: {e}")
            return {}
        try:
            result.brokers = self._call(self.admin.describe_cluster).get("brokers", [])
        except Exception as e:
            result.errors.append(f"cannot describe cluster: {e}")
        result.topics = topics
        meta: dict[tuple[str, int], dict[str, Any]] = {}
        for t in topics:
            for p in t.get("partitions", []):
                meta[(t["name"], p["partition_index"])] = p
        return meta

    def _end_offsets(
        self, tps: set[TopicPartition], meta: dict[tuple[str, int], dict[str, Any]]
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, str]]:
        errors: dict[TopicPartition, str] = {}
        ask: dict[TopicPartition, int] = {}
        for tp in tps:
            p = meta.get((tp.topic, tp.partition))
            if p is None:
                errors[tp] = _gone(tp)
            elif p.get("leader_id", -1) < 0:
                errors[tp] = f"partition {tp.topic}-{tp.partition} has no leader (offline)"
            else:
                ask[tp] = OffsetSpec.LATEST
        if not ask:
            return {}, errors
        try:
            answer = self._call(self.admin.list_partition_offsets, ask)
            return {tp: o.offset for tp, o in answer.items()}, errors
        except Exception as e:
            log.info("end offsets in one call failed (%s); retrying per topic", e)
        ends: dict[TopicPartition, int] = {}
        for topic in sorted({tp.topic for tp in ask}):
            part = {tp: s for tp, s in ask.items() if tp.topic == topic}
            try:
                ends.update(
                    {tp: o.offset for tp, o in self._call(self.admin.list_partition_offsets, part).items()}
                )
            except UnknownTopicOrPartitionError:
                # The metadata above came from one broker; the partition leader can already know
                # of a deletion that broker has not yet applied.
                errors.update({tp: _gone(tp) for tp in part})
            except Exception as e:
                errors.update({tp: f"end offset unavailable: {type(e).__name__}: {e}" for tp in part})
        return ends, errors

    def _start_offsets(
        self,
        result: PassResult,
        columns: dict[str, list[GroupColumns]],
        topics: dict[str, TopicView],
    ) -> None:
        """Log start offsets (into ``topics``) of the partitions where they can matter: behind,
        or without a commit and not empty. One call; if it fails, lag is counted from the commit
        as before and the pass says why."""
        ask: dict[TopicPartition, int] = {}
        for topic, cols in columns.items():
            end = topics[topic].end
            behind = np.zeros(len(end), bool)
            for c in cols:
                e = end[c.partition]
                behind[c.partition[np.where(c.committed >= 0, e > c.committed, e > 0)]] = True
            ask |= {TopicPartition(topic, int(p)): OffsetSpec.EARLIEST for p in np.flatnonzero(behind)}
        if not ask:
            return
        try:
            answer = self._call(self.admin.list_partition_offsets, ask)
        except Exception as e:
            result.errors.append(f"log start offsets unavailable: {type(e).__name__}: {e}")
            return
        for tp, o in answer.items():
            t = topics.get(tp.topic)
            if t is not None and tp.partition < len(t.start):
                t.start[tp.partition] = o.offset

    def _read_timestamps(
        self, columns: dict[str, list[GroupColumns]], topics: dict[str, TopicView]
    ) -> dict[tuple[str, int, int], FoundRecord]:
        """The first record at or after the offset each group reads next, where that is below
        its end offset; one read per distinct (partition, offset), most-behind first within
        ``max_timestamp_reads``. Keyed (topic, partition, offset)."""
        if self.reader is None or self.config.max_timestamp_reads == 0:
            return {}
        candidates: list[tuple[int, str, int, int]] = []  # (-behind, topic, partition, offset)
        for topic, cols in columns.items():
            t = topics[topic]
            p = np.concatenate([c.partition for c in cols])
            pos = np.maximum(np.concatenate([c.committed for c in cols]), t.start[p])
            behind = t.end[p] - pos
            keep = (pos >= 0) & (behind > 0)
            p, pos, behind = p[keep], pos[keep], behind[keep]
            parts, offsets, inverse = unique_pairs(p, pos)
            most = np.zeros(len(parts), np.int64)
            np.maximum.at(most, inverse, behind)
            candidates += [
                (-b, topic, q, off)
                for b, q, off in zip(most.tolist(), parts.tolist(), offsets.tolist(), strict=True)
            ]
        candidates.sort()
        by_tp: dict[TopicPartition, list[int]] = {}
        for _, topic, p, off in candidates[: self.config.max_timestamp_reads]:
            by_tp.setdefault(TopicPartition(topic, p), []).append(off)
        found: dict[tuple[str, int, int], FoundRecord] = {}
        # One read per (tp, offset); several groups at different offsets need several rounds.
        while by_tp:
            round_ = {tp: offs.pop() for tp, offs in by_tp.items()}
            by_tp = {tp: offs for tp, offs in by_tp.items() if offs}
            try:
                got = self.reader.read(round_, {tp: int(topics[tp.topic].end[tp.partition]) for tp in round_})
            except Exception as e:
                log.warning("timestamp read failed: %s", e)
                break
            for tp, rec in got.items():
                found[(tp.topic, tp.partition, round_[tp])] = rec
        return found

    # -- evaluation -----------------------------------------------------------------------

    def _columns(
        self,
        states: dict[str, str],
        committed: dict[str, dict[TopicPartition, int]],
        group_errors: dict[str, str],
        never: set[str],
        topics: dict[str, TopicView],
    ) -> dict[str, list[GroupColumns]]:
        """Per topic, in group order, each evaluated group's partitions of it: those it committed
        and, of a topic it commits on, those it has not (judged with ``committed=-1``)."""
        out: dict[str, list[GroupColumns]] = {}
        live = set(states)
        for g in [g for g in self._gids if g not in live]:
            del self._gids[g]
        for group, state in states.items():
            if (group in never and state not in INACTIVE_STATES) or group in group_errors:
                continue
            if group not in self._gids:
                self._gids[group] = self._next_gid
                self._next_gid += 1
            gid = self._gids[group]
            per_topic: dict[str, list[tuple[int, int]]] = {}
            for tp, off in committed.get(group, {}).items():
                per_topic.setdefault(tp.topic, []).append((tp.partition, off))
            for topic, pairs in per_topic.items():
                done = np.array(pairs, np.int64).reshape(-1, 2)
                t = topics[topic] = fit(topics.get(topic), int(done[:, 0].max()) + 1)
                known = np.flatnonzero(t.leader != NOT_IN_META)
                parts = np.union1d(done[:, 0], known)
                offs = np.full(len(parts), -1, np.int64)
                offs[np.searchsorted(parts, done[:, 0])] = done[:, 1]
                out.setdefault(topic, []).append(GroupColumns(group, gid, parts, offs))
        return dict(sorted(out.items()))

    def _budget(
        self, result: PassResult, states: dict[str, str], columns: dict[str, list[GroupColumns]]
    ) -> None:
        """At most ``max_partitions`` columns, in group order then (topic, partition): the rest
        are not evaluated (and forgotten), and each group cut says so in the pass's errors."""
        budget = self.config.max_partitions
        sizes: dict[str, int] = {}
        for cols in columns.values():
            for c in cols:
                sizes[c.group] = sizes.get(c.group, 0) + len(c.partition)
        if sum(sizes.values()) <= budget:
            return
        allowed: dict[str, int] = {}
        for group in states:
            if group in sizes:
                allowed[group] = max(0, min(sizes[group], budget))
                budget -= allowed[group]
                if allowed[group] < sizes[group]:
                    result.errors.append(
                        f"group {group}: partition budget {self.config.max_partitions} spent"
                    )
        for topic in list(columns):
            kept = []
            for c in columns[topic]:
                n = min(len(c.partition), allowed[c.group])
                allowed[c.group] -= n
                if n:
                    kept.append(GroupColumns(c.group, c.gid, c.partition[:n], c.committed[:n]))
            if kept:
                columns[topic] = kept
            else:
                del columns[topic]

    def _fresh_end_offsets(
        self,
        columns: dict[str, list[GroupColumns]],
        meta: dict[tuple[str, int], dict[str, Any]],
        topics: dict[str, TopicView],
    ) -> None:
        """End offsets of every partition evaluated (into ``topics``, with the reason where none)."""
        tps = {
            TopicPartition(topic, p)
            for topic, cols in columns.items()
            for p in np.unique(np.concatenate([c.partition for c in cols])).tolist()
        }
        ends, errors = self._end_offsets(tps, meta)
        for tp, off in ends.items():
            topics[tp.topic].end[tp.partition] = off
        for tp, why in errors.items():
            topics[tp.topic].errors[tp.partition] = why

    def _evaluate(
        self,
        result: PassResult,
        columns: dict[str, list[GroupColumns]],
        topics: dict[str, TopicView],
        found: dict[tuple[str, int, int], FoundRecord],
        states: dict[str, str],
        now_s: float,
    ) -> dict[str, tuple[list[GroupColumns], TopicResult]]:
        """Every topic's columns observed, their windows moved on by one and decided; per topic
        its groups' columns (in the result's column order) and the result."""
        return {
            topic: self._evaluate_topic(result, topic, cols, topics[topic], found, states, now_s)
            for topic, cols in columns.items()
        }

    def _evaluate_topic(
        self,
        result: PassResult,
        topic: str,
        cols: list[GroupColumns],
        t: TopicView,
        found: dict[tuple[str, int, int], FoundRecord],
        states: dict[str, str],
        now_s: float,
    ) -> tuple[list[GroupColumns], TopicResult]:
        cols = sorted(cols, key=lambda c: c.gid)  # the windows' column order: group id, partition
        p = np.concatenate([c.partition for c in cols])
        gid = np.concatenate([np.full(len(c.partition), c.gid, np.int64) for c in cols])
        committed = np.concatenate([c.committed for c in cols])
        active = np.concatenate(
            [np.full(len(c.partition), states[c.group] not in INACTIVE_STATES) for c in cols]
        )
        end, start = t.end[p], t.start[p]
        failed = end < 0
        pos = np.maximum(committed, start)  # where each group reads next
        rec = found_at(found, topic, p, pos)
        first = np.where(rec.found & (rec.offset > pos), rec.offset, -1)
        lag = np.where(failed, 0, np.maximum(0, end - np.maximum(pos, np.maximum(first, 0))))
        clamped = int((~failed & (end < committed)).sum())
        self.clamped_total += clamped
        result.clamped += clamped
        seconds, method = self._lag_seconds(
            topic, int(now_s * 1000), np.where(committed >= 0, committed, pos), lag, end, rec
        )
        method[failed], seconds[failed] = METHOD_CODE[UNKNOWN], np.nan
        errors = {
            j: t.errors.get(int(p[j]), "end offset missing from the answer")
            for j in np.flatnonzero(failed).tolist()
        }
        win = self._observe(
            topic, column_keys(gid, p), now_s, committed, np.where(failed, -1, end), lag, failed
        )
        decisions = array_rules.evaluate(
            np.broadcast_to(win.ts[:, None], win.committed.shape),
            win.committed,
            win.end,
            win.lag,
            win.state,
            start,
            now_s,
            active,
            self.config.thresholds(),
            np.where(np.isnan(win.progress), now_s, win.progress),
            errors,
        )
        end_out = np.where(failed, -1, end)
        return cols, TopicResult(topic, p, committed, end_out, lag, seconds, method, t.leader[p], decisions)

    def _observe(
        self,
        topic: str,
        keys: np.ndarray,
        now_s: float,
        committed: np.ndarray,
        end: np.ndarray,
        lag: np.ndarray,
        failed: np.ndarray,
    ) -> TopicWindows:
        """The topic's windows with this pass's observation appended, and each column's progress
        time moved to now where its consumer advanced or is caught up (STOP/STALL's clock)."""
        win = self._windows.get(topic)
        if win is None:
            win = TopicWindows.blank(np.zeros(self._history_len()), 0)
        win = self._windows[topic] = win.aligned(keys)
        had, prev_committed = win.newest_observed()
        moved = ~failed & (~had | (prev_committed != committed) | (lag <= self.config.allowed_lag))
        win.progress[moved] = now_s
        win.append(now_s, committed, end, lag, failed)
        return win

    def _lag_seconds(
        self, topic: str, now_ms: int, at: np.ndarray, lag: np.ndarray, end: np.ndarray, rec: Found
    ) -> tuple[np.ndarray, np.ndarray]:
        """Lag in seconds of the record each column reads next (at ``at``). The history takes
        this pass's points first: the end offsets now and the records read."""
        known = end >= 0
        parts, first = np.unique(rec.partition[known], return_index=True)
        for p, e in zip(parts.tolist(), end[known][first].tolist(), strict=True):
            self.history.add(topic, p, e, now_ms)
        for p, off, ts in rec.points():
            self.history.add(topic, p, off, ts)
        need = lag > 0
        est_ts = np.zeros(len(at), np.int64)
        est_method = np.full(len(at), METHOD_CODE[UNKNOWN], np.uint8)
        if need.any():
            parts, offsets, inverse = unique_pairs(rec.partition[need], at[need])
            ts_u = np.zeros(len(parts), np.int64)
            m_u = np.full(len(parts), METHOD_CODE[UNKNOWN], np.uint8)
            for i, (p, off) in enumerate(zip(parts.tolist(), offsets.tolist(), strict=True)):
                ts, m = self.history.estimate(topic, p, off)
                if ts is not None:
                    ts_u[i], m_u[i] = ts, METHOD_CODE[m]
            est_ts[need], est_method[need] = ts_u[inverse], m_u[inverse]
        return lag_seconds_array(
            now_ms, at, lag, rec.found, rec.offset, rec.ts_ms, rec.is_end, est_ts, est_method
        )

    def _group_lags(
        self,
        result: PassResult,
        states: dict[str, str],
        group_errors: dict[str, str],
        never: set[str],
        by_topic: dict[str, tuple[list[GroupColumns], TopicResult]],
    ) -> None:
        """Every listed group's :class:`GroupLag`, in group order: its partitions' counts,
        worst partition and lag aggregates taken over all topics at once."""
        order = list(states)
        index = {g: i for i, g in enumerate(order)}
        results = [res for _, res in by_topic.values()]
        slices: dict[str, list[tuple[TopicResult, int, int]]] = {}
        gidx_parts, offsets = [], [0]
        for cols, res in by_topic.values():
            lo = 0
            for c in cols:
                slices.setdefault(c.group, []).append((res, lo, lo + len(c.partition)))
                gidx_parts.append(np.full(len(c.partition), index[c.group], np.int64))
                lo += len(c.partition)
            offsets.append(offsets[-1] + lo)
        cat = lambda f: np.concatenate([f(r) for r in results]) if results else np.zeros(0, np.int64)  # noqa: E731
        gidx = np.concatenate(gidx_parts) if gidx_parts else np.zeros(0, np.int64)
        status = cat(lambda r: r.decisions.status).astype(np.int64)
        summary = array_rules.summarize_groups(
            gidx,
            status,
            cat(lambda r: r.decisions.numbers_lag),
            cat(lambda r: r.decisions.uncommitted),
            cat(lambda r: r.decisions.trace),
            len(order),
        )
        lag = cat(lambda r: r.lag)
        lag_max = np.zeros(len(order), np.int64)
        np.maximum.at(lag_max, gidx, lag)
        lag_sum = np.zeros(len(order), np.int64)
        np.add.at(lag_sum, gidx, lag)
        seconds = cat(lambda r: r.seconds).astype(float)
        sec_max = np.full(len(order), np.nan)
        np.fmax.at(sec_max, gidx, seconds)

        def at(i: int) -> tuple[TopicResult, int]:
            k = int(np.searchsorted(offsets, i, side="right")) - 1
            return results[k], i - offsets[k]

        reprocessed: dict[int, dict[str, int]] = {}
        for i in summary.reprocessed.tolist():
            res, j = at(i)
            reprocessed.setdefault(int(gidx[i]), {})[f"{res.topic}-{int(res.partition[j])}"] = int(
                res.decisions.reprocessed[j]
            )
        for group, state in states.items():
            active = state not in INACTIVE_STATES
            if group in never and active:
                verdict = GroupVerdict(
                    Status.OK,
                    f"group has members (state {state}) but has not committed an offset yet: just "
                    "started, or its consumers keep their offsets elsewhere; no lag to measure",
                    {"partitions": 0, "committed": False},
                )
                result.groups[group] = GroupLag(group, state, active, [], verdict)
                continue
            if group in group_errors:
                verdict = GroupVerdict(Status.ERR, group_errors[group], {"partitions": 0})
                result.groups[group] = GroupLag(group, state, active, [], verdict)
                continue
            g = index[group]
            worst = int(summary.worst[g])
            if worst < 0:
                result.groups[group] = GroupLag(group, state, active, [], rules.evaluate_group({}, active))
                continue
            res, j = at(worst)
            verdict = summary.verdict(
                g,
                f"{res.topic}-{int(res.partition[j])}",
                res.decisions.verdict(j),
                reprocessed.get(g, {}),
                active,
            )
            secs = float(sec_max[g])
            result.groups[group] = GroupLag(
                group,
                state,
                active,
                PartitionLags(group, slices.get(group, [])),
                verdict,
                lag_max=int(lag_max[g]),
                lag_sum=int(lag_sum[g]),
                lag_seconds_max=None if np.isnan(secs) else secs,
            )

    def _history_len(self) -> int:
        # WARN and REWIND look at the last few evaluations only; STOP/STALL use the progress time.
        return max(self.config.min_evaluations * 2, 8)

    def _forget(self, by_topic: dict[str, Any], states: dict[str, str]) -> None:
        """Windows and history of what this pass did not evaluate."""
        for topic in [t for t in self._windows if t not in by_topic]:
            del self._windows[topic]
        self.history.forget(
            (topic, int(p)) for topic, (_, res) in by_topic.items() for p in np.unique(res.partition).tolist()
        )

    @property
    def tracked_partitions(self) -> int:
        """(group, partition) pairs whose windows are kept."""
        return sum(len(w.keys) for w in self._windows.values())


def _gone(tp: TopicPartition) -> str:
    return f"topic-partition {tp.topic}-{tp.partition} does not exist (topic deleted?)"
