"""Record sets for the window-state tests: hand-built scenarios (:data:`SCENARIOS`) and
Hypothesis strategies shaped like the agents' samples (stage sketches, partition sizes, log-dir
usage, slow-request exemplars) and the probe's, and a row comparison for Aggregates."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import strategies as st

from linkwatch import records as R
from linkwatch.aggregates import Aggregates
from linkwatch.sketch import LatencySketch

T0 = 1_700_000_000_000
WINDOW_S = 2
CLUSTER = "c1"


def sketch_of(values: list[float]) -> dict:
    sk = LatencySketch()
    for v in values:
        sk.add(v)
    return sk.to_dict()


def stage(
    broker: int,
    ts_ms: int,
    values: list[float],
    request: str = "Produce",
    stage: str = "total",
    capture_ratio: float = 1.0,
    window_sketches: int = 0,
    connections: int = 0,
    saturated_connections: int = 0,
):
    """A broker's stage sketch; ``capture_ratio`` < 1 marks it sampled (as the agent's scaled
    windows: ``values`` are then the scaled requests, not only the logged ones);
    ``window_sketches``: how many its agent said it sent for the window (0: not said);
    ``connections``/``saturated_connections``: what a ``total`` sketch says of its clients."""
    return R.StageSketch(
        cluster=CLUSTER,
        source=f"broker-{broker}",
        ts_ms=ts_ms,
        broker=broker,
        request=request,
        stage=stage,
        window_s=WINDOW_S,
        sketch=sketch_of(values),
        capture_ratio=capture_ratio,
        window_sketches=window_sketches,
        connections=connections,
        saturated_connections=saturated_connections,
    )


def partition(topic: str, p: int, broker: int, ts_ms: int, size: int, leo: int | None) -> R.PartitionSize:
    return R.PartitionSize(
        cluster=CLUSTER,
        source=f"broker-{broker}",
        ts_ms=ts_ms,
        broker=broker,
        log_dir="/data/1",
        topic=topic,
        partition=p,
        size_bytes=size,
        segments=1,
        oldest_segment_ms=T0,
        newest_segment_ms=ts_ms,
        log_end_offset=leo,
    )


def logdir(
    broker: int, log_dir: str, ts_ms: int, capacity: int, used: int, io: float | None
) -> R.LogDirUsage:
    return R.LogDirUsage(
        cluster=CLUSTER,
        source=f"broker-{broker}",
        ts_ms=ts_ms,
        broker=broker,
        log_dir=log_dir,
        capacity_bytes=capacity,
        used_bytes=used,
        partition_bytes=used,
        partitions=1,
        io_util=io,
    )


def exemplar(
    broker: int, ts_ms: int, client: str, send: float | None, throttle: float | None, request: str = "Produce"
) -> R.SlowRequest:
    """A slow-request exemplar; a stage given as None is absent from ``stages_ms``."""
    stages = {"total": 500.0}
    if send is not None:
        stages["send"] = send
    if throttle is not None:
        stages["throttle"] = throttle
    return R.SlowRequest(
        cluster=CLUSTER,
        source=f"broker-{broker}",
        ts_ms=ts_ms,
        broker=broker,
        request=request,
        client_id=client,
        correlation_id=ts_ms % 997,
        connection=f"127.0.0.1:9092-127.0.0.1:{40000 + broker}-0",
        stages_ms=stages,
    )


def probe(
    broker: int,
    ts_ms: int,
    produce: list[float],
    end_to_end: list[float],
    unavailable: dict[str, int] | None = None,
    source: str = "probe-a",
    commits: list[float] | None = None,
) -> R.ProbeSample:
    """One probe instance's window for a leader broker: every produce acked, every acked one
    read back ``ok`` unless counted in ``unavailable``; ``commits`` are the offset commits the
    broker coordinated (``None``: it coordinated none, the sketch is ``{}``)."""
    return R.ProbeSample(
        cluster=CLUSTER,
        source=source,
        ts_ms=ts_ms,
        broker=broker,
        topic="linkwatch.probe",
        window_s=WINDOW_S,
        deadline_ms=5000,
        sent=len(produce) + sum((unavailable or {}).values()),
        acked=len(produce),
        ok=len(end_to_end),
        unavailable=dict(unavailable or {}),
        produce=sketch_of(produce),
        end_to_end=sketch_of(end_to_end),
        commit_ok=len(commits or []),
        commit_latency=sketch_of(commits) if commits is not None else {},
    )


def gauges(broker: int, ts_ms: int, started_ms: float | None, **values: float) -> R.BrokerGauges:
    """One JMX reading of a broker; ``started_ms`` its JVM's start (None: not read)."""
    if started_ms is not None:
        values[R.BrokerGauges.JVM_START_TIME] = started_ms
    return R.BrokerGauges(
        cluster=CLUSTER,
        source=f"broker-{broker}",
        ts_ms=ts_ms,
        broker=broker,
        window_s=WINDOW_S,
        values=values,
    )


WMS = WINDOW_S * 1000
# Hand-built record sets, one per shape each aggregate must handle (scenario -> records).
SCENARIOS: dict[str, list[R.Record]] = {
    "zeros and one slow broker": [
        stage(1, T0, [0.0] * 50 + [3.0] * 50, connections=7),
        stage(2, T0 + 10, [0.0] * 3, connections=2),
        stage(3, T0 + 20, [400.0] * 99 + [2000.0], connections=6, saturated_connections=3),
        stage(3, T0 + WMS, []),  # an empty sketch: count 0, quantiles null
    ],
    "two sketches of a broker in one window": [
        stage(1, T0 + 1, [1.0, 2.0, 3.0], request="FetchConsumer", stage="local"),
        stage(1, T0 + 1999, [30.0, 40.0], request="FetchConsumer", stage="local"),
    ],
    "partition traffic, a shrink and a missing offset": [
        partition("a", 0, 1, T0, 1000, 10),
        partition("a", 0, 2, T0 + 5, 900, 9),  # a lagging follower: the largest replica counts
        partition("a", 0, 1, T0 + WMS, 5000, None),
        partition("a", 0, 1, T0 + 2 * WMS, 100, 50),  # retention shrank it: no rate
        partition("a", 1, 1, T0 + 2 * WMS + 1, 70, 7),
        partition("b", 0, 3, T0 + 4 * WMS, 1, 1),  # a gap of two windows: dt = 3 windows
        partition("b", 0, 3, T0 + WMS, 0, 0),
    ],
    "log dirs: last reading wins, zero capacity, no io util": [
        logdir(1, "/d1", T0 + 100, 1000, 10, 0.5),
        logdir(1, "/d1", T0 + 900, 1000, 600, None),
        logdir(1, "/d2", T0, 0, 0, 0.1),
        logdir(2, "/d1", T0 + 5, 4000, 100, 0.9),
    ],
    "exemplars: per client, a missing client id and missing stages": [
        exemplar(1, T0 + 10, "app-1", 800.0, 0.0),
        exemplar(1, T0 + 20, "app-1", 1200.0, 5.0, request="FetchConsumer"),
        exemplar(1, T0 + 30, "app-1", 300.0, None, request="FetchConsumer"),
        exemplar(2, T0 + 40, "", None, 700.0),
        exemplar(2, T0 + WMS + 1, "app-2", None, None),
    ],
    "probes: two instances merged, unavailable counted, nothing read back": [
        probe(1, T0 + 5, [3.0] * 30 + [250.0], [8.0] * 30, {"timeout": 1}),
        probe(1, T0 + 6, [4.0] * 10, [9.0] * 10, source="probe-b"),
        probe(2, T0 + 7, [], [], {"timeout": 4, "error": 1}),  # no ack: quantiles null
        probe(3, T0 + WMS, [0.0] * 5, [], {}),  # zeros only; none decided: availability null
    ],
    "probe commits: merged across instances, {} where none, zeros only": [
        probe(1, T0 + 5, [3.0] * 10, [8.0] * 10, commits=[4.0] * 19 + [900.0]),
        probe(1, T0 + 6, [4.0] * 10, [9.0] * 10, source="probe-b", commits=[5.0] * 20),
        probe(2, T0 + 7, [3.0] * 10, [8.0] * 10),  # coordinated no commit: p99 null
        probe(3, T0 + 8, [3.0] * 10, [8.0] * 10, commits=[]),  # an empty sketch: p99 null
        probe(3, T0 + WMS, [3.0] * 10, [8.0] * 10, commits=[0.0] * 3),
    ],
    "JVM start times: a restart inside a window, none read, out of range": [
        gauges(1, T0 + 1, T0 - 3_600_000.0, LeaderCount=3.0),
        gauges(1, T0 + 6, T0 + 4_000.0),  # restarted inside the window: the newest start
        gauges(1, T0 + WMS + 1, T0 + 4_000.0),
        gauges(2, T0 + 2, None, LeaderCount=2.0),  # no Runtime mbean: no row
        gauges(3, T0 + 3, 0.0),  # not a time: no row
        gauges(3, T0 + 4, 1e16),
        gauges(3, T0 + WMS + 2, float("nan")),
    ],
}


_ts = st.integers(0, 6 * WINDOW_S * 1000 - 1).map(lambda d: T0 + d)
_latency = st.one_of(st.just(0.0), st.floats(0.001, 5000.0))
_stages = st.builds(
    stage,
    st.integers(1, 3),
    _ts,
    st.lists(_latency, max_size=40),
    st.sampled_from(["Produce", "FetchConsumer"]),
    st.sampled_from(["total", "local"]),
    st.sampled_from([1.0, 1.0, 0.5, 1 / 6, 0.3]),
    st.just(0),
    st.integers(0, 9),
    st.integers(0, 3),
)
_partitions = st.builds(
    partition,
    st.sampled_from(["a", "b"]),
    st.integers(0, 3),
    st.integers(1, 3),
    _ts,
    st.integers(0, 10**6),
    st.one_of(st.none(), st.integers(0, 10**6)),
)
_logdirs = st.builds(
    logdir,
    st.integers(1, 3),
    st.sampled_from(["/data/1", "/data/2"]),
    _ts,
    st.integers(0, 10**9),
    st.integers(0, 10**9),
    st.one_of(st.none(), st.floats(0.0, 1.0)),
)


_exemplars = st.builds(
    exemplar,
    st.integers(1, 3),
    _ts,
    st.sampled_from(["", "app-1", "app-2"]),
    st.one_of(st.none(), st.floats(0.0, 5000.0)),
    st.one_of(st.none(), st.floats(0.0, 5000.0)),
    st.sampled_from(["Produce", "FetchConsumer"]),
)
_probes = st.builds(
    probe,
    st.integers(1, 3),
    _ts,
    st.lists(_latency, max_size=20),
    st.lists(_latency, max_size=20),
    st.one_of(st.none(), st.dictionaries(st.sampled_from(["timeout", "error"]), st.integers(0, 5))),
    st.sampled_from(["probe-a", "probe-b"]),
    st.one_of(st.none(), st.lists(_latency, max_size=10)),
)
_gauges = st.builds(
    gauges,
    st.integers(1, 3),
    _ts,
    st.one_of(st.none(), st.sampled_from([0.0, -5.0, 1e16]), st.integers(T0 - 10**7, T0 + 10**7).map(float)),
)


@st.composite
def record_sets(draw: st.DrawFn) -> tuple[list[R.Record], list[R.Record]]:
    """``(distinct, sent)``: records with distinct keys, and the same records as a stream
    delivers them — shuffled across windows, some re-sent (identical copies, as a spool does)."""
    recs = draw(
        st.lists(st.one_of(_stages, _partitions, _logdirs, _exemplars, _probes, _gauges), max_size=40)
    )
    distinct = list({r.dedup_key(): r for r in recs}.values())
    resent = draw(st.lists(st.sampled_from(distinct), max_size=8)) if distinct else []
    sent = draw(st.permutations(distinct + resent))
    return distinct, sent


def _close(a: object, b: object, rel: float) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)
    return a == b


def _member_values(data: Aggregates) -> dict[tuple[str, str, str, int, str], float]:
    """(scope, measure, group, window, member) → value, for checking ties of ``max_member``."""
    out: dict[tuple[str, str, str, int, str], float] = {}
    for p in data.partitions:
        for measure, v in (
            ("bytes_in", p.bytes_in_per_s),
            ("messages_in", p.messages_in_per_s),
            ("size", p.size_bytes),
        ):
            if v is not None:
                out[("topic", measure, p.topic, p.window_start_ms, str(p.partition))] = float(v)
    per_broker: dict[tuple[int, int], int] = {}
    for d in data.logdirs:
        per_broker[(d.broker, d.window_start_ms)] = (
            per_broker.get((d.broker, d.window_start_ms), 0) + d.used_bytes
        )
        out[("log_dir", "size", "", d.window_start_ms, f"{d.broker}:{d.log_dir}")] = float(d.used_bytes)
    for (b, w), used in per_broker.items():
        out[("broker", "size", "", w, str(b))] = float(used)
    return out


# The row sets of an ``Aggregates`` that the stream and the batch path both produce.
ROW_SETS = (
    "broker_stages",
    "cluster_stages",
    "partitions",
    "logdirs",
    "imbalances",
    "client_windows",
    "probes",
    "broker_starts",
)


def assert_same_aggregates(got: Aggregates, want: Aggregates, rel: float = 1e-9) -> None:
    """Row sets equal, floats to ``rel``; where several members share the maximum, either may
    be named ``max_member`` (Spark's ``max_by`` picks any of them)."""
    values = _member_values(want)
    for name in ROW_SETS:
        g = sorted((dataclasses.astuple(r) for r in getattr(got, name)), key=repr)
        w = sorted((dataclasses.astuple(r) for r in getattr(want, name)), key=repr)
        if name == "imbalances":
            g = sorted((r[:-1] for r in g), key=repr)
            w = sorted((r[:-1] for r in w), key=repr)
        assert len(g) == len(w), f"{name}: {len(g)} rows, want {len(w)}"
        for a, b in zip(g, w, strict=True):
            assert len(a) == len(b) and all(_close(x, y, rel) for x, y in zip(a, b, strict=True)), (
                f"{name}: {a} != {b}"
            )
    for r in got.imbalances:
        member = values[(r.scope, r.measure, r.group, r.window_start_ms, r.max_member)]
        assert _close(member, r.max_value, rel), f"{r.max_member} does not carry the maximum of {r}"
