"""Per-window state of the streaming analyzer: each record kept once, evaluated with no Spark job.

:class:`WindowState` holds, for the windows of the lookback, what the Spark path
(:mod:`spark_metrics`) reduces the raw records to, and builds the same
:class:`linkwatch.aggregates.Aggregates` from it:

* stage sketches: per (broker, request, stage, window) the sketches as they came (one per agent
  window, a few at most); count, logged requests, p50/p99/p999, the nonzero p99 and the mean are
  read at evaluation by :func:`aggregation.sketch_math.merge`, the one implementation the Spark
  path (:func:`spark_metrics.sketch_merge.stage_windows`) calls too, per broker and over all
  brokers;
* partition sizes: per (topic, partition, broker, window) the last reading (size, log end
  offset); traffic is the change between consecutive windows in the evaluated range, as
  :func:`~spark_metrics.transforms.partition_windows` computes it;
* log-dir usage: per (broker, log dir, window) the last reading;
* imbalances are computed at evaluation from the two above, as
  :func:`~spark_metrics.transforms.all_imbalances` does;
* slow-request exemplars: per (broker, request, client, window) how many, and the largest
  ``send`` and ``throttle`` times (:func:`~spark_metrics.transforms.client_windows`);
* probe samples: per (leader broker, window) the summed counts and the produce, end-to-end and
  commit sketches, merged by :func:`aggregation.sketch_math.merge` as
  :func:`spark_metrics.sketch_merge.probe_windows` does;
* JMX gauges: per (broker, window) the newest JVM start time read
  (:func:`~spark_metrics.transforms.broker_starts`).

Contract:

* :meth:`WindowState.add` / :meth:`WindowState.add_json` take records in any order, any number
  of times: a record whose ``key`` was already merged is skipped (``duplicates``), so a
  micro-batch re-run, the start-up rebuild from the archive overlapping the stream, or an
  agent's spool re-send never counts a window twice. Only records of this ``cluster`` and of
  the kinds above are kept; other kinds are ``skipped`` (they reach the archive, not this
  state). Malformed JSON is dropped and counted in ``dropped[reason]``, never raised.
* Memory is bounded twice: windows older than ``horizon_ms`` before the newest ``now`` seen
  (lookback + watermark) are evicted with their dedup keys (``expired`` counts their records),
  and a record older than that is dropped (``dropped["too_old"]``); at most ``max_records``
  record keys are held — past that the oldest window is evicted whole
  (``dropped["state_full"]`` counts its records), and a record that would still not fit is
  dropped with the same reason.
* :meth:`WindowState.aggregates` evaluates the windows overlapping ``[since_ms, now_ms)``
  whole (the re-read path cut the oldest window at a record boundary). It never raises on
  data the ``add`` methods accepted.
* Only complete windows are evaluated (given ``now_ms``). A window's records reach the state
  over several micro-batches (agents close it at different times; one agent's records of a
  window spread over the samples topic's partitions), and a newest window read half-filled
  names the wrong hot partition or the wrong slow broker. Per kind, a window is complete when
  it holds every cell that the nearest earlier window holding that kind held — stage
  sketches: every broker, and of each broker every sketch its agent said it sent for the window
  (``StageSketch.window_sketches``; one agent's sketches of a window spread over the samples
  topic's partitions, and a partition led by a paused broker takes them late); partition
  sizes: every (topic, partition, broker) replica; log dirs: every (broker, log dir) — or when
  it ended ``settle_ms`` or more before ``now_ms``. Windows
  are released in order: from the oldest incomplete window on, that kind's rows wait.
  Exemplars, probe samples and JVM start times are evidence read for windows the rules
  already judged, and are not held.
* Thread-safe: the stream's micro-batch callback adds while the service's tick evaluates.
"""

from __future__ import annotations

import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from aggregation.sketch_math import (
    NONZERO_QUANTILES,
    PROBE_QUANTILES,
    QUANTILES,
    ROW_TOTALS,
    SketchRows,
    merge,
)
from linkwatch import records as R
from linkwatch.aggregates import (
    Aggregates,
    BrokerStartWindow,
    ClientWindow,
    HotKey,
    ImbalanceWindow,
    LogDirWindow,
    PartitionWindow,
    ProbeBrokerWindow,
    StageWindow,
)

KINDS: tuple[str, ...] = (
    R.StageSketch.KIND,
    R.PartitionSize.KIND,
    R.LogDirUsage.KIND,
    R.SlowRequest.KIND,
    R.ProbeSample.KIND,
    R.BrokerGauges.KIND,
)


SketchRow = tuple[int, float, np.ndarray, np.ndarray]  # zero, sum_ms, bucket keys, bucket counts
_INT64 = np.iinfo(np.int64)


def _sketch_row(sketch: Mapping) -> SketchRow:
    """A record's sketch dict as a row for :class:`~aggregation.sketch_math.SketchRows`: a
    missing zero, sum or bucket map counts as 0 or empty. TypeError, ValueError, AttributeError
    or OverflowError (beyond int64) when it is not a sketch."""
    buckets = dict(sketch.get("buckets", {}))
    zero = int(sketch.get("zero", 0))
    if not _INT64.min <= zero <= _INT64.max:
        raise OverflowError(zero)
    keys = np.fromiter(map(int, buckets), np.int64, len(buckets))
    counts = np.fromiter(map(int, buckets.values()), np.int64, len(buckets))
    return zero, float(sketch.get("sum", 0.0)), keys, counts


@dataclass
class _Sketches:
    """The sketches of one cell as they came (at most a few: one per agent window, or per probe
    instance); :func:`~aggregation.sketch_math.merge` sums them when the window is read."""

    rows: list[SketchRow] = field(default_factory=list)
    capture_ratios: list[float] = field(default_factory=list)
    totals: list[tuple[int, ...]] = field(default_factory=list)  # per row, in ROW_TOTALS order

    def add(
        self, row: SketchRow, capture_ratio: float = 1.0, totals: tuple[int, ...] = (0,) * len(ROW_TOTALS)
    ) -> None:
        self.rows.append(row)
        self.capture_ratios.append(capture_ratio)
        self.totals.append(totals)


@dataclass
class _Clients:
    """Exemplars of one (broker, request, client) in one window."""

    count: int = 0
    send_ms_max: float = -math.inf
    throttle_ms_max: float = -math.inf


@dataclass
class _Probe:
    """Probe samples of one leader broker in one window, summed."""

    sent: int = 0
    ok: int = 0
    bad: int = 0
    produce: _Sketches = field(default_factory=_Sketches)
    end_to_end: _Sketches = field(default_factory=_Sketches)
    commit: _Sketches = field(default_factory=_Sketches)


@dataclass
class _Window:
    """Everything kept for one window start; ``keys`` are the records merged into it."""

    keys: set[str] = field(default_factory=set)
    stages: dict[tuple[int, str, str], _Sketches] = field(default_factory=dict)
    # broker -> how many (request, stage) cells of ``stages`` it has: kept as cells are added,
    # so that judging a window complete (every poll of the feed) does not walk ``stages``.
    stage_cells: Counter[int] = field(default_factory=Counter)
    # (topic, partition, broker) -> (ts_ms, size_bytes, log_end_offset) of the last reading
    partitions: dict[tuple[str, int, int], tuple[int, int, int | None]] = field(default_factory=dict)
    # (broker, log_dir) -> (ts_ms, capacity_bytes, used_bytes, io_util) of the last reading
    logdirs: dict[tuple[int, str], tuple[int, int, int, float | None]] = field(default_factory=dict)
    clients: dict[tuple[int, str, str], _Clients] = field(default_factory=dict)
    probes: dict[int, _Probe] = field(default_factory=dict)
    starts: dict[int, int] = field(default_factory=dict)  # broker -> newest JVM start time (ms)
    # broker -> the stage sketches its agent sent for this window (StageSketch.window_sketches)
    announced: dict[int, int] = field(default_factory=dict)
    # The rows computed from ``stages``, kept until a stage sketch merged in drops them (an
    # evaluation recomputes only the windows that changed).
    stage_rows: list[StageWindow] | None = None

    def stages_short(self) -> bool:
        """A broker's agent announced more stage sketches for this window than are here yet."""
        return any(self.stage_cells[b] < n for b, n in self.announced.items())


class WindowState:
    def __init__(
        self,
        cluster: str,
        window_s: int,
        horizon_ms: int,
        max_records: int = 500_000,
        settle_ms: int = 0,
    ) -> None:
        if window_s < 1 or horizon_ms < 0 or max_records < 1 or settle_ms < 0:
            raise ValueError(
                f"bad window state bounds: {window_s=} {horizon_ms=} {max_records=} {settle_ms=}"
            )
        self.cluster = cluster
        self.window_ms = window_s * 1000
        self.horizon_ms = horizon_ms
        self.max_records = max_records
        self.settle_ms = settle_ms
        self.dropped: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.duplicates = 0
        self.expired = 0  # records of windows aged out past the horizon (normal, not a loss)
        self._windows: dict[int, _Window] = {}
        self._key_window: dict[str, int] = {}
        self._now_ms = 0
        self._lock = threading.Lock()

    # --- adding ---------------------------------------------------------------------------

    def add_json(self, values: Iterable[bytes | str], now_ms: int | None = None) -> None:
        """Decode and add raw record JSON (the ``value`` column); bad records are counted drops."""
        recs = []
        for value in values:
            try:
                recs.append(R.decode(value))
            except R.RecordError as e:
                self.dropped[e.reason] += 1
        self.add(recs, now_ms)

    def add(self, records: Iterable[R.Record], now_ms: int | None = None) -> None:
        """Merge records; ``now_ms`` (when given) moves the eviction horizon forward first."""
        with self._lock:
            if now_ms is not None:
                self._advance(now_ms)
            for rec in records:
                self._add_one(rec)

    def _add_one(self, rec: R.Record) -> None:
        if rec.KIND not in KINDS:
            self.skipped[rec.KIND] += 1
            return
        if rec.cluster != self.cluster:
            self.skipped["other_cluster"] += 1
            return
        key = rec.dedup_key()
        if key in self._key_window:
            self.duplicates += 1
            return
        start = rec.ts_ms - rec.ts_ms % self.window_ms
        if start + self.window_ms <= self._oldest_kept():
            self.dropped["too_old"] += 1
            return
        if not self._make_room(start):
            self.dropped["state_full"] += 1
            return
        win = self._windows.setdefault(start, _Window())
        if not self._merge(win, rec):
            return
        win.keys.add(key)
        self._key_window[key] = start

    def _merge(self, win: _Window, rec: R.Record) -> bool:
        """Merge one record of a kept kind into its window; False if it was dropped (counted)."""
        if isinstance(rec, R.StageSketch):
            return self._merge_sketch(win, rec)
        if isinstance(rec, R.SlowRequest):
            return self._merge_exemplar(win, rec)
        if isinstance(rec, R.ProbeSample):
            return self._merge_probe(win, rec)
        if isinstance(rec, R.BrokerGauges):
            return self._merge_start(win, rec)
        if isinstance(rec, R.PartitionSize):
            cell = (rec.topic, rec.partition, rec.broker)
            if cell not in win.partitions or rec.ts_ms > win.partitions[cell][0]:
                win.partitions[cell] = (rec.ts_ms, rec.size_bytes, rec.log_end_offset)
        elif isinstance(rec, R.LogDirUsage):
            cell2 = (rec.broker, rec.log_dir)
            if cell2 not in win.logdirs or rec.ts_ms > win.logdirs[cell2][0]:
                win.logdirs[cell2] = (rec.ts_ms, rec.capacity_bytes, rec.used_bytes, rec.io_util)
        return True

    def _merge_sketch(self, win: _Window, rec: R.StageSketch) -> bool:
        try:
            row = _sketch_row(rec.sketch)
        except (TypeError, ValueError, AttributeError, OverflowError):
            self.dropped["bad_sketch"] += 1
            return False
        if R.out_of_range(R.StageSketch, lambda name: getattr(rec, name)):  # built in code, not decoded
            self.dropped["bad_value"] += 1
            return False
        cell = win.stages.get((rec.broker, rec.request, rec.stage))
        if cell is None:
            cell = win.stages[(rec.broker, rec.request, rec.stage)] = _Sketches()
            win.stage_cells[rec.broker] += 1
        cell.add(row, rec.capture_ratio, tuple(getattr(rec, name) for name in ROW_TOTALS))
        win.stage_rows = None
        if rec.window_sketches:
            win.announced[rec.broker] = max(win.announced.get(rec.broker, 0), rec.window_sketches)
        return True

    @staticmethod
    def _merge_start(win: _Window, rec: R.BrokerGauges) -> bool:
        # As the transform: a reading without a plausible start time is left out (not a drop:
        # the record's other gauges are not this state's).
        started = rec.values.get(R.BrokerGauges.JVM_START_TIME)
        low, high = R.EPOCH_MS_RANGE
        if started is not None and low < started <= high:  # NaN is out too
            win.starts[rec.broker] = max(win.starts.get(rec.broker, 0), int(started))
        return True

    def _merge_exemplar(self, win: _Window, rec: R.SlowRequest) -> bool:
        # As the transform: a missing client id is "" and a missing stage 0, so none is lost.
        try:
            send = float(rec.stages_ms.get("send", 0.0))
            throttle = float(rec.stages_ms.get("throttle", 0.0))
        except (TypeError, ValueError):
            self.dropped["bad_stages"] += 1
            return False
        cell = win.clients.setdefault((rec.broker, rec.request, rec.client_id or ""), _Clients())
        cell.count += 1
        cell.send_ms_max = max(cell.send_ms_max, send)
        cell.throttle_ms_max = max(cell.throttle_ms_max, throttle)
        return True

    def _merge_probe(self, win: _Window, rec: R.ProbeSample) -> bool:
        try:
            bad = sum(int(n) for n in rec.unavailable.values())
            sketches = [_sketch_row(sk) for sk in (rec.produce, rec.end_to_end, rec.commit_latency)]
        except (TypeError, ValueError, AttributeError, OverflowError):
            self.dropped["bad_sketch"] += 1
            return False
        cell = win.probes.setdefault(rec.broker, _Probe())
        cell.sent += rec.sent
        cell.ok += rec.ok
        cell.bad += bad
        cell.produce.add(sketches[0])
        cell.end_to_end.add(sketches[1])
        cell.commit.add(sketches[2])
        return True

    # --- bounds ---------------------------------------------------------------------------

    def _oldest_kept(self) -> int:
        return self._now_ms - self.horizon_ms

    def _advance(self, now_ms: int) -> None:
        self._now_ms = max(self._now_ms, now_ms)
        for start in [s for s in self._windows if s + self.window_ms <= self._oldest_kept()]:
            self.expired += self._evict(start)

    def _evict(self, start: int) -> int:
        win = self._windows.pop(start)
        for key in win.keys:
            del self._key_window[key]
        return len(win.keys)

    def _make_room(self, start: int) -> bool:
        while len(self._key_window) >= self.max_records:
            older = [s for s in self._windows if s < start]
            if not older:
                return False
            self.dropped["state_full"] += self._evict(min(older))
        return True

    @property
    def records(self) -> int:
        """Record keys held (the ``max_records`` bound)."""
        return len(self._key_window)

    @property
    def window_starts(self) -> list[int]:
        with self._lock:
            return sorted(self._windows)

    # --- evaluating -----------------------------------------------------------------------

    def aggregates(
        self,
        now_ms: int | None = None,
        since_ms: int | None = None,
        hot_keys: Sequence[HotKey] = (),
    ) -> Aggregates:
        """The rows of every window overlapping ``[since_ms, now_ms)`` (all held windows when
        both are None). ``now_ms`` also moves the eviction horizon."""
        with self._lock:
            if now_ms is not None:
                self._advance(now_ms)
            lo = -math.inf if since_ms is None else since_ms
            hi = math.inf if now_ms is None else now_ms
            picked = sorted((s, w) for s, w in self._windows.items() if s + self.window_ms > lo and s < hi)
            upto = {kind: self._frontier(kind, now_ms) for kind in _CELLS}
            stages = _stage_rows([(s, w) for s, w in picked if s < upto["stages"]])
            partitions = _partition_rows([(s, w) for s, w in picked if s < upto["partitions"]])
            logdirs = _logdir_rows([(s, w) for s, w in picked if s < upto["logdirs"]])
            clients = _client_rows(picked)
            probes = _probe_rows(picked)
            starts = [
                BrokerStartWindow(broker=b, window_start_ms=s, started_ms=t)
                for s, w in picked
                for b, t in w.starts.items()
            ]
        return Aggregates(
            cluster=self.cluster,
            window_s=self.window_ms // 1000,
            broker_stages=[r for r in stages if r.broker is not None],
            cluster_stages=[r for r in stages if r.broker is None],
            partitions=partitions,
            logdirs=logdirs,
            imbalances=_imbalances(partitions, logdirs),
            hot_keys=tuple(hot_keys),
            client_windows=clients,
            probes=probes,
            broker_starts=starts,
        )

    def _frontier(self, kind: str, now_ms: int | None) -> float:
        """Start of the oldest window whose cells of one kind are not complete yet (see the
        module contract); every window before it is released. No ``now_ms``: all are."""
        if now_ms is None:
            return math.inf
        before: AbstractSet = frozenset()
        for start in sorted(self._windows):
            win = self._windows[start]
            cells = _CELLS[kind](win)
            if not cells:
                continue  # nothing of this kind in it (yet): nothing to hold
            settled = start + self.window_ms + self.settle_ms <= now_ms
            if not settled and (not before <= cells or _SHORT[kind](win)):
                return start
            before = cells
        return math.inf

    def complete_stages_through(self, now_ms: int) -> int | None:
        """Start of the newest window whose stage sketches are complete and released at
        ``now_ms`` (see the module contract), or None. The service evaluates as soon as it
        moves on, instead of waiting out its interval."""
        with self._lock:
            upto = self._frontier("stages", now_ms)
            done = [
                s for s, w in self._windows.items() if s < upto and w.stages and s + self.window_ms <= now_ms
            ]
            return max(done, default=None)

    def pending(self, now_ms: int) -> dict[str, list[int]]:
        """Window starts held back as incomplete at ``now_ms``, per kind (for tests and logs)."""
        with self._lock:
            upto = {kind: self._frontier(kind, now_ms) for kind in _CELLS}
            return {
                kind: sorted(s for s, w in self._windows.items() if s >= upto[kind] and _CELLS[kind](w))
                for kind in _CELLS
            }


# What makes a window complete, per kind: the cells every window must hold again (views, not
# copies: read on every poll of the feed, over every window held).
_CELLS: dict[str, Callable[[_Window], AbstractSet]] = {
    "stages": lambda w: w.stage_cells.keys(),
    "partitions": lambda w: w.partitions.keys(),
    "logdirs": lambda w: w.logdirs.keys(),
}
# And what a window says it still lacks, per kind, whatever the windows before it held.
_SHORT: dict[str, Callable[[_Window], bool]] = {
    "stages": _Window.stages_short,
    "partitions": lambda _w: False,
    "logdirs": lambda _w: False,
}


# --- the aggregates of the held cells (pure functions) --------------------------------------


def _group_ids(keys: Sequence[tuple]) -> tuple[np.ndarray, list[tuple]]:
    """A group id per key (equal keys, equal ids; numbered by first appearance) and the keys
    of the groups in id order."""
    ids: dict[tuple, int] = {}
    group = np.fromiter((ids.setdefault(k, len(ids)) for k in keys), np.int64, len(keys))
    return group, list(ids)


def _sketch_rows(cells: Sequence[_Sketches]) -> tuple[SketchRows, np.ndarray]:
    """The sketches of ``cells`` as rows, and each row's cell (every cell holds at least one)."""
    totals = [t for c in cells for t in c.totals]
    rows = SketchRows.of(
        [r for c in cells for r in c.rows],
        [x for c in cells for x in c.capture_ratios],
        {name: [t[k] for t in totals] for k, name in enumerate(ROW_TOTALS)},
    )
    return rows, np.repeat(np.arange(len(cells)), [len(c.rows) for c in cells])


_STAGE_COLUMNS = ("count", "logged", *QUANTILES, *NONZERO_QUANTILES, "mean_ms", *ROW_TOTALS)


def _stage_rows(picked: list[tuple[int, _Window]]) -> list[StageWindow]:
    """Per broker, request, stage and window, and over all brokers (``broker`` None): the
    sketches of each merged by :func:`~aggregation.sketch_math.merge`. Every row is one
    window's, so each window's rows are kept with it until a sketch merged into it changes
    them: an evaluation over the lookback computes the windows that changed, not all of them."""
    out: list[StageWindow] = []
    for start, win in picked:
        if win.stage_rows is None:
            win.stage_rows = _window_stage_rows(start, win)
        out.extend(win.stage_rows)
    return out


def _window_stage_rows(start: int, win: _Window) -> list[StageWindow]:
    cells = list(win.stages.items())
    if not cells:
        return []
    rows, cell_of_row = _sketch_rows([sk for _, sk in cells])
    per_cell = [(broker, request, stage, start) for (broker, request, stage), _ in cells]
    cluster_of_cell, cluster_keys = _group_ids(
        [(None, request, stage, start) for _, request, stage, start in per_cell]
    )
    out = []
    for keys, group in ((per_cell, cell_of_row), (cluster_keys, cluster_of_cell[cell_of_row])):
        m = merge(rows, group, len(keys))
        cols = [m.values(name) for name in _STAGE_COLUMNS]
        for (broker, request, stage, start_ms), values in zip(keys, zip(*cols, strict=True), strict=True):
            out.append(
                StageWindow(
                    broker=broker,
                    request=request,
                    stage=stage,
                    window_start_ms=start_ms,
                    **dict(zip(_STAGE_COLUMNS, values, strict=True)),
                )
            )
    return out


def _partition_rows(picked: list[tuple[int, _Window]]) -> list[PartitionWindow]:
    # Per window: the largest replica's size and offset (the leader's); then traffic from the
    # previous window in the range, null for the first one or when the value shrank.
    series: dict[tuple[str, int], list[tuple[int, int, int | None]]] = defaultdict(list)
    for start, win in picked:
        per: dict[tuple[str, int], list[tuple[int, int | None]]] = defaultdict(list)
        for (topic, partition, _broker), (_ts, size, leo) in win.partitions.items():
            per[(topic, partition)].append((size, leo))
        for tp, readings in per.items():
            leos = [leo for _, leo in readings if leo is not None]
            series[tp].append((start, max(s for s, _ in readings), max(leos) if leos else None))
    out = []
    for (topic, partition), windows in series.items():
        prev: tuple[int, int, int | None] | None = None
        for start, size, leo in windows:
            out.append(
                PartitionWindow(
                    topic=topic,
                    partition=partition,
                    window_start_ms=start,
                    size_bytes=size,
                    bytes_in_per_s=_rate(prev and prev[1], size, prev and prev[0], start),
                    messages_in_per_s=_rate(prev and prev[2], leo, prev and prev[0], start),
                )
            )
            prev = (start, size, leo)
    return out


def _rate(before: int | None, after: int | None, t0: int | None, t1: int) -> float | None:
    if before is None or after is None or t0 is None or after - before < 0:
        return None
    return (after - before) / ((t1 - t0) / 1000.0)


def _logdir_rows(picked: list[tuple[int, _Window]]) -> list[LogDirWindow]:
    return [
        LogDirWindow(
            broker=broker,
            log_dir=log_dir,
            window_start_ms=start,
            capacity_bytes=cap,
            used_bytes=used,
            usage_ratio=used / cap if cap > 0 else 0.0,
            io_util=io,
        )
        for start, win in picked
        for (broker, log_dir), (_ts, cap, used, io) in win.logdirs.items()
    ]


def _client_rows(picked: list[tuple[int, _Window]]) -> list[ClientWindow]:
    return [
        ClientWindow(
            broker=broker,
            request=request,
            client_id=client,
            window_start_ms=start,
            count=c.count,
            send_ms_max=c.send_ms_max,
            throttle_ms_max=c.throttle_ms_max,
        )
        for start, win in picked
        for (broker, request, client), c in win.clients.items()
    ]


def _probe_rows(picked: list[tuple[int, _Window]]) -> list[ProbeBrokerWindow]:
    """Per leader broker and window: the summed counts, and p50/p90/p99 of the merged produce,
    end-to-end and commit sketches."""
    cells = [(start, broker, p) for start, win in picked for broker, p in win.probes.items()]
    if not cells:
        return []
    q = {}
    for kind in ("produce", "end_to_end", "commit"):
        rows, group = _sketch_rows([getattr(p, kind) for _, _, p in cells])
        m = merge(rows, group, len(cells), PROBE_QUANTILES, {})
        q[kind] = {name: m.values(name) for name in PROBE_QUANTILES}
    out = []
    for i, (start, broker, p) in enumerate(cells):
        decided = p.ok + p.bad
        out.append(
            ProbeBrokerWindow(
                broker=broker,
                window_start_ms=start,
                sent=p.sent,
                ok=p.ok,
                decided=decided,
                availability=p.ok / decided if decided > 0 else None,
                produce_p50_ms=q["produce"]["p50_ms"][i],
                produce_p99_ms=q["produce"]["p99_ms"][i],
                end_to_end_p50_ms=q["end_to_end"]["p50_ms"][i],
                end_to_end_p99_ms=q["end_to_end"]["p99_ms"][i],
                commit_p99_ms=q["commit"]["p99_ms"][i],
                produce_p90_ms=q["produce"]["p90_ms"][i],
                end_to_end_p90_ms=q["end_to_end"]["p90_ms"][i],
            )
        )
    return out


def _imbalance(
    scope: str, measure: str, members: Iterable[tuple[str, int, str, float | None]]
) -> list[ImbalanceWindow]:
    """``members`` are (group, window, member, value); null values are ignored."""
    groups: dict[tuple[str, int], list[tuple[str, float]]] = defaultdict(list)
    for group, start, member, x in members:
        if x is not None:
            groups[(group, start)].append((member, x))
    out = []
    for (group, start), xs in groups.items():
        top_member, top = max(xs, key=lambda mx: mx[1])
        avg = sum(float(x) for _, x in xs) / len(xs)
        out.append(
            ImbalanceWindow(
                scope=scope,
                measure=measure,
                group=group,
                window_start_ms=start,
                members=len(xs),
                max_value=float(top),
                avg_value=avg,
                ratio=top / avg - 1.0 if avg > 0 else 0.0,
                max_member=top_member,
            )
        )
    return out


def _imbalances(partitions: list[PartitionWindow], logdirs: list[LogDirWindow]) -> list[ImbalanceWindow]:
    out = []
    for measure, col in (
        ("bytes_in", "bytes_in_per_s"),
        ("messages_in", "messages_in_per_s"),
        ("size", "size_bytes"),
    ):
        out += _imbalance(
            "topic",
            measure,
            ((p.topic, p.window_start_ms, str(p.partition), getattr(p, col)) for p in partitions),
        )
    per_broker: dict[tuple[int, int], int] = defaultdict(int)
    for d in logdirs:
        per_broker[(d.broker, d.window_start_ms)] += d.used_bytes
    out += _imbalance("broker", "size", (("", w, str(b), used) for (b, w), used in per_broker.items()))
    out += _imbalance(
        "log_dir", "size", (("", d.window_start_ms, f"{d.broker}:{d.log_dir}", d.used_bytes) for d in logdirs)
    )
    return out
