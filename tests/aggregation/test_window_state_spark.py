"""The incremental window state gives the Spark transforms' aggregates, and a restarted
service rebuilt from the archive gives the aggregates it had before the restart."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aggregation.window_state import WindowState
from analyzer.base import InMemorySink
from analyzer.service import AnalysisService, AnalyzerConfig, AnalyzerMetricsConfig
from linkwatch import records as R
from linkwatch.aggregates import Aggregates
from spark_metrics.aggregate import aggregate, collect
from spark_metrics.batch import write_archive
from tests.aggregation.window_records import (
    CLUSTER,
    ROW_SETS,
    SCENARIOS,
    T0,
    WINDOW_S,
    WMS,
    assert_same_aggregates,
    logdir,
    partition,
    record_sets,
    stage,
)
from tests.spark_metrics.conftest import raw_frame

pytestmark = pytest.mark.minutes(3)


def batch_path(spark, recs):
    return collect(aggregate(raw_frame(spark, recs), WINDOW_S, cluster=CLUSTER), CLUSTER, WINDOW_S)


def incremental(recs) -> WindowState:
    state = WindowState(CLUSTER, WINDOW_S, horizon_ms=10**9)
    state.add(recs)
    return state


# A Spark job's fixed cost is most of its time; so several independent record sets are checked
# in one job, each moved to its own time span and its own topics (``apart``). No aggregate spans
# two sets: every window, partition rate, log dir, exemplar group, probe and imbalance is keyed
# by a window, a topic or both.
SET_SPAN_MS = 100 * WMS  # far past a set's own windows (record_sets draws six, SCENARIOS five)


def apart(recs: list[R.Record], k: int) -> list[R.Record]:
    """Set ``k`` of an example: every timestamp SET_SPAN_MS * k later, every partition's topic renamed
    for it."""

    def move(r: R.Record) -> R.Record:
        shift = {"ts_ms": r.ts_ms + k * SET_SPAN_MS}
        if isinstance(r, R.PartitionSize):
            shift |= {"topic": f"{r.topic}-{k}", "newest_segment_ms": r.newest_segment_ms + k * SET_SPAN_MS}
        return dataclasses.replace(r, **shift)

    return [move(r) for r in recs]


def only_set(data: Aggregates, k: int) -> Aggregates:
    """The rows of set ``k`` (see ``apart``): those whose window lies in its time span."""
    lo = T0 + k * SET_SPAN_MS

    def keep(rows):
        return [r for r in rows if lo <= r.window_start_ms < lo + SET_SPAN_MS]

    return dataclasses.replace(data, **{name: keep(getattr(data, name)) for name in ROW_SETS})


def resent(recs: list[R.Record]) -> list[R.Record]:
    """The scenario as the stream may deliver it: out of order, its first record twice."""
    return [*reversed(recs), recs[0]]


@pytest.fixture(scope="module")
def scenarios_batch(spark) -> Aggregates:
    """The batch path over every scenario at once, scenario ``k`` as set ``k``: one Spark job
    where a job per scenario cost 8-10 s each."""
    data = batch_path(spark, [r for k, recs in enumerate(SCENARIOS.values()) for r in apart(resent(recs), k)])
    # Every row belongs to one scenario's span: the slices together are the whole output.
    sliced = [only_set(data, k) for k in range(len(SCENARIOS))]
    for name in ROW_SETS:
        assert sum(len(getattr(d, name)) for d in sliced) == len(getattr(data, name)), name
    return data


@pytest.mark.parametrize(("k", "recs"), list(enumerate(SCENARIOS.values())), ids=list(SCENARIOS))
def test_incremental_state_equals_the_batch_transforms(scenarios_batch: Aggregates, k: int, recs) -> None:
    sent = apart(resent(recs), k)
    assert_same_aggregates(incremental(sent).aggregates(), only_set(scenarios_batch, k))


# One example holds SETS_PER_EXAMPLE record sets, checked in one job (``apart``). Hypothesis
# tries the simplest example first (every set empty), so two examples of 12 draw as many
# random sets as four of four did, in two jobs instead of four (a job's fixed cost was most of
# the 48 s those four took in a one-worker run).
SETS_PER_EXAMPLE = 12


@settings(max_examples=2, deadline=None, derandomize=True, database=None)
@given(st.lists(record_sets(), min_size=SETS_PER_EXAMPLE, max_size=SETS_PER_EXAMPLE))
def test_incremental_equals_batch_on_random_record_sets(spark, sets) -> None:
    sent = [r for k, (_distinct, recs) in enumerate(sets) for r in apart(recs, k)]
    assert_same_aggregates(incremental(sent).aggregates(), batch_path(spark, sent))


def _service(state_dir: Path, evaluation: str, now_ms: int) -> AnalysisService:
    cfg = AnalyzerConfig(
        cluster=CLUSTER,
        window_s=WINDOW_S,
        lookback_windows=4,
        watermark="4 seconds",
        max_event_lead="2 seconds",
        state_dir=state_dir,
        evaluation=evaluation,
        publish_findings=False,
        metrics=AnalyzerMetricsConfig(enabled=False),
    )
    return AnalysisService(cfg, sinks=[InMemorySink()], clock=lambda: now_ms / 1000)


def test_a_restarted_service_rebuilds_the_same_aggregates_from_the_archive(spark, tmp_path: Path) -> None:
    """Before the restart the state was fed micro-batch by micro-batch (with re-sends); the
    archive holds what the stream wrote (re-sends included, as the file sink keeps those that
    arrive beyond the watermark). After it, the state is rebuilt from the archive alone."""
    recs = [
        r
        for w in range(8)
        for r in (
            stage(1, T0 + w * WMS + 3, [float(1 + w)] * 30),
            stage(2, T0 + w * WMS + 4, [5.0] * 20 + [900.0]),
            partition("a", 0, 1, T0 + w * WMS + 5, 1000 * w, 10 * w),
            logdir(1, "/d1", T0 + w * WMS + 6, 10_000, 100 * w, 0.2),
        )
    ]
    write_archive(spark, [r.to_json().decode() for r in recs + recs[:5]], tmp_path / "archive")
    now = T0 + 8 * WMS
    before = _service(tmp_path, "incremental", now)
    before.state = WindowState(CLUSTER, WINDOW_S, before.cfg.state_horizon_ms)
    for i in range(0, len(recs), 4):
        before._on_batch([r.to_json().decode() for r in recs[i : i + 6]])  # overlapping batches
    before.tick(now)

    after = _service(tmp_path, "incremental", now)
    after.spark = spark
    after.state = after.rebuild_state(now)
    after.tick(now)
    assert len(before.last.broker_stages) == 2 * 5  # the lookback's windows, each once
    assert_same_aggregates(after.last, before.last)

    # The re-read path over the same archive agrees too (``now`` on a window boundary, so it
    # does not cut a window).
    reread = _service(tmp_path, "reread", now)
    reread.spark = spark
    reread.tick(now)
    assert_same_aggregates(reread.last, before.last)
