"""The ingest hot path on a captured real request log (tests/agent/fixtures/kafka-request.log,
400 consecutive lines of one broker of a local 3-broker Kafka 4.1.1 cluster under kafka-python
traffic; made by scripts/capture_request_log.py).

* every line parses, into the request types the broker served;
* the inline ingest loop (:func:`agent.requestlog.ingest.ingest_lines`) gives exactly what the
  general path (``WindowAggregator.add(LineParser.parse(line))`` line by line) gives — on the
  real lines, with malformed and late lines mixed in, at several thresholds and window sizes;
* window sketches are bucket for bucket the ones ``LatencySketch.add`` builds from the same
  values, and histogram buckets are a ``bisect`` over the fixed bounds.
"""

from __future__ import annotations

import bisect
from collections import Counter
from pathlib import Path

import pytest

from agent.health import Health
from agent.requestlog.ingest import ingest_lines
from agent.requestlog.parse import Drop, LineParser
from agent.requestlog.window import HISTOGRAM_BOUNDS_MS, ClosedWindow, WindowAggregator
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE, STAGES
from linkwatch.sketch import LatencySketch, exact_quantile
from tests.agent.test_parse import MALFORMED

FIXTURE = Path(__file__).parent / "fixtures" / "kafka-request.log"


@pytest.fixture(scope="module")
def lines() -> list[bytes]:
    return FIXTURE.read_bytes().splitlines()


def test_fixture_is_a_real_capture_with_the_main_request_types(lines: list[bytes]) -> None:
    parser = LineParser()
    kinds = Counter(parser.parse(line).request for line in lines)  # raises Drop on any bad line
    assert len(lines) >= 300
    for request in (PRODUCE, FETCH_CONSUMER, FETCH_FOLLOWER, "Metadata", "ApiVersions", "JoinGroup"):
        assert kinds[request] > 0, f"no {request} in {dict(kinds)}"
    assert kinds[PRODUCE] >= 50 and kinds[FETCH_CONSUMER] >= 50 and kinds[FETCH_FOLLOWER] >= 50


def reference(lines: list[bytes], agg: WindowAggregator, health: Health) -> list[ClosedWindow]:
    """The general path, line by line."""
    parser, closed = LineParser(), []
    for line in lines:
        health.lines_read += 1
        try:
            req = parser.parse(line)
        except Drop as d:
            if d.reason != "not_a_request_line" or line.strip():
                health.dropped[d.reason] += 1
            continue
        closed += agg.add(req)
    return closed + agg.close_all()


def snapshot(closed: list[ClosedWindow]) -> list[tuple]:
    return [
        (
            w.start_ms,
            [s.to_json() for s in w.sketches],
            [r.to_json() for r in w.slow_requests],
            w.slow_counts,
            w.histograms,
            w.busy,
            w.untracked_busy_us,
        )
        for w in closed
    ]


def mixed(lines: list[bytes]) -> list[bytes]:
    """The real lines with every malformed shape, blank lines and a late line mixed in."""
    out = list(lines)
    for k, (_, raw, _) in enumerate(MALFORMED):
        out.insert(7 + 23 * k, raw)
    out.insert(50, b"")
    out.append(lines[0])  # far in the past by now: late once its window closed
    return out


CASES = [
    ("real lines, defaults", False, {}),
    ("real lines, every request slow, 2 s windows", False, {"slow_threshold_ms": 0.0, "window_s": 2}),
    ("real lines, 1 ms threshold, 3 exemplars", False, {"slow_threshold_ms": 1.0, "max_exemplars": 3}),
    ("mixed with malformed and late lines", True, {"window_s": 1, "grace_s": 0.5, "slow_threshold_ms": 5.0}),
]


@pytest.mark.parametrize(("name", "with_bad", "options"), CASES, ids=[c[0] for c in CASES])
def test_inline_ingest_equals_the_general_path(
    lines: list[bytes], name: str, with_bad: bool, options: dict
) -> None:
    data = mixed(lines) if with_bad else lines
    late: list[tuple[str, str]] = []
    want_health, got_health = Health(), Health()
    want_agg = WindowAggregator(
        cluster="t", broker=2, on_late=lambda r: late.append(("want", r.request)), **options
    )
    got_agg = WindowAggregator(
        cluster="t", broker=2, on_late=lambda r: late.append(("got", r.request)), **options
    )
    want = reference(data, want_agg, want_health)
    # In uneven batches, as the follower hands them over.
    got: list[ClosedWindow] = []
    for i in range(0, len(data), 97):
        got += ingest_lines(data[i : i + 97], LineParser(), got_agg, got_health)
    got += got_agg.close_all()
    assert snapshot(got) == snapshot(want)
    assert got_health.lines_read == want_health.lines_read == len(data)
    assert got_health.dropped == want_health.dropped
    if with_bad:
        assert sum(got_health.dropped.values()) == len(MALFORMED) - 1  # "empty" is not counted
        assert Counter(w for w, _ in late) == {"want": 1, "got": 1}
    assert len(got) >= 2


def test_window_sketches_are_exact_ddsketch_buckets_and_histograms(lines: list[bytes]) -> None:
    parser = LineParser()
    agg = WindowAggregator(cluster="t", broker=2, window_s=2)
    closed = ingest_lines(lines, parser, agg, Health()) + agg.close_all()
    values: dict[tuple[int, str, str], list[float]] = {}
    for line in lines:
        req = parser.parse(line)
        start = req.ts_ms - req.ts_ms % 2000
        for stage, v in zip(STAGES, req.stages, strict=True):
            values.setdefault((start, req.request, stage), []).append(v)
    compared = 0
    for w in closed:
        for s in w.sketches:
            vs = values.pop((w.start_ms, s.request, s.stage))
            ref = LatencySketch()
            for v in vs:
                ref.add(v)
            want = ref.to_dict()
            assert (s.sketch["zero"], s.sketch["buckets"], s.sketch["count"]) == (
                want["zero"],
                want["buckets"],
                want["count"],
            ), (s.request, s.stage)
            assert s.sketch["sum"] == pytest.approx(sum(vs))
            assert (s.sketch["min"], s.sketch["max"]) == (min(vs), max(vs))
            hist, total = w.histograms[(s.request, s.stage)]
            assert hist == bucket_counts(vs) and total == pytest.approx(sum(vs))
            p99 = LatencySketch.from_dict(s.sketch).quantile(0.99)
            exact = exact_quantile(vs, 0.99)
            assert p99 == pytest.approx(exact, rel=0.01, abs=1e-3)
            compared += 1
    assert not values  # every (window, type, stage) of the lines came out
    assert compared >= 2 * 3 * len(STAGES)
    # Every sketch says how many its window has, so the analyzer knows when all have arrived.
    assert all(s.window_sketches == len(w.sketches) for w in closed for s in w.sketches)


def bucket_counts(vs: list[float]) -> list[int]:
    out = [0] * (len(HISTOGRAM_BOUNDS_MS) + 1)
    for v in vs:
        out[bisect.bisect_left(HISTOGRAM_BOUNDS_MS, v)] += 1
    return out


def test_aggregators_never_share_their_value_memo() -> None:
    # Agents run side by side in one process (the demo, tests): a memo shared between their
    # threads is cleared by one while another is between learning a key and reading it.
    a, b = WindowAggregator(cluster="t", broker=1), WindowAggregator(cluster="t", broker=2)
    assert a.memo is not b.memo


def distinct_values(lines: list[bytes], copies: int) -> list[bytes]:
    """The real lines again and again, each copy's stage times made distinct (``x.yyy`` with a
    copy-specific tail): enough distinct values to fill and clear a value memo many times."""
    import re

    stage = re.compile(
        rb'("(?:requestQueue|local|remote|throttle|responseQueue|send|total)TimeMs":)(\d+(?:\.\d+)?)'
    )
    out = []
    for c in range(copies):
        for i, line in enumerate(lines):
            tail = b"%03d" % ((c * 131 + i) % 1000)
            out.append(stage.sub(lambda m, t=tail: m.group(1) + m.group(2).split(b".")[0] + b"." + t, line))
    return out


def test_agents_in_threads_of_one_process_get_the_windows_they_get_alone(lines: list[bytes]) -> None:
    import threading

    data = distinct_values(lines, 60)
    alone = reference(data, WindowAggregator(cluster="t", broker=1), Health())
    results: dict[int, list[ClosedWindow]] = {}
    errors: list[BaseException] = []

    def run(broker: int) -> None:
        try:
            agg = WindowAggregator(cluster="t", broker=1)  # its own memo, as an agent's
            got: list[ClosedWindow] = []
            for i in range(0, len(data), 997):
                got += ingest_lines(data[i : i + 997], LineParser(), agg, Health())
            results[broker] = got + agg.close_all()
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(b,)) for b in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert [snapshot(results[b]) for b in (1, 2, 3)] == [snapshot(alone)] * 3
