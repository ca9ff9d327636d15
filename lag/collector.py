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
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import UnknownTopicOrPartitionError
from pydantic import Field, field_validator

from lag import rules
from lag.rules import GroupVerdict, Observation, Status, Thresholds, Verdict
from lag.timestamps import FoundRecord, OffsetTimeHistory, TimestampReader, lag_seconds
from linkwatch.config import StrictModel

log = logging.getLogger(__name__)

# "Unknown": listed last pass, but its broker did not answer ListGroups this time; treated as
# active so it is never called STOP on missing evidence (STALL remains possible).
INACTIVE_STATES = frozenset({"Empty", "Dead", ""})


class CollectorConfig(StrictModel):
    """What to evaluate and how (defaults here are the documented defaults)."""

    include: list[str] = Field(default_factory=lambda: [".*"])
    exclude: list[str] = Field(default_factory=lambda: ["^linkwatch-"])
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
class PartitionLag:
    group: str
    topic: str
    partition: int
    committed: int
    end: int
    lag_messages: int
    lag_seconds: float | None
    method: str
    leader: int | None
    verdict: Verdict

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class GroupLag:
    group: str
    state: str
    members_active: bool
    partitions: list[PartitionLag]
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
        self._windows: dict[tuple[str, str, int], deque[Observation]] = {}
        self._known_groups: dict[str, str] = {}
        self._group_topics: dict[str, frozenset[str]] = {}  # topics each group committed last pass
        # Last time each (group, tp) advanced or was caught up: STOP/STALL need to look back
        # further than the few observations kept per partition.
        self._progress: dict[tuple[str, str, int], float] = {}
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
        uncommitted = self._uncommitted(committed, meta)
        tps = {tp for offsets in committed.values() for tp in offsets}
        tps |= {tp for missing in uncommitted.values() for tp in missing}
        ends, end_errors = self._end_offsets(tps, meta)
        now_s = self.clock()
        result.ts_s = now_s
        starts = self._start_offsets(result, committed, uncommitted, ends)
        # Where each group reads next: its commit, or the log start if that is higher (and for
        # a partition without a commit, the log start).
        read_from = {
            g: {tp: max(off, starts.get(tp, -1)) for tp, off in offsets.items()}
            | {tp: starts[tp] for tp in uncommitted.get(g, ()) if tp in starts}
            for g, offsets in committed.items()
        }
        found = self._read_timestamps(read_from, ends)
        seen: set[tuple[str, str, int]] = set()
        budget = self.config.max_partitions
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
            parts: list[PartitionLag] = []
            todo = committed.get(group, {}) | dict.fromkeys(uncommitted.get(group, ()), -1)
            for tp, off in sorted(todo.items()):
                if budget <= 0:
                    result.errors.append(
                        f"group {group}: partition budget {self.config.max_partitions} spent"
                    )
                    break
                budget -= 1
                key = (group, tp.topic, tp.partition)
                seen.add(key)
                at = (starts.get(tp, -1), read_from[group].get(tp, off))
                parts.append(
                    self._partition(result, key, off, at, ends, end_errors, meta, found, active, now_s)
                )
            result.groups[group] = self._group(group, state, active, parts)
        self._group_topics = {
            g: frozenset(tp.topic for tp in offs) for g, offs in committed.items() if offs
        } | {g: t for g, t in self._group_topics.items() if g in group_errors and g in states}
        self._forget(seen)
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

    @staticmethod
    def _uncommitted(
        committed: dict[str, dict[TopicPartition, int]], meta: dict[tuple[str, int], dict[str, Any]]
    ) -> dict[str, set[TopicPartition]]:
        """Per group, the partitions of the topics it commits on that have no commit of their own
        (their messages are read by nobody, or by a consumer that does not commit)."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in meta:
            by_topic.setdefault(topic, []).append(partition)
        out: dict[str, set[TopicPartition]] = {}
        for g, offsets in committed.items():
            for topic in {tp.topic for tp in offsets}:
                missing = {TopicPartition(topic, p) for p in by_topic.get(topic, ())} - offsets.keys()
                if missing:
                    out.setdefault(g, set()).update(missing)
        return out

    def _start_offsets(
        self,
        result: PassResult,
        committed: dict[str, dict[TopicPartition, int]],
        uncommitted: dict[str, set[TopicPartition]],
        ends: dict[TopicPartition, int],
    ) -> dict[TopicPartition, int]:
        """Log start offsets of the partitions where they can matter: behind, or without a
        commit and not empty. One call; if it fails, lag is counted from the commit as before
        and the pass says why."""
        ask = {
            tp: OffsetSpec.EARLIEST
            for offsets in committed.values()
            for tp, off in offsets.items()
            if ends.get(tp, -1) > off
        }
        ask |= {
            tp: OffsetSpec.EARLIEST
            for missing in uncommitted.values()
            for tp in missing
            if ends.get(tp, 0) > 0
        }
        if not ask:
            return {}
        try:
            return {tp: o.offset for tp, o in self._call(self.admin.list_partition_offsets, ask).items()}
        except Exception as e:
            result.errors.append(f"log start offsets unavailable: {type(e).__name__}: {e}")
            return {}

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

    def _read_timestamps(
        self, committed: dict[str, dict[TopicPartition, int]], ends: dict[TopicPartition, int]
    ) -> dict[tuple[TopicPartition, int], FoundRecord]:
        """The first record at or after each offset in ``committed`` (group -> tp -> offset)
        that is below its end offset; most-behind first within ``max_timestamp_reads``."""
        if self.reader is None or self.config.max_timestamp_reads == 0:
            return {}
        behind: dict[tuple[TopicPartition, int], int] = {}
        for offsets in committed.values():
            for tp, off in offsets.items():
                end = ends.get(tp)
                if end is not None and end > off:
                    behind[(tp, off)] = max(behind.get((tp, off), 0), end - off)
        # Most-behind first: they matter most when the budget cuts the list.
        chosen = sorted(behind, key=lambda k: -behind[k])[: self.config.max_timestamp_reads]
        by_tp: dict[TopicPartition, list[int]] = {}
        for tp, off in chosen:
            by_tp.setdefault(tp, []).append(off)
        found: dict[tuple[TopicPartition, int], FoundRecord] = {}
        # One read per (tp, offset); several groups at different offsets need several rounds.
        while by_tp:
            round_ = {tp: offs.pop() for tp, offs in by_tp.items()}
            by_tp = {tp: offs for tp, offs in by_tp.items() if offs}
            try:
                got = self.reader.read(round_, {tp: ends[tp] for tp in round_})
            except Exception as e:
                log.warning("timestamp read failed: %s", e)
                break
            for tp, rec in got.items():
                found[(tp, round_[tp])] = rec
        return found

    # -- evaluation -----------------------------------------------------------------------

    def _partition(
        self,
        result: PassResult,
        key: tuple[str, str, int],
        committed: int,
        at: tuple[int, int],
        ends: dict[TopicPartition, int],
        end_errors: dict[TopicPartition, str],
        meta: dict[tuple[str, int], dict[str, Any]],
        found: dict[tuple[TopicPartition, int], FoundRecord],
        active: bool,
        now_s: float,
    ) -> PartitionLag:
        """One (group, partition); ``committed`` is -1 without a commit. ``at``: the log start
        (-1 if not read) and the offset the group reads next (the timestamp read's key)."""
        group, topic, partition = key
        start, pos = at
        tp = TopicPartition(topic, partition)
        leader = meta.get((topic, partition), {}).get("leader_id")
        end = ends.get(tp)
        window = self._windows.setdefault(key, deque(maxlen=self._history_len()))
        if end is None:
            reason = end_errors.get(tp, "end offset missing from the answer")
            window.append(Observation(now_s, committed, -1, error=reason))
            verdict = rules.evaluate_partition(window, now_s, active, self.config.thresholds())
            return PartitionLag(group, topic, partition, committed, -1, 0, None, "unknown", leader, verdict)
        if end < committed:
            self.clamped_total += 1
            result.clamped += 1
        rec = found.get((tp, pos))
        # Offsets before the first record at or after ``pos`` are no message (markers, aborted
        # or removed records); an ``is_end`` answer means none up to the end.
        first = rec.offset if rec is not None and rec.offset > pos else -1
        obs = Observation(now_s, committed, end, start=start, first=first)
        lag = obs.lag
        now_ms = int(now_s * 1000)
        self.history.add(topic, partition, end, now_ms)
        if rec is not None and rec.ts_ms >= 0:
            self.history.add(topic, partition, rec.offset, rec.ts_ms)
        # Lag seconds of a commit below the log start stay those of the commit (interpolated).
        seconds_of = committed if committed >= 0 else pos
        seconds, method = lag_seconds(
            now_ms, seconds_of, lag, rec, self.history.estimate(topic, partition, seconds_of)
        )
        prev = next((o for o in reversed(window) if o.error is None), None)
        if prev is None or prev.committed != committed or lag <= self.config.allowed_lag:
            self._progress[key] = now_s
        window.append(obs)
        th = self.config.thresholds()
        verdict = rules.evaluate_partition(window, now_s, active, th, self._progress.get(key, now_s))
        return PartitionLag(group, topic, partition, committed, end, lag, seconds, method, leader, verdict)

    def _group(self, group: str, state: str, active: bool, parts: list[PartitionLag]) -> GroupLag:
        verdict = rules.evaluate_group({p.name: p.verdict for p in parts}, active)
        lags = [p.lag_messages for p in parts]
        secs = [p.lag_seconds for p in parts if p.lag_seconds is not None]
        return GroupLag(
            group,
            state,
            active,
            parts,
            verdict,
            lag_max=max(lags, default=0),
            lag_sum=sum(lags),
            lag_seconds_max=max(secs) if secs else None,
        )

    def _history_len(self) -> int:
        # WARN and REWIND look at the last few evaluations only; STOP/STALL use _progress.
        return max(self.config.min_evaluations * 2, 8)

    def _forget(self, seen: set[tuple[str, str, int]]) -> None:
        for key in [k for k in self._windows if k not in seen]:
            del self._windows[key]
            self._progress.pop(key, None)
        self.history.forget({(t, p) for _, t, p in seen})

    @property
    def tracked_partitions(self) -> int:
        return len(self._windows)


def _gone(tp: TopicPartition) -> str:
    return f"topic-partition {tp.topic}-{tp.partition} does not exist (topic deleted?)"
