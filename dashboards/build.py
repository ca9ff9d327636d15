"""The linkwatch dashboards, built with grafana-foundation-sdk.

Every panel reads the metric contract (``docs/metrics.md``) or the shared recording rules
(``alerts/rules/recording.yml``). Quantiles are taken from summed histogram buckets (the
recording rules), never by averaging percentiles. Template variables: ``datasource``,
``cluster``, ``broker``, ``topic``, ``group`` (multi-value, "All" = ``.*``, used with ``=~``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.builders.common import GraphThresholdsStyleConfig, StackingConfig
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import GraphThresholdsStyleMode, StackingMode
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

# The generated JSON shipped in this package: what `linkwatch dashboards push` sends by default
# (a test keeps it equal to what `generate` writes).
SHIPPED_DIR = Path(__file__).resolve().parent
# Where `linkwatch dashboards generate` writes by default: ./dashboards in the working directory
# (in a source checkout, that is the shipped copy above).
DEFAULT_OUT_DIR = Path("dashboards")
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
SLOW_LINE_S = 0.3  # the slow-node line: p99 above 300 ms

C = 'cluster=~"$cluster"'
CB = 'cluster=~"$cluster", broker=~"$broker"'

Panel = Any  # a foundation-sdk panel builder


def q(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> Dataquery:
    d = Dataquery().expr(expr).legend_format(legend or "__auto").ref_id(ref)
    if instant:
        d = d.instant().format(PromQueryFormat.TABLE)
    return d


def ts(title: str, unit: str, *queries: Dataquery, desc: str, span: int = 12, stacked: bool = False) -> Panel:
    """A time series panel; every panel says what it shows (``desc``) and in what unit."""
    p = timeseries.Panel().title(title).unit(unit).description(desc).datasource(DS).span(span).height(8)
    if stacked:
        p = p.stacking(StackingConfig().mode(StackingMode.NORMAL)).fill_opacity(40)
    for query in queries:
        p = p.with_target(query)
    return p


def with_line(p: Panel, value: float, color: str = "red") -> Panel:
    """Draw a threshold line (e.g. the 300 ms slow line) on a time series panel."""
    steps = [Threshold(value=None, color="green"), Threshold(value=value, color=color)]
    return p.thresholds(db.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps)).thresholds_style(
        GraphThresholdsStyleConfig().mode(GraphThresholdsStyleMode.LINE)
    )


def st(
    title: str, unit: str, query: Dataquery, *, desc: str, span: int = 6, red_at: float | None = None
) -> Panel:
    p = stat.Panel().title(title).unit(unit).description(desc).datasource(DS).span(span).height(4)
    p = p.with_target(query)
    if red_at is not None:
        steps = [Threshold(value=None, color="green"), Threshold(value=red_at, color="red")]
        p = p.thresholds(db.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps))
    return p


def tb(title: str, query: Dataquery, *, unit: str, desc: str, span: int = 12) -> Panel:
    p = table.Panel().title(title).unit(unit).description(desc).datasource(DS).span(span).height(8)
    return p.with_target(query)


def variables(d: db.Dashboard, *names: str) -> db.Dashboard:
    d = d.with_variable(db.DatasourceVariable("datasource").label("Data source").type("prometheus"))
    sources = {
        "cluster": 'label_values(up{job=~"linkwatch.*"}, cluster)',
        "broker": 'label_values(linkwatch_broker_leader_count{cluster=~"$cluster"}, broker)',
        # Topics the agents see on disk and topics consumer groups read (a topic nobody
        # consumes still has skew to show).
        "topic": 'label_values({__name__=~"linkwatch_partition_size_bytes|linkwatch_consumer_lag_messages", '
        'cluster=~"$cluster"}, topic)',
        "group": 'label_values(linkwatch_consumer_group_status{cluster=~"$cluster"}, group)',
    }
    for name in ("cluster", *names):
        v = (
            db.QueryVariable(name)
            .label(name.capitalize())
            .query(sources[name])
            .datasource(DS)
            .multi(True)
            .include_all(True)
            .all_value(".*")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        )
        d = d.with_variable(v)
    return d


# Findings as annotations: every active finding of the selected clusters marks the time it was
# active on the latency panels (those in seconds), titled by rule and subject. Prometheus
# annotations turn each run of samples of a series into one region.
FINDINGS_ANNOTATION = "Findings"
FINDINGS_EXPR = (
    'max by (cluster, rule, subject, severity, stage) (linkwatch_finding_active{cluster=~"$cluster"}) == 1'
)
LATENCY_UNIT = "s"


def findings_annotation() -> db.AnnotationQuery:
    return (
        db.AnnotationQuery()
        .name(FINDINGS_ANNOTATION)
        .datasource(DS)
        .enable(True)
        .icon_color("#F2495C")
        .expr(FINDINGS_EXPR)
    )


def base(uid: str, title: str, *var_names: str) -> db.Dashboard:
    d = (
        db.Dashboard(title)
        .uid(uid)
        .tags(["linkwatch", "kafka"])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .annotation(findings_annotation())
    )
    return variables(d, *var_names)


def cluster_overview() -> db.Dashboard:
    d = base("linkwatch-cluster-overview", "linkwatch / Cluster overview")
    d = d.with_row(db.Row("Health"))
    d = d.with_panel(
        st(
            "Agents up",
            "none",
            q(f'sum(up{{job="linkwatch-agent", {C}}})'),
            desc="Agents Prometheus scrapes successfully (job linkwatch-agent): one per broker host expected.",
        )
    )
    d = d.with_panel(
        st(
            "Under-replicated partitions",
            "none",
            q(f"sum(linkwatch_broker_under_replicated_partitions{{{C}}})"),
            red_at=1,
            desc="Partitions with fewer in-sync replicas than replicas, summed over the brokers (JMX UnderReplicatedPartitions). Above 0: a follower is behind or down.",
        )
    )
    d = d.with_panel(
        st(
            "Offline partitions",
            "none",
            q(f"sum(linkwatch_broker_offline_partitions{{{C}}})"),
            red_at=1,
            desc="Partitions without a leader (JMX OfflinePartitionsCount): unavailable to clients.",
        )
    )
    d = d.with_panel(
        st(
            "Active findings",
            "none",
            q(f"sum(linkwatch_finding_active{{{C}}})"),
            red_at=1,
            desc="Findings the analyzer and the lag collector hold active now (linkwatch_finding_active).",
        )
    )
    d = d.with_row(db.Row("Requests"))
    d = d.with_panel(
        ts(
            "Request rate by type",
            "reqps",
            q(f"sum by (request) (linkwatch:broker_request_rate:5m{{{C}}})", "{{request}}"),
            desc="Requests per second each request type is served at, over all brokers (from the agents' request-log histograms).",
        )
    )
    d = d.with_panel(
        with_line(
            ts(
                "p99 by request type, whole cluster",
                "s",
                q(f"linkwatch:cluster_request_p99_seconds:5m{{{C}}}", "{{request}}"),
                desc="From the brokers' histogram buckets summed over the cluster (not averaged percentiles).",
            ),
            SLOW_LINE_S,
        )
    )
    d = d.with_panel(
        ts(
            "Active findings by rule",
            "none",
            q(f"sum by (rule, severity) (linkwatch_finding_active{{{C}}})", "{{rule}} ({{severity}})"),
            desc="Active findings over time by rule and severity; each finding is also drawn as an annotation on the latency panels.",
        )
    )
    d = d.with_panel(
        ts(
            "Under-replicated / under-min-ISR partitions",
            "none",
            q(
                f"sum by (broker) (linkwatch_broker_under_replicated_partitions{{{C}}})",
                "URP broker {{broker}}",
            ),
            q(
                f"sum by (broker) (linkwatch_broker_under_min_isr_partitions{{{C}}})",
                "under min ISR {{broker}}",
                "B",
            ),
            desc="Per broker: partitions under-replicated, and partitions whose ISR is below min.insync.replicas (acks=all producers fail on those).",
        )
    )
    return d


def broker_latency() -> db.Dashboard:
    d = base("linkwatch-broker-latency", "linkwatch / Broker latency breakdown", "broker")
    for request in ("Produce", "FetchConsumer", "FetchFollower"):
        d = d.with_panel(
            ts(
                f"{request}: mean time per stage (stacked)",
                "s",
                q(
                    f'linkwatch:broker_request_stage_mean_seconds:5m{{{CB}, request="{request}", stage!="total"}}',
                    "broker {{broker}} {{stage}}",
                ),
                span=8,
                stacked=True,
                desc="Mean time per stage of each broker's requests of this type, stacked: the height is the mean total, each band a stage (from the request-log histograms).",
            )
        )
    d = d.with_panel(
        with_line(
            ts(
                "p99 per broker",
                "s",
                q(
                    f'linkwatch:broker_request_p99_seconds:5m{{{CB}, request=~"Produce|FetchConsumer|FetchFollower"}}',
                    "broker {{broker}} {{request}}",
                ),
                desc="Red line: the 300 ms slow-node line. Fetch totals include the long-poll wait (remote stage).",
            ),
            SLOW_LINE_S,
        )
    )
    d = d.with_panel(
        ts(
            "Request handler and network processor idle",
            "percentunit",
            q(f"linkwatch_broker_request_handler_idle_ratio{{{CB}}}", "handlers broker {{broker}}"),
            q(f"linkwatch_broker_network_processor_idle_ratio{{{CB}}}", "network broker {{broker}}", "B"),
            desc="Share of time the broker's request handler threads and network processors are idle (JMX). Near 0: the broker is saturated, requests queue.",
        )
    )
    d = d.with_panel(
        ts(
            "Request / response queue size",
            "none",
            q(f"linkwatch_broker_request_queue_size{{{CB}}}", "request queue {{broker}}"),
            q(f"linkwatch_broker_response_queue_size{{{CB}}}", "response queue {{broker}}", "B"),
            desc="Requests waiting for a handler thread, and responses waiting for a network thread (JMX).",
        )
    )
    d = d.with_panel(
        ts(
            "JMX exact window mean per stage (Produce)",
            "s",
            q(
                f'linkwatch_broker_jmx_stage_mean_seconds{{{CB}, request="Produce"}}',
                "broker {{broker}} {{stage}}",
            ),
            desc="The window's exact mean per stage from JMX Count and Mean (delta of Count x Mean over delta of Count): independent of the request log.",
        )
    )
    return d


def slow_nodes() -> db.Dashboard:
    d = base("linkwatch-slow-nodes", "linkwatch / Slow nodes", "broker")
    d = d.with_panel(
        ts(
            "Slow-broker score (analyzer)",
            "none",
            q(f"linkwatch_slow_broker_score{{{CB}}}", "broker {{broker}} {{request}}"),
            desc="The analyzer's score per broker and request type: up with every window the broker is blamed in, down with every healthy one; the finding fires at fire_score.",
        )
    )
    d = d.with_panel(
        ts(
            "Slow-node findings over time",
            "none",
            q(
                f'sum by (broker, stage) (linkwatch_finding_active{{{C}, rule=~"slow_broker|cluster_slow"}})',
                "broker {{broker}} stage {{stage}}",
            ),
            desc="Active slow_broker and cluster_slow findings by broker and the stage they name.",
        )
    )
    d = d.with_panel(
        ts(
            "p99 over the peers' median",
            "none",
            q(
                f"linkwatch:broker_request_p99_seconds:5m{{{CB}}}"
                " / on (cluster, request) group_left linkwatch:cluster_broker_p99_median_seconds:5m",
                "broker {{broker}} {{request}}",
            ),
            desc="Above 2 for 5 minutes (with p99 > 300 ms) is the slow-broker alert.",
        )
    )
    d = d.with_panel(
        ts(
            "Stage at fault: p99 excess over the peers' median",
            "s",
            q(
                f"linkwatch:broker_request_stage_excess_seconds:5m{{{CB}}}",
                "broker {{broker}} {{request}} {{stage}}",
            ),
            desc="Each stage's p99 minus the median of the other brokers' p99 for it: the stage carrying a slow broker's excess.",
        )
    )
    d = d.with_panel(
        tb(
            "Stage at fault now (largest excess per broker and request)",
            q(
                f"topk by (cluster, broker, request) (1, linkwatch:broker_request_stage_excess_seconds:5m{{{CB}}})",
                instant=True,
            ),
            unit="s",
            desc="For each broker and request type, the stage with the largest p99 excess over its peers' median now.",
        )
    )
    d = d.with_panel(
        ts(
            "Slow requests (exemplars captured) per second",
            "reqps",
            q(
                f"sum by (broker, request) (rate(linkwatch_broker_slow_requests_total{{{CB}}}[$__rate_interval]))",
                "broker {{broker}} {{request}}",
            ),
            desc="Requests the agents logged above the slow threshold (a fetch without its long poll), per second.",
        )
    )
    return probe_row(d)


def probe_row(d: db.Dashboard) -> db.Dashboard:
    """The clients' view of each broker: the probe's partition led by it (``linkwatch probe``)."""
    d = d.with_row(db.Row("Probe (one partition led by every broker)"))
    d = d.with_panel(
        with_line(
            ts(
                "Probe end-to-end p99 per leader broker",
                "s",
                q(
                    f'linkwatch_probe_end_to_end_latency_seconds{{{CB}, quantile="0.99"}}',
                    "broker {{broker}}",
                ),
                desc="Send to read back, from the window's sketch (no upper clamp). A broker far above its peers corroborates a slow-broker finding.",
                span=8,
            ),
            SLOW_LINE_S,
        )
    )
    d = d.with_panel(
        st(
            "Lowest probe availability",
            "percentunit",
            q(f"min(linkwatch_probe_availability_ratio{{{CB}}})"),
            span=4,
            desc="The lowest share of probes acked and read back within the deadline, over the leader brokers.",
        )
    )
    d = d.with_panel(
        ts(
            "Probe produce (ack) p99 per leader broker",
            "s",
            q(f'linkwatch_probe_produce_latency_seconds{{{CB}, quantile="0.99"}}', "broker {{broker}}"),
            span=6,
            desc="The probe's produce-to-ack p99 per leader broker, per window: the latency a client sees, including what the broker's own timers miss.",
        )
    )
    d = d.with_panel(
        ts(
            "Probe availability per leader broker",
            "percentunit",
            q(f"linkwatch_probe_availability_ratio{{{CB}}}", "broker {{broker}}"),
            desc="Share of probes acked and read back within the deadline, per window.",
            span=6,
        )
    )
    return d


def skew_balance() -> db.Dashboard:
    d = base("linkwatch-skew-balance", "linkwatch / Skew and balance", "broker", "topic")
    d = d.with_panel(
        ts(
            "Partition imbalance per topic (max/avg - 1)",
            "none",
            q(f'linkwatch_imbalance_ratio{{{C}, scope="topic", topic=~"$topic"}}', "{{topic}} {{measure}}"),
            desc="Per topic: the busiest partition over the average, minus 1 (0 is balanced), by bytes in and by size.",
        )
    )
    d = d.with_panel(
        ts(
            "Broker and log-dir imbalance (max/avg - 1)",
            "none",
            q(f'linkwatch_imbalance_ratio{{{C}, scope=~"broker|log_dir"}}', "{{scope}} {{measure}}"),
            desc="Across brokers and across log dirs: the busiest over the average, minus 1.",
        )
    )
    d = d.with_panel(
        tb(
            "Hot partitions (largest)",
            q(f'topk(10, linkwatch_partition_size_bytes{{{CB}, topic=~"$topic"}})', instant=True),
            unit="bytes",
            desc="The ten largest partitions on disk now (the agents' log-dir scan).",
        )
    )
    d = d.with_panel(
        tb(
            "Hot keys (share of the topic's records)",
            q(f'topk(10, linkwatch_hot_key_share_ratio{{{C}, topic=~"$topic"}})', instant=True),
            unit="percentunit",
            desc="Keys the analyzer's lossy counting finds above the support threshold, as a share of the topic's sampled records.",
        )
    )
    d = d.with_panel(
        ts(
            "Disk usage per log dir",
            "percentunit",
            q(f"linkwatch:logdir_used_ratio{{{CB}}}", "{{broker}} {{log_dir}}"),
            desc="Used share of each log dir's filesystem.",
        )
    )
    d = d.with_panel(
        ts(
            "Disk I/O busy per log dir",
            "percentunit",
            q(f"linkwatch_logdir_io_util_ratio{{{CB}}}", "{{broker}} {{log_dir}} {{device}}"),
            desc="Share of time the log dir's device is busy with I/O (ioutil): near 1 is a hot disk.",
        )
    )
    d = d.with_panel(
        ts(
            "Partition bytes per log dir",
            "bytes",
            q(f"linkwatch_logdir_partition_bytes{{{CB}}}", "{{broker}} {{log_dir}}"),
            desc="Bytes of partition data in each log dir.",
        )
    )
    d = d.with_panel(
        ts(
            "Leaders and partitions per broker",
            "none",
            q(f"linkwatch_broker_leader_count{{{CB}}}", "leaders {{broker}}"),
            q(f"linkwatch_broker_partition_count{{{CB}}}", "partitions {{broker}}", "B"),
            desc="Partition leaderships and replicas each broker holds (JMX).",
        )
    )
    return d


def consumers() -> db.Dashboard:
    d = base("linkwatch-consumers", "linkwatch / Consumers", "broker", "topic", "group")
    G = f'{C}, group=~"$group"'
    d = d.with_panel(
        ts(
            "Lag in messages",
            "none",
            q(f'linkwatch_consumer_group_lag_messages{{{G}, agg="sum"}}', "{{group}}"),
            desc="Sum over each group's partitions of end offset minus committed offset.",
        )
    )
    d = d.with_panel(
        ts(
            "Lag in seconds",
            "s",
            q(f'linkwatch_consumer_group_lag_seconds{{{G}, agg="max"}}', "{{group}}"),
            desc="The group's largest lag in time: how old the next record it will read is.",
        )
    )
    d = d.with_panel(
        tb(
            "Status per group",
            q(f"max by (group, status) (linkwatch_consumer_group_status{{{G}}}) == 1", instant=True),
            unit="none",
            desc="The lag collector's status per group (OK, WARN, STALL, STOP, REWIND, ERR); the reason is in its log and findings.",
        )
    )
    d = d.with_panel(
        ts(
            "Page-cache window vs lag (cold-read risk when lag is above the window)",
            "s",
            q(f"linkwatch_host_page_cache_window_seconds{{{CB}}}", "page-cache window broker {{broker}}"),
            q(f'linkwatch_consumer_group_lag_seconds{{{G}, agg="max"}}', "lag {{group}}", "B"),
            desc="How long the brokers' page cache holds written data (cached bytes / write rate) against each group's lag in seconds.",
        )
    )
    d = d.with_panel(
        ts(
            "Partitions at cold-read risk",
            "none",
            q(
                f'sum by (group, topic) (linkwatch_consumer_cold_read_risk{{{G}, topic=~"$topic"}})',
                "{{group}} {{topic}}",
            ),
            desc="Partitions whose group lags behind further than the page cache holds: their reads go to disk.",
        )
    )
    d = d.with_panel(
        ts(
            "Client wait-fetch p99 vs broker send p99 (FetchConsumer)",
            "s",
            q(
                "histogram_quantile(0.99, sum by (group, le) "
                f"(rate(linkwatch_client_wait_fetch_seconds_bucket{{{G}}}[$__rate_interval])))",
                "client wait-fetch {{group}}",
            ),
            q(
                f'linkwatch:broker_request_stage_p99_seconds:5m{{{CB}, request="FetchConsumer", stage="send"}}',
                "broker {{broker}} send",
                "B",
            ),
            desc="A broker send time far above the client's wait means the client does not fetch promptly.",
        )
    )
    return d


DASHBOARDS: dict[str, Callable[[], db.Dashboard]] = {
    "cluster-overview": cluster_overview,
    "broker-latency": broker_latency,
    "slow-nodes": slow_nodes,
    "skew-balance": skew_balance,
    "consumers": consumers,
}


def to_json(d: db.Dashboard) -> str:
    model = d.build()
    for i, panel in enumerate(model.panels or [], start=1):
        panel.id_val = i  # unique panel ids (links and the "view panel" URL use them)
    doc = json.loads(JSONEncoder(sort_keys=True).encode(model))
    latency = [
        p["id"]
        for p in doc["panels"]
        if p.get("type") == "timeseries" and p["fieldConfig"]["defaults"].get("unit") == LATENCY_UNIT
    ]
    for a in doc.get("annotations", {}).get("list", []):
        if a.get("name") == FINDINGS_ANNOTATION:
            # The SDK's model lacks the Prometheus annotation's own keys: set them here.
            a.update(
                {
                    "filter": {"exclude": False, "ids": latency},
                    "titleFormat": "{{rule}} {{subject}}",
                    "textFormat": "{{severity}}: stage {{stage}}",
                    "tagKeys": "rule,severity,stage",
                    "step": "10s",
                    "useValueForTime": False,
                }
            )
            if not latency:
                a["enable"] = False
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def write_all(out_dir: Path) -> list[Path]:
    """Generate every dashboard into ``out_dir/<name>.json``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, make in DASHBOARDS.items():
        path = out_dir / f"{name}.json"
        path.write_text(to_json(make()))
        paths.append(path)
    return paths


def panel_queries(dash: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, expr) of every target in a dashboard's JSON (rows included)."""
    return [(title, expr) for title, expr, _ in panel_targets(dash)]


def panel_targets(dash: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(panel title, expr, instant) of every target: what Grafana runs for the panel — an
    instant query for ``instant`` targets, otherwise a range query over the dashboard's time."""
    out = []
    for panel in dash.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []) or []:
                if target.get("expr"):
                    out.append((inner.get("title", ""), target["expr"], bool(target.get("instant"))))
    return out


def annotation_queries(dash: dict[str, Any]) -> list[tuple[str, str, list[int]]]:
    """(name, expr, panel ids it is drawn on) of every enabled Prometheus annotation."""
    return [
        (a["name"], a["expr"], a.get("filter", {}).get("ids", []))
        for a in dash.get("annotations", {}).get("list", [])
        if a.get("expr") and a.get("enable", True)
    ]


def variable_queries(dash: dict[str, Any]) -> dict[str, str]:
    """Template variable name -> its ``label_values(...)`` query (query variables only)."""
    out = {}
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            query = v.get("query")
            out[v["name"]] = query.get("query", "") if isinstance(query, dict) else str(query)
    return out


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
