"""The incremental window state without Spark: dedup, order independence, the memory bounds and
bad input. (Its equivalence with the Spark transforms is in
tests/aggregation/test_window_state_spark.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.window_state import WindowState
from analyzer.service import AnalyzerConfig, interval_ms
from linkwatch import records as R
from tests.aggregation.window_records import (
    CLUSTER,
    T0,
    WINDOW_S,
    assert_same_aggregates,
    exemplar,
    logdir,
    partition,
    probe,
    record_sets,
    stage,
)

WMS = WINDOW_S * 1000
PROPERTY = settings(max_examples=150, deadline=None, derandomize=True, database=None)


def fresh(horizon_ms: int = 10**9, max_records: int = 10_000) -> WindowState:
    return WindowState(CLUSTER, WINDOW_S, horizon_ms, max_records)


def test_a_resent_record_counts_once() -> None:
    rec = stage(1, T0 + 10, [5.0, 7.0, 9.0])
    state = fresh()
    state.add([rec, rec])
    state.add_json([rec.to_json()])
    [row] = state.aggregates().broker_stages
    assert (row.count, state.duplicates, state.records) == (3, 2, 1)


def test_sketches_of_one_window_merge_and_the_cluster_row_sums_brokers() -> None:
    state = fresh()
    state.add([stage(1, T0, [1.0] * 10), stage(1, T0 + 500, [100.0] * 10), stage(2, T0 + 1, [50.0] * 5)])
    data = state.aggregates()
    counts = {(r.broker, r.window_start_ms): r.count for r in data.broker_stages}
    assert counts == {(1, T0): 20, (2, T0): 5}
    [cluster] = data.cluster_stages
    assert (cluster.broker, cluster.count) == (None, 25)
    assert cluster.p99_ms == pytest.approx(100.0, rel=0.01)
    assert cluster.mean_ms == pytest.approx((10 * 1.0 + 10 * 100.0 + 5 * 50.0) / 25)


def test_saturated_connections_are_carried_per_broker_and_summed_for_the_cluster() -> None:
    """A slow disk under pipelining producers: broker 3 serves three of its six connections back
    to back, its peers none; an older agent (no figures) reads 0."""
    state = fresh()
    state.add(
        [
            stage(1, T0, [2.0] * 10, connections=7),
            stage(2, T0 + 1, [2.0] * 10),
            stage(3, T0 + 2, [200.0] * 10, connections=6, saturated_connections=3),
            stage(3, T0 + 3, [200.0] * 10, stage="local"),
        ]
    )
    data = state.aggregates()
    got = {(r.broker, r.stage): (r.connections, r.saturated_connections) for r in data.broker_stages}
    assert got == {(1, "total"): (7, 0), (2, "total"): (0, 0), (3, "total"): (6, 3), (3, "local"): (0, 0)}
    cluster = {r.stage: (r.connections, r.saturated_connections) for r in data.cluster_stages}
    assert cluster == {"total": (13, 3), "local": (0, 0)}


def test_the_nonzero_p99_reads_the_values_above_zero_alone() -> None:
    """Produce's remote as acks=1 and acks=all requests mix it: 90 % never wait (0), the rest
    wait on a stalled follower. The p99 of all hides them; the nonzero p99 is their wait."""
    state = fresh()
    waits = [2.0] * 95 + [400.0] * 5
    state.add([stage(1, T0, [0.0] * 900 + waits), stage(2, T0, [0.0] * 10)])
    rows = {r.broker: r for r in state.aggregates().broker_stages}
    assert rows[1].p99_ms == pytest.approx(2.0, rel=0.01)
    assert rows[1].nonzero_p99_ms == pytest.approx(400.0, rel=0.01)
    assert (rows[2].p99_ms, rows[2].nonzero_p99_ms) == (0.0, None)  # nothing waited
    [cluster] = state.aggregates().cluster_stages
    assert cluster.nonzero_p99_ms == pytest.approx(400.0, rel=0.01)


def test_sampled_sketches_count_the_requests_they_logged() -> None:
    """A sampled window's counts are estimates (scaled by the agent); ``logged`` is the sample
    its quantiles rest on, summed over the merged sketches and the brokers."""
    state = fresh()
    state.add(
        [
            stage(1, T0, [5.0] * 24, capture_ratio=0.25),  # 6 logged, scaled by 4
            stage(1, T0 + 500, [7.0] * 10),  # a full capture: 10 logged
            stage(2, T0 + 1, [9.0] * 12, capture_ratio=1 / 6),  # 2 logged
        ]
    )
    data = state.aggregates()
    rows = {r.broker: (r.count, r.logged) for r in data.broker_stages}
    assert rows == {1: (34, 16), 2: (12, 2)}
    [cluster] = data.cluster_stages
    assert (cluster.count, cluster.logged) == (46, 18)
    # A record built in code skips decode's range check; the state still drops it.
    bad = stage(3, T0, [1.0], capture_ratio=0.0)
    state.add([bad])
    assert state.dropped["bad_value"] == 1 and 3 not in {r.broker for r in state.aggregates().broker_stages}


@PROPERTY
@given(record_sets())
def test_order_and_resends_do_not_change_the_aggregates(sets) -> None:
    distinct, sent = sets
    once, streamed = fresh(), fresh()
    once.add(distinct)
    for i in range(0, len(sent), 3):  # micro-batches of three
        streamed.add(sent[i : i + 3])
    assert_same_aggregates(streamed.aggregates(), once.aggregates())
    assert streamed.duplicates == len(sent) - len(distinct)


@PROPERTY
@given(record_sets())
def test_evaluating_between_batches_gives_what_one_evaluation_at_the_end_gives(sets) -> None:
    """Each window keeps its stage rows until a sketch merged into it changes them: evaluating
    after every micro-batch (late sketches landing in windows already evaluated) must end
    where one evaluation of everything at once does."""
    distinct, sent = sets
    once, streamed = fresh(), fresh()
    once.add(distinct)
    for i in range(0, len(sent), 3):
        streamed.add(sent[i : i + 3])
        streamed.aggregates()
    assert_same_aggregates(streamed.aggregates(), once.aggregates())


def test_a_late_sketch_changes_its_windows_rows_after_they_were_evaluated() -> None:
    state = fresh()
    state.add([stage(1, T0, [5.0] * 10), stage(1, T0 + WMS, [5.0] * 10)])
    first = {r.window_start_ms: r.count for r in state.aggregates().broker_stages}
    state.add([stage(2, T0 + 10, [400.0] * 10)])  # late, into the first window
    rows = state.aggregates()
    assert first == {T0: 10, T0 + WMS: 10}
    assert {(r.broker, r.window_start_ms): r.count for r in rows.broker_stages} == {
        (1, T0): 10,
        (2, T0): 10,
        (1, T0 + WMS): 10,
    }
    cluster = {r.window_start_ms: r for r in rows.cluster_stages}
    assert cluster[T0].count == 20 and cluster[T0].p99_ms == pytest.approx(400.0, rel=0.01)
    assert cluster[T0 + WMS].count == 10


def test_windows_overlapping_the_range_are_evaluated_whole() -> None:
    state = fresh()
    state.add([stage(1, T0 + i * WMS + 100, [1.0]) for i in range(5)])
    # since falls inside window 1, now at the start of window 4: windows 1, 2, 3.
    data = state.aggregates(now_ms=T0 + 4 * WMS, since_ms=T0 + WMS + 500)
    assert sorted(r.window_start_ms for r in data.broker_stages) == [T0 + i * WMS for i in (1, 2, 3)]


def test_windows_past_the_horizon_expire_and_late_records_are_counted_drops() -> None:
    state = fresh(horizon_ms=3 * WMS)
    for i in range(10):
        state.add([stage(1, T0 + i * WMS, [1.0])], now_ms=T0 + (i + 1) * WMS)
        assert state.window_starts[0] + WMS > T0 + (i + 1) * WMS - 3 * WMS
    assert len(state.window_starts) == 3
    assert state.expired == 7
    state.add([stage(2, T0, [1.0])])
    assert state.dropped["too_old"] == 1
    assert state.records == 3


def test_the_record_cap_evicts_the_oldest_window_and_counts_it() -> None:
    state = fresh(max_records=4)
    state.add([stage(b, T0 + w * WMS, [1.0]) for w in range(3) for b in (1, 2)])
    assert state.records == 4
    assert state.window_starts == [T0 + WMS, T0 + 2 * WMS]
    assert state.dropped["state_full"] == 2
    # One window larger than the cap: what does not fit is dropped and counted, never raised.
    state.add([stage(b, T0 + 3 * WMS, [1.0]) for b in range(1, 7)])
    assert state.records <= 4
    assert state.dropped["state_full"] == 2 + 4 + 2
    assert state.window_starts == [T0 + 3 * WMS]


@PROPERTY
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 4), st.integers(0, 3)), max_size=120),
    st.integers(1, 25),
    st.integers(0, 8),
)
def test_state_stays_within_its_bounds_and_accounts_for_every_record(steps, cap, horizon_windows) -> None:
    state = fresh(horizon_ms=horizon_windows * WMS, max_records=cap)
    now = T0
    distinct = set()
    for window, broker, lateness in steps:
        ts = T0 + window * WMS + 7
        now = max(now, ts + lateness * WMS)
        rec = stage(broker, ts, [1.0])
        distinct.add(rec.dedup_key())
        state.add([rec], now_ms=now)
        assert state.records <= cap
        assert all(s + WMS > now - horizon_windows * WMS for s in state.window_starts)
    lost = state.dropped["too_old"] + state.dropped["state_full"]
    assert state.records + state.expired + lost + state.duplicates >= len(distinct)
    assert state.records + state.expired + lost == len(steps) - state.duplicates


# --- only complete windows are evaluated -----------------------------------------------------

SETTLE = 3 * WMS


def _sizes(w: int, cells: list[tuple[int, int]], size: int = 1000) -> list[R.PartitionSize]:
    """Window ``w``'s readings of (partition, broker) replicas of topic "z" (growing with w)."""
    return [partition("z", p, b, T0 + w * WMS + 10 * p + b, size * (w + 1) * (p + 1), None) for p, b in cells]


ALL = [(p, b) for p in range(6) for b in (1, 2, 3)]  # 6 partitions × 3 replicas


def _released(recs: list[R.Record], now: int) -> dict[str, list[int]]:
    """Window offsets (0, 1, …) whose rows an evaluation at ``now`` sees, per kind."""
    state = WindowState(CLUSTER, WINDOW_S, horizon_ms=10**9, settle_ms=SETTLE)
    state.add(recs)
    data = state.aggregates(now_ms=now)
    offsets = lambda rows: sorted({(r.window_start_ms - T0) // WMS for r in rows})  # noqa: E731
    return {
        "stages": offsets(data.broker_stages),
        "partitions": offsets(data.partitions),
        "logdirs": offsets(data.logdirs),
        "clients": offsets(data.client_windows),
        "probes": offsets(data.probes),
    }


SK3 = ("requestQueue", "remote", "total")  # a window's three sketches per broker
# (records, evaluation time as window offset + ms) -> windows released per kind
COMPLETENESS = {
    "every replica reported: the newest window is evaluated at once": (
        _sizes(0, ALL) + _sizes(1, ALL),
        2 * WMS + 1,
        {"partitions": [0, 1]},
    ),
    # The live run's failure: the newest window read with 2 of its 6 partitions named none hot.
    "newest window with 2 of 6 partitions: held": (
        _sizes(0, ALL) + _sizes(1, [c for c in ALL if c[0] in (4, 5)]),
        2 * WMS + 1,
        {"partitions": [0]},
    ),
    "one replica of one partition missing: held": (
        _sizes(0, ALL) + _sizes(1, ALL[:-1]),
        2 * WMS + 1,
        {"partitions": [0]},
    ),
    "an incomplete window is evaluated once it ended settle_ms ago": (
        _sizes(0, ALL) + _sizes(1, ALL[:2]),
        2 * WMS + SETTLE,
        {"partitions": [0, 1]},
    ),
    "a complete window waits behind an incomplete older one": (
        _sizes(0, ALL) + _sizes(1, ALL[:2]) + _sizes(2, ALL[:2]),
        3 * WMS + 1,
        {"partitions": [0]},
    ),
    "a new replica does not hold a window; a window without any reading holds nothing": (
        _sizes(0, ALL[:3]) + _sizes(2, ALL),
        3 * WMS + 1,
        {"partitions": [0, 2]},
    ),
    "stage sketches: a broker that reported before is missing": (
        [stage(b, T0 + w * WMS, [1.0]) for w in (0, 1) for b in (1, 2, 3)] + [stage(1, T0 + 2 * WMS, [1.0])],
        3 * WMS + 1,
        {"stages": [0, 1]},
    ),
    "stage sketches: another request type or stage missing does not hold the window": (
        [stage(b, T0, [1.0], request="FetchConsumer") for b in (1, 2)]
        + [stage(b, T0 + WMS, [1.0], stage="local") for b in (1, 2)],
        2 * WMS + 1,
        {"stages": [0, 1]},
    ),
    # Run 22's paused brokers: a window's sketches spread over the samples topic's partitions,
    # those led by a paused broker late; the first evaluation that held the window read it
    # half-filled and found nothing, the next one (5 s later) found the slow broker.
    "stage sketches: a broker's agent sent 3, 2 are here: held": (
        [
            stage(b, T0 + w * WMS, [1.0], stage=s, window_sketches=3)
            for w in (0, 1)
            for b in (1, 2)
            for s in SK3
        ]
        + [
            stage(b, T0 + 2 * WMS, [1.0], stage=s, window_sketches=3)
            for b in (1, 2)
            for s in SK3[: 3 - b // 2]
        ],
        3 * WMS + 1,
        {"stages": [0, 1]},
    ),
    "stage sketches: every one its agent sent is here: evaluated at once": (
        [
            stage(b, T0 + w * WMS, [1.0], stage=s, window_sketches=3)
            for w in (0, 1, 2)
            for b in (1, 2)
            for s in SK3
        ],
        3 * WMS + 1,
        {"stages": [0, 1, 2]},
    ),
    "stage sketches: short of its count, evaluated once it ended settle_ms ago": (
        [
            stage(b, T0 + w * WMS, [1.0], stage=s, window_sketches=3)
            for w in (0, 1)
            for b in (1, 2)
            for s in SK3[:2]
        ],
        2 * WMS + SETTLE,
        {"stages": [0, 1]},
    ),
    "log dirs: one of a broker's two dirs missing": (
        [logdir(1, d, T0 + w * WMS, 100, 10, None) for w in (0, 1) for d in ("/a", "/b")]
        + [logdir(1, "/a", T0 + 2 * WMS, 100, 10, None)],
        3 * WMS + 1,
        {"logdirs": [0, 1]},
    ),
    "kinds are judged apart; exemplars and probes are never held": (
        _sizes(0, ALL)
        + _sizes(1, ALL[:1])
        + [stage(1, T0 + w * WMS, [1.0]) for w in (0, 1)]
        + [exemplar(1, T0 + WMS + 5, "app", 900.0, 0.0), probe(2, T0 + WMS + 6, [3.0], [5.0])],
        2 * WMS + 1,
        {"stages": [0, 1], "partitions": [0], "clients": [1], "probes": [1]},
    ),
}


@pytest.mark.parametrize(("recs", "at", "want"), COMPLETENESS.values(), ids=COMPLETENESS.keys())
def test_only_complete_windows_are_evaluated(recs: list[R.Record], at: int, want: dict) -> None:
    got = _released(recs, T0 + at)
    assert {k: v for k, v in got.items() if v} == want


def test_a_held_window_is_released_when_its_missing_readings_arrive() -> None:
    state = WindowState(CLUSTER, WINDOW_S, horizon_ms=10**9, settle_ms=SETTLE)
    state.add(_sizes(0, ALL) + _sizes(1, ALL[:4]))
    now = T0 + 2 * WMS + 1
    assert state.pending(now) == {"stages": [], "partitions": [T0 + WMS], "logdirs": []}
    state.add(_sizes(1, ALL[4:]))
    assert state.pending(now)["partitions"] == []
    rows = [r for r in state.aggregates(now_ms=now).partitions if r.window_start_ms == T0 + WMS]
    assert sorted(r.partition for r in rows) == list(range(6))
    # Traffic is read between complete windows only: partition p grew by 1000·(p+1) bytes in 2 s.
    assert {r.partition: r.bytes_in_per_s for r in rows} == {p: 500.0 * (p + 1) for p in range(6)}


@PROPERTY
@given(record_sets(), st.integers(0, 8 * WMS))
def test_held_windows_are_a_suffix_and_never_change_released_rows(sets, at: int) -> None:
    """Whatever the records and the time, an evaluation sees the same rows as the full state
    for every window it releases, and holds only windows after the ones it releases."""
    _distinct, sent = sets
    state = WindowState(CLUSTER, WINDOW_S, horizon_ms=10**9, settle_ms=SETTLE)
    state.add(sent)
    now = T0 + at
    held = state.pending(now)
    full = state.aggregates()
    data = state.aggregates(now_ms=now)
    for kind, rows, all_rows in (
        ("stages", data.broker_stages, full.broker_stages),
        ("logdirs", data.logdirs, full.logdirs),
    ):
        first_held = min(held[kind], default=None)
        want = [
            r
            for r in all_rows
            if r.window_start_ms < now and (first_held is None or r.window_start_ms < first_held)
        ]
        assert sorted(map(repr, rows)) == sorted(map(repr, want)), kind
        assert all(w + WMS + SETTLE > now for w in held[kind])


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"{not json", "not_json"),
        (b"[1, 2]", "not_object"),
        (b'{"v": 0, "kind": "stage_sketch"}', "bad_version"),
        (b'{"v": 99, "kind": "stage_sketch"}', "future_version"),
        (b'{"v": 1, "kind": "nope"}', "unknown_kind"),
        (b'{"v": 1, "kind": "stage_sketch", "cluster": "c1"}', "missing_field"),
        (
            stage(1, T0, [1.0]).to_json().replace(b'"buckets":{', b'"buckets":{"x":1,'),
            "bad_sketch",
        ),
        (stage(1, T0, [1.0]).to_json().replace(b'"capture_ratio":1.0', b'"capture_ratio":2.0'), "bad_value"),
    ],
)
def test_bad_input_is_a_counted_drop(raw: bytes, reason: str) -> None:
    state = fresh()
    state.add_json([raw, stage(2, T0, [3.0]).to_json()])
    assert dict(state.dropped) == {reason: 1}
    assert [r.broker for r in state.aggregates().broker_stages] == [2]


def test_other_clusters_and_kinds_are_skipped_and_counted() -> None:
    other = R.StageSketch(**{**stage(1, T0, [1.0]).__dict__, "cluster": "c2"})
    host = R.HostStats(
        cluster=CLUSTER,
        source="b",
        ts_ms=T0,
        broker=1,
        window_s=2,
        cpu_percent=1.0,
        page_cache_bytes=0,
        disk_write_bytes_per_s=0.0,
        disk_read_bytes_per_s=0.0,
        net_rx_bytes_per_s=0.0,
        net_tx_bytes_per_s=0.0,
    )
    state = fresh()
    state.add([other, host, partition("a", 0, 1, T0, 10, 1), logdir(1, "/d", T0, 100, 50, None)])
    assert dict(state.skipped) == {"other_cluster": 1, "host": 1}
    assert state.records == 2


def test_interval_parsing_for_the_horizon() -> None:
    assert interval_ms("2 minutes") == 120_000
    assert interval_ms("1 minute 30 seconds") == 90_000
    with pytest.raises(ValueError, match="'soon': expected"):
        interval_ms("soon")
    cfg = AnalyzerConfig(window_s=2, lookback_windows=90, watermark="60 seconds")
    assert cfg.state_horizon_ms == 2000 * 91 + 60_000
    assert cfg.evaluation == "incremental"


def test_the_service_exports_the_state_size_and_its_drops() -> None:
    from analyzer.base import InMemorySink
    from analyzer.service import AnalysisService

    service = AnalysisService(AnalyzerConfig(cluster=CLUSTER, window_s=WINDOW_S), sinks=[InMemorySink()])
    service.state = fresh()
    rec = stage(1, T0, [1.0])
    service.state.add_json([rec.to_json(), rec.to_json(), b"{bad"])
    reg = service.metrics.registry
    assert reg.get_sample_value("linkwatch_analyzer_window_state_records") == 1
    assert reg.get_sample_value("linkwatch_analyzer_window_state_dropped_total", {"reason": "not_json"}) == 1
    assert reg.get_sample_value("linkwatch_analyzer_window_state_dropped_total", {"reason": "duplicate"}) == 1
    assert reg.get_sample_value("linkwatch_analyzer_window_state_expired_total") == 0


class _StoppedQuery:
    """Stands in for a Spark query that failed (what the service reads of it: two calls)."""

    isActive = False

    def exception(self) -> str:
        return "WindowBatchError: window micro-batch 7 failed: Py4JJavaError"


def test_a_failed_window_stream_is_started_again_but_not_while_stopping() -> None:
    from analyzer.base import InMemorySink
    from analyzer.service import AnalysisService

    cfg = AnalyzerConfig(cluster=CLUSTER, window_s=WINDOW_S, evaluation="incremental")
    service = AnalysisService(cfg, sinks=[InMemorySink()])
    service.state = fresh()
    service.window_query = _StoppedQuery()
    restarted = []
    service._start_state = restarted.append  # the real one needs Spark and Kafka
    service.tick(T0)
    assert len(restarted) == 1 and service.window_restarts == 1
    reg = service.metrics.registry
    assert reg.get_sample_value("linkwatch_analyzer_window_stream_restarts_total") == 1
    service._stopping.set()
    service.tick(T0 + WMS)
    assert len(restarted) == 1


class _CatchingUpFeed:
    """Stands in for a driver feed still reading the samples up to where it started (what the
    service reads of it: ``isActive``, ``caught_up``, ``behind``)."""

    isActive = True

    def __init__(self) -> None:
        import threading

        self.caught_up = threading.Event()
        self.behind = [2]


def test_the_state_is_not_judged_until_the_feed_has_caught_up(caplog) -> None:
    """A state that holds some partitions' samples and not yet others' would judge their
    brokers on part of their windows: evaluation waits for the feed, then runs; a feed still
    behind after FEED_CATCH_UP_MAX_S is judged anyway, with one warning naming the partitions."""
    import logging
    import time

    import analyzer.service as svc
    from analyzer.base import InMemorySink

    caplog.set_level(logging.INFO, logger="analyzer.service")
    cfg = AnalyzerConfig(cluster=CLUSTER, window_s=WINDOW_S, evaluation="incremental")
    service = svc.AnalysisService(cfg, sinks=[InMemorySink()])
    service.state = fresh()
    service.state.add([stage(b, T0 + 1_000, [1.0]) for b in (1, 2, 3)])
    feed = service.window_query = _CatchingUpFeed()
    service._feed_started = time.monotonic()
    for i in range(3):
        service.tick(T0 + WMS * (3 + i))
        assert service.last is None, "judged while the feed was behind"
    assert [r.levelname for r in caplog.records if "waits for the window feed" in r.getMessage()] == ["INFO"]
    feed.caught_up.set()
    service.tick(T0 + WMS * 6)
    assert service.last is not None and {s.broker for s in service.last.broker_stages} == {1, 2, 3}

    service.last = None
    feed.caught_up.clear()  # a new feed (the old one failed), this one stuck behind partition 2
    service._feed_started = time.monotonic() - svc.FEED_CATCH_UP_MAX_S
    service.tick(T0 + WMS * 7)
    service.tick(T0 + WMS * 8)
    assert service.last is not None
    late = [r for r in caplog.records if r.levelname == "WARNING" and "partitions [2]" in r.getMessage()]
    assert len(late) == 1, caplog.text


def test_complete_stage_windows_wake_the_evaluation_once_per_window() -> None:
    """A micro-batch that completes a newer window (every broker's sketches in) wakes the
    service's wait at once; an incomplete or repeated window does not."""
    import threading
    import time

    from analyzer.base import InMemorySink
    from analyzer.service import AnalysisService

    cfg = AnalyzerConfig(cluster=CLUSTER, window_s=WINDOW_S, interval_s=30.0)
    service = AnalysisService(cfg, sinks=[InMemorySink()])
    service.state = WindowState(CLUSTER, WINDOW_S, horizon_ms=10**9, settle_ms=SETTLE)
    clock = [(T0 + 2 * WMS + 1) / 1000]
    service.clock = lambda: clock[0]
    sketches = [stage(b, T0 + w * WMS, [1.0]).to_json() for w in (0, 1) for b in (1, 2, 3)]
    service._on_batch(sketches[:3] + sketches[3:5])  # window 0 complete; window 1 lacks broker 3
    assert service.state.complete_stages_through(T0 + 2 * WMS + 1) == T0
    stop = threading.Event()
    started = time.monotonic()
    service.wait_next(stop, started)  # window 0 completed: no wait
    assert time.monotonic() - started < 1.0
    service._on_batch(sketches[:1])  # nothing newer completed: the wait runs until stopped
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    service.wait_next(stop, started)
    assert 0.4 < time.monotonic() - started < 5.0
    stop.clear()
    service._on_batch(sketches[5:])  # broker 3's window 1: window 1 complete
    assert service.state.complete_stages_through(T0 + 2 * WMS + 1) == T0 + WMS
    started = time.monotonic()
    service.wait_next(stop, started)
    assert time.monotonic() - started < 1.0
