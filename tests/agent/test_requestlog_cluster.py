"""The request-log source on real traffic from the 3-broker cluster."""

from __future__ import annotations

from agent.health import Health
from agent.requestlog.ingest import ingest_lines
from agent.requestlog.parse import LineParser
from agent.requestlog.window import ClosedWindow, WindowAggregator
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, STAGES, StageSketch, decode
from linkwatch.sketch import LatencySketch, exact_quantile
from tests.agent.conftest import Captured


def aggregate(broker: int, lines: list[bytes]) -> tuple[list[ClosedWindow], Health]:
    health = Health()
    agg = WindowAggregator(cluster="test", broker=broker, slow_threshold_ms=50.0, max_exemplars=5)
    closed = ingest_lines(lines, LineParser(), agg, health) + agg.close_all()
    return closed, health


def test_every_broker_reports_all_three_request_types_and_all_stages(captured: Captured) -> None:
    for broker, lines in captured.lines.items():
        closed, health = aggregate(broker, lines)
        assert not health.dropped, f"broker {broker} dropped real lines: {dict(health.dropped)}"
        seen = {(s.request, s.stage) for w in closed for s in w.sketches if s.sketch["count"] > 0}
        for request in (PRODUCE, FETCH_CONSUMER, FETCH_FOLLOWER):
            missing = [stage for stage in STAGES if (request, stage) not in seen]
            assert not missing, f"broker {broker} {request}: no {missing}"


def test_records_round_trip_through_the_schema(captured: Captured) -> None:
    closed, _ = aggregate(1, captured.lines[1])
    sketch = next(s for w in closed for s in w.sketches)
    again = decode(sketch.to_json())
    assert isinstance(again, StageSketch)
    assert again.dedup_key() == sketch.dedup_key()
    assert again.sketch == sketch.sketch


def test_window_p99_from_sketch_is_within_1_percent_of_exact(captured: Captured) -> None:
    parser = LineParser()
    compared = 0
    for broker, lines in captured.lines.items():
        closed, _ = aggregate(broker, lines)
        exact: dict[tuple[int, str, str], list[float]] = {}
        for line in lines:
            req = parser.parse(line)
            start = req.ts_ms - req.ts_ms % 10_000
            for stage, value in zip(STAGES, req.stages, strict=True):
                exact.setdefault((start, req.request, stage), []).append(value)
        for win in closed:
            for s in win.sketches:
                values = exact[(win.start_ms, s.request, s.stage)]
                assert s.sketch["count"] == len(values)
                want = exact_quantile(values, 0.99)
                got = LatencySketch.from_dict(s.sketch).quantile(0.99)
                assert got is not None
                assert abs(got - want) <= 0.01 * want + 1e-3, (broker, s.request, s.stage, got, want)
                compared += 1
    assert compared > 3 * 3 * 7  # at least every type x stage on every broker


def test_slow_exemplars_carry_client_partitions_and_stages(captured: Captured) -> None:
    # Threshold 0: every request is "slow", so the exemplar bound (5 per window) must hold.
    health = Health()
    agg = WindowAggregator(cluster="test", broker=1, slow_threshold_ms=0.0, max_exemplars=5)
    closed = ingest_lines(captured.lines[1], LineParser(), agg, health) + agg.close_all()
    assert all(len(w.slow_requests) <= 5 for w in closed)
    assert any(len(w.slow_requests) == 5 for w in closed)
    agg = WindowAggregator(cluster="test", broker=1, slow_threshold_ms=0.0, max_exemplars=100_000)
    closed = ingest_lines(captured.lines[1], LineParser(), agg, health) + agg.close_all()
    produce = [e for w in closed for e in w.slow_requests if e.request == PRODUCE]
    assert produce, "no Produce among the slowest requests"
    e = produce[0]
    assert e.client_id.startswith("kafka-python-producer")
    assert e.correlation_id >= 0
    assert set(e.stages_ms) == set(STAGES)
    assert {p["topic"] for p in e.partitions} == {captured.topic}
    assert sum(w.slow_counts.get(PRODUCE, 0) for w in closed) >= len(produce)
