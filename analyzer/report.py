"""``linkwatch report``: the batch path over a time range, findings as table, JSON or HTML.

:func:`batch_report` reads the range (the archive ``linkwatch analyze`` writes, or Kafka by
timestamp), aggregates it like the stream does, and evaluates the detectors at the end of
every window (:func:`evaluate_range`), so a finding that came and went is reported with when
it was first and last active. The HTML page is self-contained (plotly.js inlined, nothing
loaded from the network; axes, legends, hover, time on the x axis): the charts each detector
asks for (:meth:`analyzer.base.Detector.charts`, e.g. p99 per broker over time with the
threshold and the stage breakdown of each flagged broker) and per-topic partition imbalance
over time.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import plotly.graph_objects as go

from analyzer.base import BarChart, Chart, Detector, LineChart
from analyzer.registry import load_detectors
from analyzer.service import AnalyzerConfig
from linkwatch.aggregates import Aggregates
from linkwatch.errors import ConfigError
from linkwatch.records import Finding


@dataclass
class ReportedFinding:
    finding: Finding
    first_ms: int
    last_ms: int


@dataclass
class Report:
    from_ms: int
    to_ms: int
    data: Aggregates
    findings: list[ReportedFinding] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)


def evaluate_range(detectors: list[Detector], data: Aggregates, from_ms: int, to_ms: int) -> Report:
    step = data.window_s * 1000
    seen: dict[tuple[str, str], ReportedFinding] = {}
    found_by: dict[tuple[str, str], int] = {}  # (rule, subject) -> index of its detector
    t = from_ms - from_ms % step + step
    while t <= to_ms:
        for i, det in enumerate(detectors):
            for f in det.detect(data, t):
                ident = (f.rule, f.subject)
                found_by[ident] = i
                if ident in seen:
                    seen[ident].finding, seen[ident].last_ms = f, t
                else:
                    seen[ident] = ReportedFinding(f, t, t)
        t += step
    ordered = sorted(seen.values(), key=lambda r: (r.first_ms, r.finding.rule, r.finding.subject))
    charts = [
        chart
        for i, det in enumerate(detectors)
        for chart in det.charts(
            data, [r.finding for r in ordered if found_by[(r.finding.rule, r.finding.subject)] == i]
        )
    ]
    return Report(from_ms, to_ms, data, ordered, charts)


def batch_report(cfg: AnalyzerConfig, from_ms: int, to_ms: int, source: str = "archive") -> Report:
    """The configured detectors over ``[from_ms, to_ms)`` of ``source``: ``archive`` (the Parquet
    archive under ``cfg.state_dir``) or ``kafka`` (``cfg.samples_topic`` by timestamp)."""
    from spark_metrics.aggregate import aggregate, collect
    from spark_metrics.batch import read_archive, read_kafka
    from spark_metrics.session import spark_session

    detectors = load_detectors(cfg.detectors)  # before Spark starts: a bad name fails fast
    spark = spark_session(
        cfg.spark_master,
        app_name="linkwatch-report",
        kafka=source == "kafka",
        extra=dict(cfg.spark_conf),
        log_file=cfg.spark_log,
    )
    if source == "kafka":
        raw = read_kafka(spark, cfg.bootstrap, from_ms, to_ms, cfg.samples_topic)
    else:
        raw = read_archive(spark, cfg.state_dir / "archive", from_ms, to_ms)
    if raw is None:
        raise ConfigError("--source", [f"the archive under {cfg.state_dir} holds no samples yet"])
    data = collect(aggregate(raw, cfg.window_s, cfg.cluster, deduplicate=False), cfg.cluster, cfg.window_s)
    return evaluate_range(detectors, data, from_ms, to_ms)


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def render_json(report: Report) -> str:
    return json.dumps(
        {
            "from_ms": report.from_ms,
            "to_ms": report.to_ms,
            "findings": [
                {**r.finding.to_dict(), "first_active_ms": r.first_ms, "last_active_ms": r.last_ms}
                for r in report.findings
            ],
        },
        indent=2,
        default=str,
    )


def render_table(report: Report) -> str:
    from io import StringIO

    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"findings {_ts(report.from_ms)} → {_ts(report.to_ms)} UTC")
    for col in ("first", "last", "severity", "rule", "subject", "summary", "action"):
        table.add_column(col, overflow="fold")
    for r in report.findings:
        f = r.finding
        table.add_row(
            _ts(r.first_ms)[11:], _ts(r.last_ms)[11:], f.severity, f.rule, f.subject, f.summary, f.action
        )
    buf = StringIO()
    Console(file=buf, width=200, force_terminal=False).print(
        table if report.findings else "no findings in range"
    )
    return buf.getvalue()


# --- HTML with plotly charts -----------------------------------------------------------------

_CHART_CONFIG = {"displaylogo": False, "responsive": True}
_STYLE = (
    "body{font-family:sans-serif;margin:24px;max-width:1300px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}"
    ".chart{margin:16px 0}"
)


def _utc(ms: int) -> datetime:
    # Naive UTC: plotly.js shows a date as given, without converting to the viewer's zone.
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def _line_figure(chart: LineChart) -> go.Figure:
    fig = go.Figure()
    for name, points in sorted(chart.series.items()):
        pts = sorted(p for p in points if p[1] is not None)
        fig.add_trace(
            go.Scatter(
                x=[_utc(t) for t, _ in pts],
                y=[v for _, v in pts],
                name=name,
                mode="lines+markers",
                marker={"size": 4},
                hovertemplate=f"%{{x|%H:%M:%S}}  %{{y:.1f}} {chart.y_label}<extra>{html.escape(name, quote=False)}</extra>",
            )
        )
    if chart.threshold is not None:
        fig.add_hline(
            y=chart.threshold,
            line={"dash": "dash", "color": "#d62728", "width": 1.5},
            annotation={"text": f"threshold {chart.threshold:g}", "font": {"color": "#d62728"}},
            annotation_position="top left",
        )
    fig.update_layout(
        xaxis={"title": {"text": "time (UTC)"}, "type": "date"},
        yaxis={"title": {"text": chart.y_label}, "rangemode": "tozero"},
        hovermode="x unified",
    )
    return fig


def _bar_figure(chart: BarChart) -> go.Figure:
    names = list(chart.values)
    values = [chart.values[n] for n in names]
    fig = go.Figure(
        go.Bar(
            x=values,
            y=names,
            orientation="h",
            text=[f"{v:.1f} {chart.unit}" for v in values],
            textposition="auto",
            marker={"color": ["#d62728" if v == max(values) else "#1f77b4" for v in values]},
            hovertemplate=f"%{{y}}: %{{x:.1f}} {chart.unit}<extra></extra>",
        )
    )
    fig.update_layout(
        xaxis={"title": {"text": chart.unit}, "zeroline": True},
        yaxis={"autorange": "reversed"},
        height=max(220, 70 + 32 * len(names)),
        showlegend=False,
    )
    return fig


def chart_html(chart: Chart) -> str:
    """One chart as a ``<div>`` plotly.js draws (axes, legend, hover); ``<p>… no data</p>`` when
    it has nothing to draw. The page must load plotly.js once (:func:`render_html` inlines it)."""
    empty = not any(chart.series.values()) if isinstance(chart, LineChart) else not chart.values
    if empty:
        return f"<p>{html.escape(chart.title)}: no data</p>"
    fig = _line_figure(chart) if isinstance(chart, LineChart) else _bar_figure(chart)
    fig.update_layout(
        title={"text": html.escape(chart.title, quote=False)},
        template="plotly_white",
        margin={"l": 70, "r": 30, "t": 60, "b": 60},
        legend={"title": {"text": ""}},
    )
    if isinstance(chart, LineChart):
        fig.update_layout(height=380)
    div = fig.to_html(full_html=False, include_plotlyjs=False, config=_CHART_CONFIG)
    return f"<div class='chart'>{div}</div>"


def imbalance_chart(data: Aggregates) -> LineChart:
    topics: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in data.imbalances:
        if r.scope == "topic" and r.measure == "bytes_in":
            topics[r.group].append((r.window_start_ms, r.ratio))
    return LineChart("partition imbalance per topic (bytes in), I = max/avg − 1", "I", dict(topics))


def render_html(report: Report) -> str:
    """A self-contained page (plotly.js inlined, nothing loaded from the network): the findings
    table, every detector's charts and the partition imbalance per topic over time."""
    from plotly.offline import get_plotlyjs

    d = report.data
    sections = [
        f"<h1>linkwatch report: {html.escape(d.cluster)}</h1>",
        f"<p>{_ts(report.from_ms)} → {_ts(report.to_ms)} UTC, windows of {d.window_s} s</p>",
        "<h2>Findings</h2>",
    ]
    if report.findings:
        rows = "".join(
            f"<tr><td>{_ts(r.first_ms)[11:]}</td><td>{_ts(r.last_ms)[11:]}</td><td>{r.finding.severity}</td>"
            f"<td>{html.escape(r.finding.rule)}</td><td>{html.escape(r.finding.subject)}</td>"
            f"<td>{html.escape(r.finding.summary)}</td><td>{html.escape(r.finding.action)}</td></tr>"
            for r in report.findings
        )
        sections.append(
            "<table><tr><th>first</th><th>last</th><th>severity</th><th>rule</th><th>subject</th>"
            f"<th>summary</th><th>action</th></tr>{rows}</table>"
        )
    else:
        sections.append("<p>No findings in this range.</p>")
    sections.append("<h2>Charts</h2>")
    sections += [chart_html(c) for c in [*report.charts, imbalance_chart(d)]]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>linkwatch report</title>"
        f"<style>{_STYLE}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
        f"<body>{''.join(sections)}</body></html>"
    )


RENDERERS: dict[str, Callable[[Report], str]] = {
    "table": render_table,
    "json": render_json,
    "html": render_html,
}
