"""The report says what it read and draws it honestly: windows, brokers and gaps stated; "no
findings" apart from "no data"; lines broken at gaps, not ramped across them; a consumer
fetch's long poll and internal topics out of the charts that judge; each slow broker's stage
breakdown against its peers."""

from __future__ import annotations

import json

import pytest

from analyzer.report import (
    ReadSummary,
    evaluate_range,
    imbalance_chart,
    internal_topic,
    read_lines,
    render_html,
    render_json,
    render_table,
    summarize,
    verdict,
    with_gaps,
)
from analyzer.slow_broker import SlowBrokerDetector
from linkwatch.aggregates import Aggregates, ImbalanceWindow
from tests.analyzer.test_slow_broker import T0, now_after, scenario, slow_in, window

STEP = 10_000


def _imbalance(topic: str, i: int, ratio: float) -> ImbalanceWindow:
    return ImbalanceWindow(
        scope="topic",
        measure="bytes_in",
        group=topic,
        window_start_ms=window(i),
        members=6,
        max_value=ratio + 1,
        avg_value=1.0,
        ratio=ratio,
        max_member="0",
    )


def _absent(windows) -> dict[int, dict]:
    return {i: {"absent": True} for i in windows}


@pytest.mark.parametrize(
    ("name", "special", "windows", "gaps", "broker_gaps"),
    [
        ("all there", {}, 12, [], {}),
        # every broker silent in windows 4-6: one gap of three windows
        ("cluster gap", {b: _absent(range(4, 7)) for b in range(3)}, 9, [(window(4), window(7))], {}),
        # broker 1 silent in 5-6 while the others report; silent at the start is not a gap of its own
        ("broker gap", {1: _absent([0, 5, 6])}, 12, [], {1: [(window(5), window(7))]}),
    ],
)
def test_summary_counts_windows_brokers_and_gaps(name, special, windows, gaps, broker_gaps) -> None:
    read = summarize(scenario(12, 3, special), T0, now_after(12))
    assert (read.windows, read.windows_with_data, read.brokers) == (12, windows, [0, 1, 2])
    assert read.gaps == gaps and read.broker_gaps == broker_gaps


def test_no_data_is_not_no_findings() -> None:
    empty = evaluate_range([SlowBrokerDetector()], Aggregates(cluster="c1", window_s=10), T0, now_after(12))
    quiet = evaluate_range([SlowBrokerDetector()], scenario(12, 3, {}), T0, now_after(12))
    assert verdict(empty).startswith("NO DATA") and empty.read is not None and empty.read.no_data
    assert (
        verdict(quiet) == "No findings: the data read in 12 windows from 3 broker(s) made no detector fire."
    )
    assert "NO DATA" in render_table(empty) and "No findings" in render_table(quiet)
    assert json.loads(render_json(empty))["read"]["windows_with_data"] == 0
    assert "class='verdict nodata'" in render_html(empty) and "class='verdict'" in render_html(quiet)


def test_what_was_read_is_said_in_every_format() -> None:
    data = scenario(12, 3, {1: _absent([5, 6]), **{b: _absent(range(9, 12)) for b in (0, 2)}})
    data = Aggregates(cluster="c1", window_s=10, broker_stages=data.broker_stages)
    report = evaluate_range([SlowBrokerDetector()], data, T0, now_after(12))
    assert report.read is not None
    report.read.samples, report.read.skipped = {"stage_sketch": 420}, {"other_cluster": 7, "not_json": 1}
    lines = read_lines(report)
    assert lines[:4] == [
        "Samples read: 420 (stage_sketch 420).",
        "Samples skipped: 8 (other_cluster 7, not_json 1).",
        "Brokers: 0, 1, 2.",
        "Windows of 10 s: 12 of 12 had data.",
    ]
    assert lines[4].startswith("Broker 1 missed") and "(2 windows) while others reported" in lines[4]
    doc = json.loads(render_json(report))
    assert doc["read"]["skipped"] == {"other_cluster": 7, "not_json": 1}
    assert doc["read"]["broker_gaps"] == {"1": [[window(5), window(7)]]}
    for text in (render_table(report), render_html(report)):
        assert "Samples skipped: 8" in text and "Broker 1 missed" in text


@pytest.mark.parametrize(
    ("points", "expected"),
    [
        # consecutive windows: joined
        ([(0, 1.0), (STEP, 2.0)], [(0, 1.0), (STEP, 2.0)]),
        # two windows missing: one None right after the last point before the gap
        ([(0, 40.0), (3 * STEP, 728.0)], [(0, 40.0), (STEP, None), (3 * STEP, 728.0)]),
        # unsorted in, sorted out; a None already there is not doubled
        (
            [(3 * STEP, 5.0), (0, None), (STEP, 1.0)],
            [(0, None), (STEP, 1.0), (2 * STEP, None), (3 * STEP, 5.0)],
        ),
    ],
)
def test_lines_break_at_gaps(points, expected) -> None:
    assert with_gaps(points, STEP) == expected


def test_a_gap_is_drawn_as_a_gap_not_a_ramp() -> None:
    # broker 2 at 40 ms, silent for 5 windows, then 728 ms: no diagonal between them
    special = {2: {**_absent(range(3, 8)), **slow_in(range(8, 12), p99=728.0)}}
    page = render_html(evaluate_range([SlowBrokerDetector()], scenario(12, 3, special), T0, now_after(12)))
    trace = next(t for t in _traces(page) if t["name"] == "broker 2" and "Produce" in t["_title"])
    assert None in trace["y"]
    k = trace["y"].index(None)
    assert trace["y"][k - 1] is not None and trace["y"][k + 1] == 728.0


def test_consumer_fetch_long_poll_is_not_charted_against_the_line() -> None:
    # Idle consumers: every broker's FetchConsumer total is its 500 ms long poll (remote)
    poll = {"request": "FetchConsumer", "p99": 502.0, "stage_p99": {"remote": 500.0, "local": 1.0}}
    data = scenario(12, 3, {b: dict.fromkeys(range(12), poll) for b in range(3)})
    rows = [r for r in data.broker_stages if r.request == "FetchConsumer"]
    report = evaluate_range(
        [SlowBrokerDetector()], Aggregates(cluster="c1", window_s=10, broker_stages=rows), T0, now_after(12)
    )
    page = render_html(report)
    assert "FetchConsumer: p99 total time" not in page
    fetch = [t for t in _traces(page) if t["_title"].startswith("FetchConsumer")]
    assert fetch and "remote, the wait by design, left out" in fetch[0]["_title"]
    assert max(v for t in fetch for v in t["y"] if v is not None) < 300  # nowhere near the line
    assert not report.findings


@pytest.mark.parametrize(
    ("topic", "internal"),
    [
        ("__consumer_offsets", True),
        ("__transaction_state", True),
        ("linkwatch.samples", True),
        ("orders", False),
        ("my.linkwatch.x", False),
    ],
)
def test_internal_topics(topic: str, internal: bool) -> None:
    assert internal_topic(topic) is internal


def test_internal_topics_are_left_out_of_the_imbalance_chart() -> None:
    data = Aggregates(
        cluster="c1",
        window_s=10,
        imbalances=[
            _imbalance(t, i, r)
            for i in range(3)
            for t, r in (("orders", 0.4), ("__consumer_offsets", 40.0), ("linkwatch.samples", 9.0))
        ],
    )
    assert set(imbalance_chart(data).series) == {"orders"}


def test_each_slow_broker_gets_its_stage_breakdown_against_its_peers() -> None:
    data = scenario(12, 3, {2: slow_in(range(3, 8))})
    report = evaluate_range([SlowBrokerDetector()], data, T0, now_after(12))
    [b] = report.breakdowns
    assert (b.subject, b.request, b.at_fault) == ("broker:2", "Produce", "local")
    assert b.subject_ms["local"] > 10 * b.peers_ms["local"]
    assert b.subject_ms["requestQueue"] == pytest.approx(b.peers_ms["requestQueue"])
    assert list(b.subject_ms) == ["requestQueue", "local", "remote", "throttle", "responseQueue", "send"]
    page = render_html(report)
    assert "Where the time goes" in page and "broker:2 Produce: p99 per stage against its peers" in page
    assert "◀ at fault" in page and "median" in page


def test_a_report_without_findings_has_no_breakdown_section() -> None:
    page = render_html(evaluate_range([SlowBrokerDetector()], scenario(12, 3, {}), T0, now_after(12)))
    assert "Where the time goes" not in page


def _traces(page: str) -> list[dict]:
    """Every plotly trace in the page, with its chart's title under ``_title``."""
    out = []
    page = page[page.index("<body>") :]  # not the inlined plotly.js
    marker = "Plotly.newPlot("
    at = page.find(marker)
    while at != -1:
        args = page[at + len(marker) :]
        start = args.index("[")
        traces, end = json.JSONDecoder().raw_decode(args[start:])
        layout, _ = json.JSONDecoder().raw_decode(args[start + end :].lstrip(", "))
        title = layout.get("title", {}).get("text", "")
        out += [{**t, "_title": title} for t in traces]
        at = page.find(marker, at + 1)
    return out


def test_summary_round_trips_to_json() -> None:
    read = ReadSummary(10, 6, 4, [1, 2], [(window(1), window(3))], {2: [(window(4), window(5))]})
    assert read.to_dict()["gaps"] == [[window(1), window(3)]]
