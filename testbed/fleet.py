"""A synthetic fleet: agent-shaped window records for N brokers on the real samples topic.

What a fleet of N brokers' agents would publish to ``linkwatch.samples``, without N brokers:
every ``window_s`` seconds, for every broker, a :class:`~linkwatch.records.StageSketch` per
(request type, stage) it served in the window and its slow-request exemplars
(:class:`~linkwatch.records.SlowRequest`), shaped as :mod:`agent.requestlog.window` closes them
(window start as ``ts_ms``, ``source`` ``broker-<id>``, ``window_sketches`` announced, the record
key ``dedup_key()``), published at each window's end plus the agent's grace.

Where the numbers come from:

* **Requests** are rows of a real ``kafka-request.log`` capture (:class:`Capture`: every stage
  time of one request, so a request's total stays its stages' sum as Kafka logged it), drawn
  with replacement and scaled per broker. The shipped capture profile (:data:`CAPTURE_PROFILE`)
  is derived from the repository's own capture (``tests/agent/fixtures/kafka-request.log``,
  3 brokers under producer and consumer load) by :func:`capture_from_log`; a user's own capture
  gives a fleet with their latencies (``linkwatch fleet --capture``).
* **Traffic** per broker and window is Poisson around the capture's rate of each request type
  times the broker's leadership weight: lognormal (``leader_skew``: a few busy leaders, a long
  tail), floored at :data:`MIN_WEIGHT`. ``idle_fraction`` of the brokers lead nothing: they log
  none of these request types, and their agents publish no stage sketches.
* **Racks**: brokers are placed in racks round-robin (``rack = (id - 1) % racks``); each rack has
  a latency scale of its own (hardware, network generation) and each broker one around it.
  Replication is rack-aware: a leader's ``followers`` are the next brokers by id, each in another
  rack (needs ``racks > followers``; the last ids' followers wrap around to the first ids, which
  may share a rack with them).
* **Faults** (:class:`Fault`) change a chosen broker's requests in the windows from their
  onset, as Kafka's timers would show them (:data:`FAULT_KINDS`).

Contracts: the same :class:`FleetSpec` (seed included), faults and window start give the same
records, byte for byte, whatever else was generated before (each window's draws come from a
generator seeded by the seed, the window's index and the chunk of brokers). Memory is bounded by
one chunk of ``chunk_brokers`` brokers' requests of one window: records are yielded per chunk.
Bucket keys are the agent's (:mod:`linkwatch.sketch`'s mapping, computed with numpy: a value
within a rounding error of a bucket boundary may land in the neighbouring bucket, as in any
1 %-accurate sketch); sums are float sums, not the agent's correctly rounded ones.

Not generated: broker gauges, host, log-dir and partition records, probe samples, client
timings (the fleet exercises the stage-sketch path: slow-broker detection).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from agent.requestlog.parse import STAGE_KEYS, Drop, LineParser
from linkwatch import records as R
from linkwatch.errors import ConfigError
from linkwatch.sketch import _MAPPING, MIN_POSITIVE_MS

CAPTURE_PROFILE = Path(__file__).with_name("fleet_capture.json")
# The capture the shipped profile is derived from, relative to the repository root.
CAPTURE_SOURCE = "tests/agent/fixtures/kafka-request.log"
# The capture's first seconds are the cluster's start (topic creation, first elections): left out.
CAPTURE_SKIP_FIRST_S = 2.0
# A request type is part of the fleet when the capture holds at least this many of its lines.
CAPTURE_MIN_LINES = 20
MIN_WEIGHT = 0.2  # leadership weight floor of a broker that leads anything (× the mean)
RACK_SCALE_SIGMA = 0.15  # lognormal σ of a rack's latency scale
BROKER_SCALE_SIGMA = 0.1  # lognormal σ of a broker's latency scale around its rack's
REQUEST_JITTER_SIGMA = 0.1  # lognormal σ of one request's scale (a whole row)
FAULT_SIGMA = 0.5  # lognormal σ of a fault's added time per request around its extra_ms
SLOW_THRESHOLD_MS = 300.0  # the agent's default exemplar threshold
MAX_EXEMPLARS = 20  # the agent's default exemplars per window
FETCHES = (R.FETCH_CONSUMER, R.FETCH_FOLLOWER)
_STAGE = {s: i for i, s in enumerate(R.STAGES)}
_TOTAL = _STAGE["total"]
_KEY_OFFSET = 1 << 11  # bucket keys of 1 µs .. 1e9 ms lie within ±2^11
_CODE_BASE = 1 << 12
_MIN_KEY_VALUE = max(MIN_POSITIVE_MS, _MAPPING.min_possible)
_LOG2_MULT = _MAPPING._multiplier  # key = ceil(log2(v) * this), as LogarithmicMapping computes it
_KEY_TEXT = [str(code - _KEY_OFFSET) for code in range(_CODE_BASE)]  # a bucket key as the dict's key


# -- the capture ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Capture:
    """Stage rows of a real request log: per request type, one row of the seven stage times (ms,
    :data:`linkwatch.records.STAGES` order) per logged request, and the seconds the rows span."""

    source: str
    span_s: float
    rows: dict[str, list[list[float]]]

    def rate_per_s(self, request: str) -> float:
        return len(self.rows[request]) / self.span_s

    @property
    def requests(self) -> tuple[str, ...]:
        return tuple(sorted(self.rows))

    def to_json(self) -> str:
        """The profile as a file: one request's row a line."""
        requests = ",\n".join(
            f"  {json.dumps(r)}: [\n" + ",\n".join(f"   {json.dumps(row)}" for row in rows) + "\n  ]"
            for r, rows in sorted(self.rows.items())
        )
        head = f'{{\n "source": {json.dumps(self.source)},\n "span_s": {json.dumps(self.span_s)},\n'
        return head + ' "rows": {\n' + requests + "\n }\n}\n"

    @classmethod
    def load(cls, path: Path = CAPTURE_PROFILE) -> Capture:
        """A profile written by :meth:`to_json`, or a raw request log (:func:`capture_from_log`)."""
        text = Path(path).read_bytes()
        if text.lstrip().startswith(b"{"):
            d = json.loads(text)
            return cls(source=d["source"], span_s=float(d["span_s"]), rows=d["rows"])
        return capture_from_log(Path(path))


def capture_from_log(
    path: Path,
    skip_first_s: float = CAPTURE_SKIP_FIRST_S,
    min_lines: int = CAPTURE_MIN_LINES,
    source: str | None = None,
) -> Capture:
    """The stage rows of the request types with at least ``min_lines`` lines in a
    ``kafka-request.log`` capture, leaving out its first ``skip_first_s`` seconds. Lines the
    agent's parser drops are left out. ConfigError if no request type is left."""
    parser = LineParser()
    parsed = []
    for line in Path(path).read_bytes().splitlines():
        try:
            parsed.append(parser.parse(line))
        except Drop:
            continue
    if not parsed:
        raise ConfigError("capture", [f"{path}: no request lines"])
    first = min(p.ts_ms for p in parsed) + int(skip_first_s * 1000)
    kept = [p for p in parsed if p.ts_ms >= first]
    by_request: dict[str, list[list[float]]] = {}
    for p in kept:
        by_request.setdefault(p.request, []).append([float(v) for v in p.stages])
    rows = {r: v for r, v in by_request.items() if len(v) >= min_lines}
    span_s = (max(p.ts_ms for p in kept) - first) / 1000 if kept else 0.0
    if not rows or span_s <= 0:
        raise ConfigError(
            "capture", [f"{path}: no request type with {min_lines} lines after {skip_first_s}s"]
        )
    assert tuple(k.removesuffix("TimeMs") for k in STAGE_KEYS) == R.STAGES  # rows are in STAGES order
    return Capture(source=source or str(path), span_s=span_s, rows=rows)


# -- faults -----------------------------------------------------------------------------------

# What each fault kind does to the requests, as Kafka's timers see it (e: extra_ms per request,
# lognormal with σ FAULT_SIGMA around the fault's extra_ms):
FAULT_KINDS = {
    # I/O handler threads starved (CPU, a stuck handler): every request waits e in the queue.
    "queue": "every request of the broker: requestQueue + e",
    # A slow disk: appends take e, and requests queue behind the blocked handlers; reads a quarter.
    "local": "its Produce: local + e, requestQueue + e/4; its fetches: local + e/4",
    # A follower that fetches late: every leader it follows waits in remote (acks=all) on the
    # share of its produce requests whose partitions it replicates; its own requests are as usual.
    "follower": "Produce of the leaders it follows: remote + e on 1/followers of their requests",
}


@dataclass(frozen=True)
class Fault:
    """``kind`` (:data:`FAULT_KINDS`) on ``broker`` in the windows starting at or after
    ``start_ms`` and before ``end_ms`` (None: to the end)."""

    kind: str
    broker: int
    start_ms: int
    end_ms: int | None = None
    extra_ms: float = 400.0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ConfigError("fault", [f"kind {self.kind!r}: one of {', '.join(FAULT_KINDS)}"])
        if self.extra_ms <= 0:
            raise ConfigError("fault", [f"extra_ms {self.extra_ms}: must be > 0"])

    def active(self, window_start_ms: int) -> bool:
        return window_start_ms >= self.start_ms and (self.end_ms is None or window_start_ms < self.end_ms)


# -- the fleet --------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetSpec:
    """The fleet's shape. ``racks`` 0: chosen from the size (3 up to 50, about 40 brokers each)."""

    brokers: int
    cluster: str = "fleet"
    window_s: int = 10
    seed: int = 1
    racks: int = 0
    idle_fraction: float = 0.02
    leader_skew: float = 0.8  # lognormal σ of the leadership weights
    traffic: float = 1.0  # × the capture's request rates
    # × the capture's stage times. The repository's capture comes from a loaded 2-core test
    # machine: its produce remote p99 (184 ms) is above the slow-broker model's replication-wait
    # floor (150 ms), so at 1.0 the busiest leaders already read as waiting on a follower.
    latency_scale: float = 1.0
    followers: int = 2  # replication factor − 1
    grace_s: float = 1.0  # the agent's: a window is published this long after its end
    chunk_brokers: int = 250

    def __post_init__(self) -> None:
        errors = []
        if not 1 <= self.brokers <= 100_000:
            errors.append(f"brokers {self.brokers}: 1 to 100000")
        if self.window_s < 1:
            errors.append(f"window_s {self.window_s}: at least 1")
        if not 0 <= self.idle_fraction < 1:
            errors.append(f"idle_fraction {self.idle_fraction}: in [0, 1)")
        if self.traffic <= 0 or self.leader_skew < 0 or self.latency_scale <= 0:
            errors.append("traffic and latency_scale must be > 0, leader_skew >= 0")
        if self.followers < 0 or self.followers >= self.brokers:
            errors.append(f"followers {self.followers}: 0 to brokers - 1")
        if self.racks and self.followers >= self.racks and self.brokers > self.racks:
            errors.append(
                f"racks {self.racks}: more than followers ({self.followers}) for rack-aware replicas"
            )
        if self.chunk_brokers < 1:
            errors.append(f"chunk_brokers {self.chunk_brokers}: at least 1")
        if errors:
            raise ConfigError("fleet", errors)

    @property
    def rack_count(self) -> int:
        racks = self.racks or max(3, min(50, self.brokers // 40), self.followers + 1)
        return min(racks, self.brokers)


@dataclass(frozen=True)
class Layout:
    """Per broker (index ``id - 1``): rack, leadership weight (0: idle), latency scale, and the
    brokers it leads partitions for as follower (rack-aware)."""

    rack: np.ndarray  # int
    weight: np.ndarray  # float, mean 1 over the brokers that lead anything
    scale: np.ndarray  # float
    followers: np.ndarray  # (brokers, followers) broker ids

    @classmethod
    def of(cls, spec: FleetSpec) -> Layout:
        rng = np.random.default_rng([spec.seed, 0])
        n, racks = spec.brokers, spec.rack_count
        rack = np.arange(n) % racks
        weight = np.maximum(rng.lognormal(0.0, spec.leader_skew, n), MIN_WEIGHT)
        idle = rng.permutation(n)[: round(n * spec.idle_fraction)]
        weight[idle] = 0.0
        if weight.any():
            weight /= weight[weight > 0].mean()
        scale = rng.lognormal(0.0, RACK_SCALE_SIGMA, racks)[rack] * rng.lognormal(0.0, BROKER_SCALE_SIGMA, n)
        # Consecutive ids are in consecutive racks: ids + 1 .. + followers are in other racks.
        followers = (np.arange(n)[:, None] + np.arange(1, spec.followers + 1)[None, :]) % n + 1
        return cls(rack, weight, scale, followers)

    def leaders_of(self, follower: int) -> np.ndarray:
        """Broker ids that have ``follower`` among their followers (and lead something)."""
        ids = np.nonzero((self.followers == follower).any(axis=1) & (self.weight > 0))[0]
        return ids + 1


class Fleet:
    """Generates the fleet's records window by window (no I/O; :func:`publish` sends them)."""

    def __init__(
        self, spec: FleetSpec, capture: Capture | None = None, faults: tuple[Fault, ...] = ()
    ) -> None:
        self.spec = spec
        self.capture = capture or Capture.load()
        self.layout = Layout.of(spec)
        self.faults = tuple(faults)
        for f in self.faults:
            if not 1 <= f.broker <= spec.brokers:
                raise ConfigError("fault", [f"broker {f.broker}: the fleet has brokers 1 to {spec.brokers}"])
        self.requests = tuple(
            r for r in (R.PRODUCE, R.FETCH_CONSUMER, R.FETCH_FOLLOWER) if r in self.capture.rows
        )
        self._pool = {
            r: np.asarray(self.capture.rows[r], dtype=np.float64) * spec.latency_scale for r in self.requests
        }
        self._mean_n = {r: self.capture.rate_per_s(r) * spec.window_s * spec.traffic for r in self.requests}

    @property
    def window_ms(self) -> int:
        return self.spec.window_s * 1000

    def busiest(self) -> int:
        """The broker id with the largest leadership weight."""
        return int(np.argmax(self.layout.weight)) + 1

    def typical(self) -> int:
        """A broker id with the median leadership weight among those that lead anything."""
        ids = np.nonzero(self.layout.weight > 0)[0]
        ordered = ids[np.argsort(self.layout.weight[ids], kind="stable")]
        return int(ordered[len(ordered) // 2]) + 1

    def window(self, start_ms: int) -> Iterator[list[R.Record]]:
        """The records of the window starting at ``start_ms`` (a multiple of ``window_s``), one
        list per chunk of brokers: each broker's stage sketches, then its exemplars."""
        if start_ms % self.window_ms:
            raise ValueError(f"start_ms {start_ms} is not a multiple of the window ({self.window_ms} ms)")
        index = start_ms // self.window_ms
        faults = [f for f in self.faults if f.active(start_ms)]
        for lo in range(0, self.spec.brokers, self.spec.chunk_brokers):
            hi = min(lo + self.spec.chunk_brokers, self.spec.brokers)
            yield self._chunk(index, start_ms, lo, hi, faults)

    def _chunk(self, index: int, start_ms: int, lo: int, hi: int, faults: list[Fault]) -> list[R.Record]:
        # Three generators per chunk: the healthy draws', the faults' and the exemplars', so a
        # fault changes its victims' records and no other broker's.
        seed = self.spec.seed
        rng, fault_rng, exemplar_rng = (np.random.default_rng([seed, k, index, lo]) for k in (1, 2, 3))
        drawn = {r: self._draw(rng, fault_rng, r, lo, hi, faults) for r in self.requests}
        served = {r: np.bincount(d[0], minlength=hi - lo) for r, d in drawn.items()}
        announced = sum((n > 0).astype(int) for n in served.values()) * len(R.STAGES)
        out: list[R.Record] = []
        for request, (bi, rows) in drawn.items():
            out += self._sketches(start_ms, lo, request, bi, rows, announced)
        for request, (bi, rows) in drawn.items():
            out += self._exemplars(exemplar_rng, start_ms, lo, request, bi, rows)
        return out

    def _draw(
        self,
        rng: np.random.Generator,
        fault_rng: np.random.Generator,
        request: str,
        lo: int,
        hi: int,
        faults: list[Fault],
    ) -> tuple[np.ndarray, np.ndarray]:
        """(broker index within the chunk per request, ascending; the requests' stage rows)."""
        weight = self.layout.weight[lo:hi]
        if request == R.FETCH_FOLLOWER:  # followers fetch continuously, busy leaders a little more
            weight = np.where(weight > 0, 0.5 + 0.5 * weight, 0.0)
        counts = rng.poisson(self._mean_n[request] * weight)
        bi = np.repeat(np.arange(hi - lo), counts)
        pool = self._pool[request]
        rows = pool[rng.integers(0, len(pool), len(bi))]
        scale = self.layout.scale[lo:hi][bi] * rng.lognormal(0.0, REQUEST_JITTER_SIGMA, len(bi))
        rows = rows * scale[:, None]
        for f in faults:
            apply_fault(fault_rng, f, request, rows, bi + lo + 1, self.layout, self.spec.followers)
        return bi, rows

    def _sketches(
        self, start_ms: int, lo: int, request: str, bi: np.ndarray, rows: np.ndarray, announced: np.ndarray
    ) -> list[R.StageSketch]:
        present = np.unique(bi)
        if not len(present):
            return []
        starts = np.searchsorted(bi, present)
        out: dict[int, list[R.StageSketch]] = {int(b): [] for b in present}
        for s, stage in enumerate(R.STAGES):
            for b, sketch in zip(
                present.tolist(), _sketch_dicts(bi, rows[:, s], present, starts), strict=True
            ):
                broker = lo + b + 1
                out[b].append(
                    R.StageSketch(
                        cluster=self.spec.cluster,
                        source=f"broker-{broker}",
                        ts_ms=start_ms,
                        broker=broker,
                        request=request,
                        stage=stage,
                        window_s=self.spec.window_s,
                        sketch=sketch,
                        window_sketches=int(announced[b]),
                    )
                )
        return [r for b in present.tolist() for r in out[b]]

    def _exemplars(
        self, rng: np.random.Generator, start_ms: int, lo: int, request: str, bi: np.ndarray, rows: np.ndarray
    ) -> list[R.SlowRequest]:
        """The agent's exemplars: requests at or over :data:`SLOW_THRESHOLD_MS` (a fetch's
        long poll, ``remote``, not counted), the :data:`MAX_EXEMPLARS` slowest per broker."""
        slow_ms = rows[:, _TOTAL] - (rows[:, _STAGE["remote"]] if request in FETCHES else 0.0)
        # Drawn for every request (how many does not depend on faults), read for the slow ones.
        offsets = rng.integers(0, self.window_ms, len(rows))
        clients = rng.integers(1, 1000, len(rows))
        correlation = rng.integers(0, 1 << 31, len(rows))
        picked = np.nonzero(slow_ms >= SLOW_THRESHOLD_MS)[0]
        out = []
        for b in np.unique(bi[picked]).tolist():
            mine = picked[bi[picked] == b]
            mine = mine[np.argsort(-slow_ms[mine], kind="stable")[:MAX_EXEMPLARS]]
            mine = mine[np.argsort(offsets[mine], kind="stable")]  # as the agent's: in time order
            broker = lo + b + 1
            rack = self.layout.rack[broker - 1]
            for i in mine.tolist():
                client = int(clients[i])
                out.append(
                    R.SlowRequest(
                        cluster=self.spec.cluster,
                        source=f"broker-{broker}",
                        ts_ms=start_ms + int(offsets[i]),
                        broker=broker,
                        request=request,
                        client_id=_client_id(request, client, self.layout.followers, broker),
                        correlation_id=int(correlation[i]),
                        connection=f"10.{rack}.{broker >> 8}.{broker & 255}:9092-"
                        f"10.200.{client >> 8}.{client & 255}:{40000 + client}-{client % 3}-{i % 97}",
                        stages_ms=dict(zip(R.STAGES, rows[i].tolist(), strict=True)),
                        partitions=[
                            {"topic": f"fleet-{client % 50}", "partition": client % 24, "bytes": 1024}
                        ],
                    )
                )
        return out


def _client_id(request: str, client: int, followers: np.ndarray, broker: int) -> str:
    if request == R.FETCH_FOLLOWER:  # the replica fetcher of a broker that follows this one
        return f"broker-{followers[broker - 1][client % followers.shape[1]]}-fetcher-0"
    return f"fleet-{'producer' if request == R.PRODUCE else 'consumer'}-{client}"


def apply_fault(
    rng: np.random.Generator,
    fault: Fault,
    request: str,
    rows: np.ndarray,
    broker_ids: np.ndarray,
    layout: Layout,
    followers: int,
) -> None:
    """Add ``fault``'s time to the rows (in place) of the requests it touches (:data:`FAULT_KINDS`);
    ``broker_ids``: each row's broker. Every added time is added to ``total`` too."""
    if fault.kind == "follower":
        if request != R.PRODUCE or not followers:
            return
        hit = np.isin(broker_ids, layout.leaders_of(fault.broker)) & (rng.random(len(rows)) < 1 / followers)
        shares = {"remote": 1.0}
    else:
        hit = broker_ids == fault.broker
        if fault.kind == "queue":
            shares = {"requestQueue": 1.0}
        elif request == R.PRODUCE:
            shares = {"local": 1.0, "requestQueue": 0.25}
        else:
            shares = {"local": 0.25}
    idx = np.nonzero(hit)[0]
    if not len(idx):
        return
    extra = fault.extra_ms * rng.lognormal(0.0, FAULT_SIGMA, len(idx))
    for stage, share in shares.items():
        rows[idx, _STAGE[stage]] += share * extra
        rows[idx, _TOTAL] += share * extra


def _sketch_dicts(
    bi: np.ndarray, values: np.ndarray, present: np.ndarray, starts: np.ndarray
) -> Iterator[dict[str, object]]:
    """Per broker in ``present`` (``starts``: where its values begin in ``bi``, which is sorted),
    its values as :meth:`linkwatch.sketch.LatencySketch.to_dict` writes them."""
    positive = values > _MIN_KEY_VALUE
    keys = np.zeros(len(values), dtype=np.int64)
    keys[positive] = np.ceil(np.log2(values[positive]) * _LOG2_MULT).astype(np.int64)
    codes = bi[positive] * _CODE_BASE + keys[positive] + _KEY_OFFSET
    uniq, counts = np.unique(codes, return_counts=True)
    owner = uniq // _CODE_BASE
    key_of = list(map(_KEY_TEXT.__getitem__, (uniq % _CODE_BASE).tolist()))
    counts_l = counts.tolist()
    cut = [*np.searchsorted(owner, present).tolist(), len(uniq)]
    size = int(present[-1]) + 1
    zeros = np.bincount(bi[~positive], minlength=size)[present].tolist()
    n = np.bincount(bi, minlength=size)[present].tolist()
    sums = np.bincount(bi, weights=values, minlength=size)[present].tolist()
    mins = np.minimum.reduceat(values, starts).tolist()
    maxs = np.maximum.reduceat(values, starts).tolist()
    for j in range(len(present)):
        yield {
            "zero": zeros[j],
            "buckets": dict(zip(key_of[cut[j] : cut[j + 1]], counts_l[cut[j] : cut[j + 1]], strict=True)),
            "count": n[j],
            "sum": sums[j],
            "min": mins[j],
            "max": maxs[j],
        }


# -- publishing -------------------------------------------------------------------------------

_FIELDS: dict[type, tuple[str, ...]] = {}


def record_json(rec: R.Record) -> bytes:
    """``rec.to_json()``, byte for byte, without its deep copy of every nested dict (the fleet
    serialises tens of thousands of records a window)."""
    names = _FIELDS.get(type(rec))
    if names is None:
        names = _FIELDS[type(rec)] = tuple(f.name for f in dataclasses.fields(rec))
    body = {"v": R.SCHEMA_VERSION, "kind": rec.KIND, "key": rec.dedup_key()}
    for name in names:
        body[name] = getattr(rec, name)
    return orjson.dumps(body)


@dataclass
class WindowStats:
    """What publishing one window took. ``behind_s``: how late it went out (after end + grace)."""

    start_ms: int
    records: int = 0
    bytes: int = 0
    generate_s: float = 0.0
    send_s: float = 0.0
    behind_s: float = 0.0
    faults: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line a bench reads back (``fleet window <start_ms> records <n> …``)."""
        faults = f" faults {','.join(self.faults)}" if self.faults else ""
        return (
            f"fleet window {self.start_ms} records {self.records} bytes {self.bytes} "
            f"generate_s {self.generate_s:.3f} send_s {self.send_s:.3f} behind_s {self.behind_s:.3f}{faults}"
        )


def publish(
    fleet: Fleet,
    bootstrap: str,
    topic: str = R.SAMPLES_TOPIC,
    *,
    windows: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    on_window: Callable[[WindowStats], None] = lambda s: None,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], None] = time.sleep,
    producer: Any = None,
) -> int:
    """Publish the fleet's windows as they end, from the window in progress now, until
    ``windows`` were published or ``should_stop()``; returns the windows published. Each
    window goes out ``grace_s`` after its end (as agents close theirs), keyed by
    ``dedup_key()`` like the agent's sink (acks=all, idempotent); a window that took longer than
    ``window_s`` makes the next one late, never skipped (``WindowStats.behind_s`` says by how
    much). ``producer``: a ``KafkaProducer``-like object (``send``, ``flush``, ``close``), closed
    here; None: one to ``bootstrap``."""
    if producer is None:
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            client_id="linkwatch-fleet",
            acks="all",
            enable_idempotence=True,
            linger_ms=50,
            batch_size=512 * 1024,
        )
    wms = fleet.window_ms
    start = int(clock() * 1000) // wms * wms
    done = 0
    try:
        while (windows is None or done < windows) and not should_stop():
            due = (start + wms) / 1000 + fleet.spec.grace_s
            while clock() < due and not should_stop():
                sleep(min(0.2, max(0.0, due - clock())))
            if should_stop():
                break
            stats = WindowStats(start, behind_s=max(0.0, clock() - due))
            stats.faults = [f"{f.kind}:{f.broker}" for f in fleet.faults if f.active(start)]
            for chunk in _timed(fleet.window(start), stats):
                t = time.monotonic()
                for rec in chunk:
                    value = record_json(rec)
                    stats.records += 1
                    stats.bytes += len(value)
                    producer.send(topic, key=rec.dedup_key().encode(), value=value)
                stats.send_s += time.monotonic() - t
            t = time.monotonic()
            producer.flush()
            stats.send_s += time.monotonic() - t
            on_window(stats)
            done += 1
            start += wms
    finally:
        producer.close(timeout=10)
    return done


def _timed(chunks: Iterator[list[R.Record]], stats: WindowStats) -> Iterator[list[R.Record]]:
    """``chunks``, adding the time each took to generate to ``stats.generate_s``."""
    while True:
        t = time.monotonic()
        chunk = next(chunks, None)
        stats.generate_s += time.monotonic() - t
        if chunk is None:
            return
        yield chunk


def parse_fault(text: str, start_ms: int, end_ms: int | None = None) -> Fault:
    """``KIND:BROKER`` or ``KIND:BROKER:EXTRA_MS`` (e.g. ``local:7:400``) as a :class:`Fault`."""
    parts = text.split(":")
    try:
        if len(parts) not in (2, 3):
            raise ValueError(text)
        broker, extra = int(parts[1]), float(parts[2]) if len(parts) == 3 else 400.0
    except ValueError:
        kinds = ", ".join(FAULT_KINDS)
        raise ConfigError("--fault", [f"{text!r}: KIND:BROKER[:EXTRA_MS], KIND one of {kinds}"]) from None
    return Fault(parts[0], broker, start_ms, end_ms, extra)


def bucket_key(value_ms: float) -> int:
    """The agent's bucket key of one positive value (:func:`agent.requestlog.window.bucket_code`'s
    DDSketch part), for tests comparing the fleet's keys with the agent's."""
    return math.ceil(math.log(value_ms, 2) * _LOG2_MULT)
