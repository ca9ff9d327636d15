"""Reports over a range (table, JSON, self-contained HTML) and the Prometheus/terminal sinks."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from analyzer.report import evaluate_range, render_html, render_json, render_table
from analyzer.sinks import PrometheusSink, TerminalSink
from analyzer.slow_broker import SlowBrokerDetector
from cli.commands.report import parse_time
from linkwatch.aggregates import Aggregates, ImbalanceWindow
from linkwatch.errors import ConfigError
from linkwatch.records import Finding
from tests.analyzer.test_slow_broker import T0, now_after, scenario, slow_in, window


def _data() -> Aggregates:
    # broker 2 slow in windows 3..7 of 12, then recovered
    base = scenario(12, 3, {2: slow_in(range(3, 8))})
    imb = [
        ImbalanceWindow(
            scope="topic",
            measure="bytes_in",
            group="orders",
            window_start_ms=window(i),
            members=6,
            max_value=3.0,
            avg_value=1.0,
            ratio=2.0,
            max_member="0",
        )
        for i in range(12)
    ]
    return Aggregates(cluster="c1", window_s=10, broker_stages=base.broker_stages, imbalances=imb)


def test_range_reports_first_and_last_active() -> None:
    report = evaluate_range([SlowBrokerDetector()], _data(), T0, now_after(12))
    [r] = report.findings
    # fires at the end of the 2nd slow window (window 4); last active at the end of window 9, the
    # 2nd healthy one (clear_windows: 3 healthy windows in a row clear it)
    assert (r.finding.subject, r.first_ms, r.last_ms) == ("broker:2", now_after(5), now_after(10))


def test_renderers() -> None:
    report = evaluate_range([SlowBrokerDetector()], _data(), T0, now_after(12))
    doc = json.loads(render_json(report))
    assert [(f["subject"], f["first_active_ms"]) for f in doc["findings"]] == [("broker:2", now_after(5))]
    assert "broker:2" in render_table(report)
    page = render_html(report)
    # stage breakdown, p99 Produce, imbalance (FetchConsumer: no data); plotly.js draws each chart
    assert page.count('class="plotly-graph-div"') == 3
    assert (
        "FetchConsumer: p99 of the slowest stage per broker (remote, the wait by design, left out): no data"
        in page
    )
    assert "threshold 300" in page and "broker:2 Produce: p99 per stage against its peers" in page
    assert "stage p99 above peers" not in page  # the detector's summed excess: superseded
    # plotly.js is inlined; no element loads anything (the bundle itself holds URLs as text)
    assert not re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=\"?https?://", page), (
        "the page must not load anything"
    )


def test_html_charts_have_time_axes_legends_and_hover() -> None:
    report = evaluate_range([SlowBrokerDetector()], _data(), T0, now_after(12))
    page = render_html(report)
    assert page.count('"type":"date"') == 2  # p99 Produce and imbalance: time on the x axis
    assert '"name":"broker 2"' in page and '"name":"orders"' in page  # legend entries
    assert page.count("hovertemplate") >= 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000000", 1_700_000_000_000),
        ("2023-11-14T22:13:20", 1_700_000_000_000),
        ("2023-11-14T23:13:20+01:00", 1_700_000_000_000),
    ],
)
def test_parse_time(text: str, expected: int) -> None:
    assert parse_time(text, "--from") == expected


@pytest.mark.parametrize("text", ["yesterday", "2023-13-01", "-5"])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ConfigError, match="--from"):
        parse_time(text, "--from")


def test_prometheus_sink_gauges() -> None:
    data = _data()
    sink = PrometheusSink(gauges=SlowBrokerDetector.gauges)
    detector = SlowBrokerDetector()
    [finding] = detector.detect(data, now_after(8))
    sink.emit(finding)
    sink.observe(data, detector.measure(data, now_after(8)))
    labels = {
        "cluster": "c1",
        "rule": "slow_broker",
        "subject": "broker:2",
        "severity": "critical",  # at max_score, 800 ms: twice the threshold
        "broker": "2",
        "stage": "local",
        "follower": "",
        "topic": "",
        "group": "",
    }
    get = sink.registry.get_sample_value
    assert get("linkwatch_finding_active", labels) == 1.0
    assert get("linkwatch_slow_broker_score", {"cluster": "c1", "broker": "2", "request": "Produce"}) == 5.0
    assert (
        get(
            "linkwatch_imbalance_ratio",
            {"cluster": "c1", "scope": "topic", "measure": "bytes_in", "topic": "orders"},
        )
        == 2.0
    )
    sink.emit(finding.__class__(**{**finding.__dict__, "active": False}))
    assert get("linkwatch_finding_active", labels) is None


def test_prometheus_sink_clears_the_series_a_finding_set_when_its_labels_changed() -> None:
    """Fault-matrix run 8: a slow_broker finding raised as warning became critical (its score at
    max_score) and cleared as warning; the critical series stayed at 1 and its alert fired for
    the rest of the run. A finding's change of labels moves its one series; its clearing removes
    whatever it set."""
    [finding] = SlowBrokerDetector().detect(_data(), now_after(8))
    sink = PrometheusSink()

    def active() -> dict[tuple[str, str], float]:
        return {
            (s.labels["severity"], s.labels["stage"]): s.value
            for m in sink.registry.collect()
            if m.name == "linkwatch_finding_active"
            for s in m.samples
        }

    def variant(**changes) -> Finding:
        evidence = {**finding.evidence, "stage": changes.pop("stage", finding.evidence["stage"])}
        return dataclasses.replace(finding, evidence=evidence, **changes)

    sink.emit(variant(severity="warning"))
    sink.emit(variant(severity="critical"))
    assert active() == {("critical", "local"): 1.0}
    sink.emit(variant(severity="critical", stage="remote"))
    assert active() == {("critical", "remote"): 1.0}
    sink.emit(variant(severity="warning", stage="local", active=False))
    assert active() == {}
    # Another finding's series are not touched; an unknown clearing is harmless.
    other = dataclasses.replace(finding, subject="broker:1")
    sink.emit(other)
    sink.emit(variant(active=False))
    assert list(active().values()) == [1.0]


def test_terminal_sink_prints_appear_and_clear_once() -> None:
    lines: list[str] = []
    sink = TerminalSink(lines.append)
    [finding] = SlowBrokerDetector().detect(_data(), now_after(8))
    sink.emit(finding)
    sink.emit(finding)
    sink.emit(finding.__class__(**{**finding.__dict__, "active": False}))
    assert [line.split()[0] for line in lines] == ["FIRING", "CLEARED"]
