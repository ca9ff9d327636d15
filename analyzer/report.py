"""``linkwatch report``: the batch path over a time range, findings as table, JSON or HTML.

:func:`batch_report` reads the range (the archive ``linkwatch analyze`` writes, or Kafka by
timestamp), aggregates it like the stream does, and evaluates the detectors at the end of
every window (:func:`evaluate_range`), so a finding that came and went is reported with when
it was first and last active. The HTML page is self-contained (plotly.js inlined, nothing
loaded from the network; axes, legends, hover, time on the x axis): the charts each detector
asks for (:meth:`analyzer.base.Detector.charts`, e.g. p99 per broker over time with the
threshold and the stage breakdown of each flagged broker) and per-topic partition imbalance
over time.

The page says what it read before what it found: the brokers, the windows with data and the
gaps (runs of windows nothing came from, and windows a broker missed while the others
reported), the samples read per kind and those skipped and why; "no findings" (data read, no
detector fired) is never confused with "no data". Lines break at a gap instead of joining the
windows on either side. The charts that judge leave out what is no one's slowness: a request
type's waits by design (a consumer fetch's long poll, charted by its own stages instead) and
internal topics (``__consumer_offsets``, linkwatch's own ``linkwatch.*``). Each slow broker found
gets its stage breakdown against its peers: where its time goes, stage by stage.
"""

from __future__ import annotations

import fnmatch
import html
import json
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import plotly.graph_objects as go

from analyzer.base import BarChart, Chart, Detector, LineChart
from analyzer.registry import load_detectors
from analyzer.service import AnalyzerConfig
from analyzer.slow_broker import SlowBrokerConfig
from linkwatch.aggregates import Aggregates
from linkwatch.errors import ConfigError
from linkwatch.records import Finding

# Topics that are the cluster's or linkwatch's own: left out of the charts that judge.
INTERNAL_TOPICS = ("__*", "linkwatch.*")
# Stages a request type waits in by design (a fetch's long poll in purgatory, up to its
# max wait): never slowness, so never charted as such. The slow-broker model's setting
# (``wait_stages``), as the detector in use is configured when there is one.
WAIT_STAGES: Mapping[str, Sequence[str]] = SlowBrokerConfig().wait_stages
# The stages of a request in the order it passes them (``total`` is their sum).
BREAKDOWN_STAGES = ("requestQueue", "local", "remote", "throttle", "responseQueue", "send")
STAGE_NAMES = {
    "requestQueue": "request queue",
    "local": "local (I/O thread, log append/read)",
    "remote": "remote (purgatory: followers, long poll)",
    "throttle": "throttle (quota)",
    "responseQueue": "response queue",
    "send": "send (network, client)",
}


def internal_topic(topic: str, patterns: Sequence[str] = INTERNAL_TOPICS) -> bool:
    return any(fnmatch.fnmatchcase(topic, p) for p in patterns)


Span = tuple[int, int]  # [start ms, end ms)


@dataclass
class ReadSummary:
    """What a report read: the windows of the range and which had data, the brokers, the gaps,
    and (from the Spark path) the samples per kind and those skipped per reason."""

    window_s: int
    windows: int  # windows in the range
    windows_with_data: int
    brokers: list[int]
    gaps: list[Span]  # runs of windows no broker reported stage timings for
    broker_gaps: dict[int, list[Span]]  # runs a broker missed while others reported
    samples: dict[str, int] = field(default_factory=dict)  # kind -> records read and used
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> records left out

    @property
    def no_data(self) -> bool:
        return self.windows_with_data == 0

    def to_dict(self) -> dict:
        return {
            "window_s": self.window_s,
            "windows": self.windows,
            "windows_with_data": self.windows_with_data,
            "brokers": self.brokers,
            "gaps": [list(g) for g in self.gaps],
            "broker_gaps": {str(b): [list(g) for g in gs] for b, gs in self.broker_gaps.items()},
            "samples": self.samples,
            "skipped": self.skipped,
        }


def _runs(missing: Iterable[int], step: int) -> list[Span]:
    """Consecutive window starts joined into ``[start, end)`` spans."""
    spans: list[Span] = []
    for w in sorted(missing):
        if spans and spans[-1][1] == w:
            spans[-1] = (spans[-1][0], w + step)
        else:
            spans.append((w, w + step))
    return spans


def summarize(data: Aggregates, from_ms: int, to_ms: int) -> ReadSummary:
    """The windows of ``[from_ms, to_ms)``, which of them any broker reported stage timings for,
    and the gaps: of the whole cluster, and of each broker between its first and last window."""
    step = data.window_s * 1000
    first = from_ms - from_ms % step
    expected = list(range(first, to_ms, step))
    by_broker: dict[int, set[int]] = defaultdict(set)
    for r in data.broker_stages:
        if r.broker is not None and first <= r.window_start_ms < to_ms:
            by_broker[r.broker].add(r.window_start_ms)
    seen = set().union(*by_broker.values()) if by_broker else set()
    broker_gaps = {}
    for b, ws in sorted(by_broker.items()):
        lo, hi = min(ws), max(ws)
        missed = [w for w in expected if lo <= w <= hi and w in seen and w not in ws]
        if missed:
            broker_gaps[b] = _runs(missed, step)
    return ReadSummary(
        window_s=data.window_s,
        windows=len(expected),
        windows_with_data=len(seen),
        brokers=sorted(by_broker),
        gaps=_runs((w for w in expected if w not in seen), step),
        broker_gaps=broker_gaps,
    )


@dataclass(frozen=True)
class StageBreakdown:
    """A finding's subject against its peers, stage by stage: the median over the finding's
    windows of the subject's p99 and of the peers' median p99, per stage of ``request``."""

    title: str
    subject: str
    request: str
    at_fault: str  # the stage the finding names ("" if none)
    subject_ms: Mapping[str, float]
    peers_ms: Mapping[str, float]
    waits: Sequence[str] = ()  # stages that wait by design for this request (drawn, marked)


def stage_breakdown(
    data: Aggregates,
    finding: Finding,
    first_ms: int,
    last_ms: int,
    waits: Mapping[str, Sequence[str]] = WAIT_STAGES,
) -> StageBreakdown | None:
    """The breakdown of a broker finding over the windows it was active in (its evidence's
    windows when the range saw it only once); ``None`` for other subjects or without rows."""
    kind, _, ident = finding.subject.partition(":")
    if kind != "broker" or not ident.isdigit():
        return None
    broker = int(ident)
    ev = finding.evidence or {}
    request = ev.get("request") or "Produce"
    step = data.window_s * 1000
    # The windows it was blamed in, else those it was active in (evaluated at each window's end).
    windows = set(ev.get("slow_windows") or range(first_ms - first_ms % step - step, last_ms, step))
    own: dict[str, list[float]] = defaultdict(list)
    peers: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in data.broker_stages:
        if r.request != request or r.stage not in BREAKDOWN_STAGES or r.p99_ms is None:
            continue
        if r.window_start_ms not in windows:
            continue
        if r.broker == broker:
            own[r.stage].append(r.p99_ms)
        else:
            peers[(r.stage, r.window_start_ms)].append(r.p99_ms)
    if not own:
        return None
    peer_by_stage: dict[str, list[float]] = defaultdict(list)
    for (stage, _w), values in peers.items():
        peer_by_stage[stage].append(statistics.median(values))
    stages = [s for s in BREAKDOWN_STAGES if s in own]
    return StageBreakdown(
        title=f"{finding.subject} {request}: p99 per stage against its peers' median",
        subject=finding.subject,
        request=request,
        at_fault=str(ev.get("stage") or ""),
        subject_ms={s: statistics.median(own[s]) for s in stages},
        peers_ms={s: statistics.median(peer_by_stage[s]) for s in stages if peer_by_stage.get(s)},
        waits=tuple(waits.get(request, ())),
    )


def own_stages_chart(data: Aggregates, request: str, waits: Sequence[str]) -> LineChart:
    """A request type with a wait by design, charted without it: per broker and window, the p99
    of the slowest of its other stages (a consumer fetch's total is its long poll when idle)."""
    slowest: dict[tuple[int, int], float] = {}
    for r in data.broker_stages:
        if r.request != request or r.broker is None or r.p99_ms is None:
            continue
        if r.stage in waits or r.stage not in BREAKDOWN_STAGES:
            continue
        key = (r.broker, r.window_start_ms)
        slowest[key] = max(slowest.get(key, 0.0), r.p99_ms)
    series: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for (b, w), v in sorted(slowest.items()):
        series[f"broker {b}"].append((w, v))
    left_out = ", ".join(waits)
    return LineChart(
        f"{request}: p99 of the slowest stage per broker ({left_out}, the wait by design, left out)",
        "ms",
        dict(series),
    )


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
    read: ReadSummary | None = None
    breakdowns: list[StageBreakdown] = field(default_factory=list)


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
    configs = [getattr(d, "config", None) for d in detectors]
    waits = next((c.wait_stages for c in configs if isinstance(c, SlowBrokerConfig)), WAIT_STAGES)
    charts: list[Chart] = []
    for i, det in enumerate(detectors):
        mine = [r.finding for r in ordered if found_by[(r.finding.rule, r.finding.subject)] == i]
        charts += judging_charts(data, det.charts(data, mine), waits)
    breakdowns = [b for r in ordered if (b := stage_breakdown(data, r.finding, r.first_ms, r.last_ms, waits))]
    return Report(from_ms, to_ms, data, ordered, charts, summarize(data, from_ms, to_ms), breakdowns)


# The slow-broker detector's bar of a finding's stage excess (summed over the windows it was
# blamed in, so not a p99 in ms): the report draws each stage against the peers instead.
SUPERSEDED_BAR = ": stage p99 above peers' median"


def judging_charts(
    data: Aggregates, charts: list[Chart], waits: Mapping[str, Sequence[str]] = WAIT_STAGES
) -> list[Chart]:
    """A detector's charts, with each per-broker p99 total of a request type that waits by
    design (a consumer fetch: its total is the long poll when idle, over any line in every
    window) replaced by its slowest other stage, and the stage-excess bars left to the stage
    breakdowns."""
    out: list[Chart] = []
    for chart in charts:
        if isinstance(chart, BarChart) and chart.title.endswith(SUPERSEDED_BAR):
            continue  # the stage breakdown against the peers says it per stage, in ms of p99
        request = chart.title.split(":", 1)[0] if isinstance(chart, LineChart) else ""
        by_design = waits.get(request)
        if by_design and chart.title.startswith(f"{request}: p99 total time"):
            out.append(own_stages_chart(data, request, by_design))
        else:
            out.append(chart)
    return out


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
        raw = read_kafka(spark, cfg.kafka, from_ms, to_ms, cfg.samples_topic)
    else:
        raw = read_archive(spark, cfg.state_dir / "archive", from_ms, to_ms)
    if raw is None:
        raise ConfigError("--source", [f"the archive under {cfg.state_dir} holds no samples yet"])
    raw = raw.cache()
    try:
        samples, skipped = count_samples(raw, cfg.cluster)
        data = collect(
            aggregate(raw, cfg.window_s, cfg.cluster, deduplicate=False), cfg.cluster, cfg.window_s
        )
    finally:
        raw.unpersist()
    report = evaluate_range(detectors, data, from_ms, to_ms)
    if report.read is not None:
        report.read.samples, report.read.skipped = samples, skipped
    return report


def count_samples(raw, cluster: str) -> tuple[dict[str, int], dict[str, int]]:
    """Records of ``raw`` used per kind, and those left out per reason: malformed (the reasons of
    :func:`spark_metrics.transforms.with_drop_reason`) or another cluster's (``other_cluster``)."""
    from pyspark.sql import functions as F

    from spark_metrics.transforms import with_drop_reason

    checked = with_drop_reason(raw).withColumn(
        "reason",
        F.coalesce(
            F.col("drop_reason"),
            F.when(F.get_json_object("json", "$.cluster") != F.lit(cluster), F.lit("other_cluster")),
        ),
    )
    samples: dict[str, int] = {}
    skipped: dict[str, int] = {}
    for row in checked.groupBy("kind", "reason").count().collect():
        if row["reason"] is None:
            samples[row["kind"]] = samples.get(row["kind"], 0) + row["count"]
        else:
            skipped[row["reason"]] = skipped.get(row["reason"], 0) + row["count"]
    return dict(sorted(samples.items())), dict(sorted(skipped.items()))


def _ts(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _span(span: Span, window_s: int) -> str:
    n = (span[1] - span[0]) // (window_s * 1000)
    return f"{_ts(span[0])[11:]}–{_ts(span[1])[11:]} ({n} window{'s' if n != 1 else ''})"


def _counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items())


def verdict(report: Report) -> str:
    """One sentence: findings, no findings (and what was read), or no data."""
    read = report.read
    if read is not None and read.no_data:
        return (
            "NO DATA: no broker reported stage timings in this range, so nothing could be judged "
            "(check the range, and that the agents publish and the analyzer archives)."
        )
    if not report.findings:
        what = f" in {read.windows_with_data} windows from {len(read.brokers)} broker(s)" if read else ""
        return f"No findings: the data read{what} made no detector fire."
    return f"{len(report.findings)} finding(s)."


def read_lines(report: Report) -> list[str]:
    """What the report read, as sentences (the same in every format)."""
    read = report.read
    if read is None:
        return []
    lines = []
    if read.samples or read.skipped:
        lines.append(f"Samples read: {sum(read.samples.values()):,} ({_counts(read.samples) or 'none'}).")
        if read.skipped:
            lines.append(f"Samples skipped: {sum(read.skipped.values()):,} ({_counts(read.skipped)}).")
    brokers = ", ".join(map(str, read.brokers)) or "none"
    lines.append(f"Brokers: {brokers}.")
    lines.append(f"Windows of {read.window_s} s: {read.windows_with_data} of {read.windows} had data.")
    if read.gaps:
        lines.append(
            "Gaps (no broker reported): " + "; ".join(_span(g, read.window_s) for g in read.gaps) + "."
        )
    for b, gaps in read.broker_gaps.items():
        lines.append(
            f"Broker {b} missed "
            + "; ".join(_span(g, read.window_s) for g in gaps)
            + " while others reported."
        )
    return lines


def render_json(report: Report) -> str:
    return json.dumps(
        {
            "from_ms": report.from_ms,
            "to_ms": report.to_ms,
            "verdict": verdict(report),
            "read": report.read.to_dict() if report.read is not None else None,
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

    buf = StringIO()
    console = Console(file=buf, width=200, force_terminal=False)
    console.print(f"report {_ts(report.from_ms)} → {_ts(report.to_ms)} UTC")
    for line in read_lines(report):
        console.print(line)
    console.print(verdict(report))
    if report.findings:
        table = Table(title="findings")
        for col in ("first", "last", "severity", "rule", "subject", "summary", "action"):
            table.add_column(col, overflow="fold")
        for r in report.findings:
            f = r.finding
            table.add_row(
                _ts(r.first_ms)[11:], _ts(r.last_ms)[11:], f.severity, f.rule, f.subject, f.summary, f.action
            )
        console.print(table)
    return buf.getvalue()


# --- HTML with plotly charts -----------------------------------------------------------------

_CHART_CONFIG = {"displaylogo": False, "responsive": True}
_STYLE = (
    "body{font-family:sans-serif;margin:24px;max-width:1300px}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;vertical-align:top}"
    ".chart{margin:16px 0}.verdict{font-weight:bold;font-size:15px}.nodata{color:#b00}"
    "ul.read li{margin:2px 0}"
)
_SUBJECT, _SUBJECT_AT_FAULT, _PEERS = "#ff9896", "#d62728", "#7f7f7f"


def _utc(ms: int) -> datetime:
    # Naive UTC: plotly.js shows a date as given, without converting to the viewer's zone.
    return datetime.fromtimestamp(ms / 1000, UTC).replace(tzinfo=None)


def with_gaps(
    points: Iterable[tuple[int, float | None]], step_ms: int | None
) -> list[tuple[int, float | None]]:
    """The points in time order, a ``None`` wherever more than one window lies between two of
    them (and where a value is missing), so a line breaks at a gap instead of ramping across it."""
    out: list[tuple[int, float | None]] = []
    for t, v in sorted(points, key=lambda p: p[0]):
        if out and step_ms and t - out[-1][0] > step_ms and out[-1][1] is not None:
            out.append((out[-1][0] + step_ms, None))
        out.append((t, v))
    return out


def _line_figure(chart: LineChart, step_ms: int | None = None) -> go.Figure:
    fig = go.Figure()
    for name, points in sorted(chart.series.items()):
        pts = with_gaps(points, step_ms)
        fig.add_trace(
            go.Scatter(
                x=[_utc(t) for t, _ in pts],
                y=[v for _, v in pts],
                name=name,
                mode="lines+markers",
                marker={"size": 4},
                connectgaps=False,
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


def _breakdown_figure(b: StageBreakdown) -> go.Figure:
    stages = list(b.subject_ms)
    labels = [STAGE_NAMES.get(s, s) + (" — wait by design" if s in b.waits else "") for s in stages]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            y=labels,
            x=[b.peers_ms.get(s) for s in stages],
            name="peers' median",
            orientation="h",
            marker={"color": _PEERS},
            text=[f"{b.peers_ms[s]:.1f} ms" if s in b.peers_ms else "" for s in stages],
            textposition="auto",
            hovertemplate="%{y}: %{x:.1f} ms<extra>peers' median</extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            y=labels,
            x=[b.subject_ms[s] for s in stages],
            name=b.subject,
            orientation="h",
            marker={"color": [_SUBJECT_AT_FAULT if s == b.at_fault else _SUBJECT for s in stages]},
            text=[f"{b.subject_ms[s]:.1f} ms" + (" ◀ at fault" if s == b.at_fault else "") for s in stages],
            textposition="auto",
            hovertemplate=f"%{{y}}: %{{x:.1f}} ms<extra>{html.escape(b.subject, quote=False)}</extra>",
        )
    )
    fig.update_layout(
        barmode="group",
        xaxis={"title": {"text": "p99 (ms), median over the finding's windows"}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        height=max(260, 90 + 52 * len(stages)),
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def chart_html(chart: Chart | StageBreakdown, step_ms: int | None = None) -> str:
    """One chart as a ``<div>`` plotly.js draws (axes, legend, hover); ``<p>… no data</p>`` when
    it has nothing to draw. ``step_ms`` (the window) breaks lines where windows are missing.
    The page must load plotly.js once (:func:`render_html` inlines it)."""
    if isinstance(chart, StageBreakdown):
        fig = _breakdown_figure(chart)
    else:
        empty = not any(chart.series.values()) if isinstance(chart, LineChart) else not chart.values
        if empty:
            return f"<p>{html.escape(chart.title)}: no data</p>"
        fig = _line_figure(chart, step_ms) if isinstance(chart, LineChart) else _bar_figure(chart)
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


def imbalance_chart(data: Aggregates, internal: Sequence[str] = INTERNAL_TOPICS) -> LineChart:
    """Partition imbalance per topic over time; internal topics (``__consumer_offsets``,
    linkwatch's own) are left out: their keys are group ids and cluster names, their skew no one's."""
    topics: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in data.imbalances:
        if r.scope == "topic" and r.measure == "bytes_in" and not internal_topic(r.group, internal):
            topics[r.group].append((r.window_start_ms, r.ratio))
    return LineChart(
        f"partition imbalance per topic (bytes in), I = max/avg − 1 (internal topics {', '.join(internal)} left out)",
        "I",
        dict(topics),
    )


def _findings_table(report: Report) -> str:
    rows = "".join(
        f"<tr><td>{_ts(r.first_ms)[11:]}</td><td>{_ts(r.last_ms)[11:]}</td><td>{r.finding.severity}</td>"
        f"<td>{html.escape(r.finding.rule)}</td><td>{html.escape(r.finding.subject)}</td>"
        f"<td>{html.escape(r.finding.summary)}</td><td>{html.escape(r.finding.action)}</td></tr>"
        for r in report.findings
    )
    return (
        "<table><tr><th>first</th><th>last</th><th>severity</th><th>rule</th><th>subject</th>"
        f"<th>summary</th><th>action</th></tr>{rows}</table>"
    )


def render_html(report: Report) -> str:
    """A self-contained page (plotly.js inlined, nothing loaded from the network): what was read,
    the findings, each slow broker's stage breakdown against its peers, every detector's charts
    and the partition imbalance per topic over time."""
    from plotly.offline import get_plotlyjs

    d = report.data
    step_ms = d.window_s * 1000
    no_data = report.read is not None and report.read.no_data
    sections = [
        f"<h1>linkwatch report: {html.escape(d.cluster)}</h1>",
        f"<p>{_ts(report.from_ms)} → {_ts(report.to_ms)} UTC, windows of {d.window_s} s</p>",
        "<h2>What was read</h2>",
        "<ul class='read'>" + "".join(f"<li>{html.escape(x)}</li>" for x in read_lines(report)) + "</ul>",
        "<h2>Findings</h2>",
        f"<p class='verdict{' nodata' if no_data else ''}'>{html.escape(verdict(report))}</p>",
    ]
    if report.findings:
        sections.append(_findings_table(report))
    if report.breakdowns:
        sections.append("<h2>Where the time goes: each slow broker's stages against its peers</h2>")
        sections += [chart_html(b) for b in report.breakdowns]
    sections.append("<h2>Charts</h2>")
    if report.read is not None and report.read.gaps:
        sections.append(
            "<p>Lines break where no data came (the gaps above); they do not join across them.</p>"
        )
    sections += [chart_html(c, step_ms) for c in [*report.charts, imbalance_chart(d)]]
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
