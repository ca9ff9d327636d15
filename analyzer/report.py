"""``linkwatch report``: the batch path over a time range, findings as table, JSON or HTML.

:func:`batch_report` reads the range (the archive ``linkwatch analyze`` writes, or Kafka by
timestamp), aggregates it like the stream does, and evaluates the detectors at the end of
every window (:func:`evaluate_range`), so a finding that came and went is reported with when
it was first and last active. The HTML page is self-contained (inline SVG, no scripts, no
CDN): the charts each detector asks for (:meth:`analyzer.base.Detector.charts`, e.g. p99 per
broker over time with the threshold and the stage breakdown of each flagged broker) and
per-topic partition imbalance over time.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

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
    spark = spark_session(cfg.spark_master, app_name="linkwatch-report", kafka=source == "kafka")
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


# --- HTML with inline SVG -------------------------------------------------------------------

_COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


def svg_lines(
    series: dict[str, list[tuple[int, float]]], title: str, y_label: str, threshold: float | None = None
) -> str:
    w, h, pad = 720, 260, 48
    points = [p for s in series.values() for p in s if p[1] is not None]
    if not points:
        return f"<p>{html.escape(title)}: no data</p>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    ymax = max([p[1] for p in points] + ([threshold] if threshold else [])) * 1.1 or 1.0

    def sx(x: int) -> float:
        return pad + (x - x0) / ((x1 - x0) or 1) * (w - 2 * pad)

    def sy(y: float) -> float:
        return h - pad - y / ymax * (h - 2 * pad)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img">',
        f'<text x="{pad}" y="18" font-size="14">{html.escape(title)}</text>',
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#999"/>',
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#999"/>',
        f'<text x="4" y="{pad - 6}" font-size="11">{html.escape(y_label)} (max {ymax / 1.1:.1f})</text>',
        f'<text x="{pad}" y="{h - 8}" font-size="11">{_ts(x0)}</text>',
        f'<text x="{w - pad - 120}" y="{h - 8}" font-size="11">{_ts(x1)[11:]}</text>',
    ]
    if threshold is not None:
        parts.append(
            f'<line x1="{pad}" y1="{sy(threshold):.1f}" x2="{w - pad}" y2="{sy(threshold):.1f}" '
            f'stroke="#d62728" stroke-dasharray="6 4"/><text x="{w - pad - 90}" y="{sy(threshold) - 4:.1f}" '
            f'font-size="11" fill="#d62728">threshold {threshold:g}</text>'
        )
    for i, (name, pts) in enumerate(sorted(series.items())):
        color = _COLORS[i % len(_COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in sorted(pts) if y is not None)
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        parts.append(
            f'<text x="{w - pad + 4}" y="{pad + 14 * i}" font-size="11" fill="{color}">'
            f"{html.escape(name)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def svg_bars(values: dict[str, float], title: str, unit: str) -> str:
    w, bar_h, pad = 720, 18, 130
    vmax = max([abs(v) for v in values.values()] + [1e-9])
    rows = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{30 + bar_h * 1.4 * len(values):.0f}">',
        f'<text x="4" y="16" font-size="14">{html.escape(title)}</text>',
    ]
    for i, (name, v) in enumerate(values.items()):
        y = 26 + i * bar_h * 1.4
        length = max(v, 0) / vmax * (w - pad - 90)
        rows.append(
            f'<text x="4" y="{y + 13:.0f}" font-size="12">{html.escape(name)}</text>'
            f'<rect x="{pad}" y="{y:.0f}" width="{length:.1f}" height="{bar_h}" fill="#1f77b4"/>'
            f'<text x="{pad + length + 4:.1f}" y="{y + 13:.0f}" font-size="12">{v:.1f} {unit}</text>'
        )
    rows.append("</svg>")
    return "".join(rows)


def render_html(report: Report) -> str:
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
    for chart in report.charts:
        if isinstance(chart, LineChart):
            sections.append(svg_lines(dict(chart.series), chart.title, chart.y_label, chart.threshold))
        elif isinstance(chart, BarChart):
            sections.append(svg_bars(dict(chart.values), chart.title, chart.unit))
    topics: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in d.imbalances:
        if r.scope == "topic" and r.measure == "bytes_in":
            topics[r.group].append((r.window_start_ms, r.ratio))
    sections.append(svg_lines(dict(topics), "partition imbalance per topic (bytes in), I = max/avg − 1", "I"))
    style = (
        "body{font-family:sans-serif;margin:24px}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}"
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>linkwatch report</title>"
        f"<style>{style}</style></head><body>{''.join(sections)}</body></html>"
    )


RENDERERS: dict[str, Callable[[Report], str]] = {
    "table": render_table,
    "json": render_json,
    "html": render_html,
}
