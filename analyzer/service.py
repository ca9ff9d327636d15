"""The running analyzer: stream samples into the archive, evaluate detectors on a timer.

:class:`AnalysisService` wires the parts: the Spark stream (Kafka → dedup → Parquet archive),
the key sampler, the engine (detectors → policy → sinks) and the metric gauges. Each
:meth:`AnalysisService.tick` evaluates the last ``lookback_windows`` windows at ``now``: with
``evaluation: incremental`` from the in-driver :class:`~aggregation.window_state.WindowState`
that a Kafka consumer in the driver feeds (``window_feed``; rebuilt from the archive at start),
with no Spark job per evaluation (the default); with ``evaluation: reread`` by reading the archive
again with the batch transforms. :func:`run_continuously` is the entry point
for the CLI and ``spark-submit`` (the demo runs the service through
``testbed.demo.analyzer``).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, StrictStr, StringConstraints, field_validator, model_validator

from aggregation.window_state import KINDS as STATE_KINDS
from aggregation.window_state import WindowState
from analyzer.base import FindingSink
from analyzer.engine import Engine
from analyzer.registry import load_detectors
from analyzer.sinks import KafkaFindingSink, PrometheusSink, TerminalSink
from findings.pipeline import FindingPipeline, PipelineConfig
from findings.policy import FindingPolicyConfig, SeverityPolicyConfig
from findings.tracker import Changes
from linkwatch import records as R
from linkwatch.aggregates import Aggregates
from linkwatch.config import DirLocation, FileLocation, StrictModel, rename_keys
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.metrics_server import MetricsServer, MetricsServerConfig, Port
from linkwatch.records import DEFAULT_CLUSTER, FINDINGS_TOPIC, SAMPLES_TOPIC, Finding

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from spark_metrics.streaming import EventTimeBounds, StreamOptions

log = logging.getLogger(__name__)

# How long evaluation waits for a started driver feed to catch up (analyzer/window_feed.py):
# the horizon's samples read at tens of thousands a second take seconds; only a partition that
# cannot be read is still behind at this point.
FEED_CATCH_UP_MAX_S = 120.0
DEFAULT_DETECTORS = {"slow_broker": None, "skewed_partitions": None, "hot_keys": None, "disk_imbalance": None}


class HotKeySampling(StrictModel):
    topics: list[str] = Field(default_factory=list)
    support: float = Field(0.05, gt=0, lt=1)
    epsilon: float = Field(0.005, gt=0, lt=1)
    sample_every: int = Field(1, ge=1)
    max_records_per_tick: int = Field(20_000, ge=1)


class AnalyzerMetricsConfig(MetricsServerConfig):
    """The analyzer's ``/metrics`` endpoint (``linkwatch.metrics_server``)."""

    port: Port = 9310

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"listen": "host"}, "metrics")


PrometheusConfig = AnalyzerMetricsConfig  # its name before the section was called metrics


# A SparkSession setting's name: Spark's own namespace only, so a typo of another key is caught.
SparkKey = Annotated[str, StringConstraints(pattern=r"^spark\.[A-Za-z0-9_.-]+$", max_length=200)]


class AnalyzerKafkaConfig(KafkaClientConfig):
    bootstrap_servers: str = Field("127.0.0.1:9092", min_length=1)


class AnalyzerConfig(StrictModel):
    cluster: str = DEFAULT_CLUSTER
    # The cluster holding samples_topic (and receiving findings_topic and hot_keys' topics).
    kafka: AnalyzerKafkaConfig = Field(default_factory=lambda: AnalyzerKafkaConfig())
    samples_topic: str = SAMPLES_TOPIC
    findings_topic: str = FINDINGS_TOPIC
    publish_findings: bool = True
    window_s: int = Field(10, ge=1)
    # × window_s must exceed the pipeline latency (docs). 30: the slow-broker model reads the
    # last history_windows (12), each against a baseline of up to baseline_windows (18) windows
    # before it; fewer would judge the older windows against a shorter baseline than a replay.
    lookback_windows: int = Field(30, ge=1)
    interval_s: float = Field(5.0, gt=0)
    watermark: str = "2 minutes"
    # The stream drops (and counts, linkwatch_analyzer_stream_dropped_total{reason}) a record
    # whose event time lies outside [processing time − max_event_age, processing time +
    # max_event_lead] before any watermark or state sees it: one clock-skewed agent must not move
    # the archive's watermark (kept in its checkpoint) past everyone's records. The lead must be
    # shorter than the watermark (checked); the age bounds what a restart re-archives from the
    # topic's backlog (docs/analyzer.md, "A stream no producer can stop").
    max_event_age: str = "1 day"
    max_event_lead: str = "30 seconds"
    max_record_bytes: int = Field(1 << 20, ge=1024)  # larger records are dropped unparsed (oversize)
    # incremental (the default): windows kept in memory, fed once per micro-batch; reread: the
    # archive read again at every evaluation (the earlier path, seconds of Spark jobs per
    # evaluation; kept for comparison and where the driver's memory is the constraint).
    evaluation: Literal["incremental", "reread"] = "incremental"
    state_max_records: int = Field(200_000, ge=1)  # records held by the incremental state (docs)
    # incremental: what feeds the window state. driver (the default): a Kafka consumer in the
    # driver (analyzer/window_feed.py: no micro-batch between a record and the state); spark: a
    # second Structured Streaming query beside the archive's (the earlier path; its micro-batch
    # is most of a window's time to evaluation on a small machine, bench/results/fleet.md).
    window_feed: Literal["driver", "spark"] = "driver"
    # incremental: a window not yet complete (a broker / replica of the window before it still
    # missing) is evaluated anyway once it ended this long ago (docs/analyzer.md).
    window_settle_s: float = Field(15.0, ge=0)
    trigger_s: float = Field(2.0, gt=0)
    state_dir: DirLocation = Path.home() / ".local" / "share" / "linkwatch" / "analyzer"
    # local[N] (the default), spark://host:port (standalone), yarn, k8s://https://host:port, or
    # "" to take it from spark-submit's --master (docs/analyzer.md "Running on a Spark cluster").
    spark_master: str = "local[2]"
    shuffle_partitions: int = Field(2, ge=1)  # the aggregates are small; more partitions only add tasks
    # Extra SparkSession settings, over linkwatch's (spark_metrics.session); values are strings
    # as Spark takes them ("false", not false). JVM options only act when the JVM starts.
    spark_conf: dict[SparkKey, StrictStr] = Field(default_factory=dict)
    spark_log: FileLocation | None = None  # Spark's log and the JVM's stderr, appended (None: stderr)
    detectors: dict[str, dict | None] = Field(default_factory=lambda: dict(DEFAULT_DETECTORS))
    policy: SeverityPolicyConfig = Field(default_factory=SeverityPolicyConfig)
    hot_keys: HotKeySampling = Field(default_factory=HotKeySampling)
    metrics: AnalyzerMetricsConfig = Field(default_factory=AnalyzerMetricsConfig)
    # The findings pipeline (policy, notifiers, remediator). Absent: notify only, as before.
    remediation: PipelineConfig | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"bootstrap": "kafka.bootstrap_servers", "prometheus": "metrics"})

    @field_validator("kafka", mode="before")
    @classmethod
    def _any_client_section(cls, v: Any) -> Any:
        # another part's section (a plain KafkaClientConfig) is taken key by key, validated here
        return dict(v) if isinstance(v, KafkaClientConfig) else v

    @field_validator("state_dir")
    @classmethod
    def _expand(cls, v: Path) -> Path:
        return Path(v).expanduser()

    @field_validator("spark_master")
    @classmethod
    def _master(cls, v: str) -> str:
        return check_master_url(v)

    @field_validator("watermark", "max_event_age", "max_event_lead")
    @classmethod
    def _interval(cls, v: str) -> str:
        interval_ms(v)
        return v

    @model_validator(mode="after")
    def _lead_within_watermark(self) -> AnalyzerConfig:
        lead, delay = interval_ms(self.max_event_lead), interval_ms(self.watermark)
        if lead >= delay:
            raise ValueError(
                f"max_event_lead {self.max_event_lead!r} must be shorter than watermark {self.watermark!r}: "
                "a record stamped max_event_lead ahead moves the archive's watermark to now + "
                "max_event_lead − watermark, and every record older than that is dropped as late"
            )
        return self

    @property
    def event_time_bounds(self) -> EventTimeBounds:
        from spark_metrics.streaming import EventTimeBounds

        return EventTimeBounds(interval_ms(self.max_event_age), interval_ms(self.max_event_lead))

    @property
    def state_horizon_ms(self) -> int:
        """How far back the incremental state keeps windows: the lookback, the window being
        filled and the watermark (records later than that are counted drops)."""
        return self.window_s * 1000 * (self.lookback_windows + 1) + interval_ms(self.watermark)


# The master URLs Spark 4 accepts (SparkContext's master parsing, spark-submit's --master).
_MASTER_FORMS = (
    ("local", re.compile(r"local(\[(\d+|\*)(,\d+)?\])?")),
    ("local-cluster[workers,cores,memory_mb]", re.compile(r"local-cluster\[\d+,\d+,\d+\]")),
    ("spark://host:port[,host:port…]", re.compile(r"spark://[\w.-]+:\d{1,5}(,[\w.-]+:\d{1,5})*")),
    ("yarn", re.compile(r"yarn")),
    ("k8s://[https://]host:port", re.compile(r"k8s://(https?://)?[\w.-]+(:\d{1,5})?(/[\w./-]*)?")),
)


def check_master_url(url: str) -> str:
    """``url`` if Spark takes it as a master URL (or empty: spark-submit's ``--master``
    decides); otherwise a ``ValueError`` listing the forms, so a typo stops start-up instead of
    failing later inside Spark."""
    if url == "" or any(rx.fullmatch(url) for _, rx in _MASTER_FORMS):
        return url
    forms = ", ".join(name for name, _ in _MASTER_FORMS)
    raise ValueError(f'not a Spark master URL: use one of {forms}, or "" to take spark-submit\'s --master')


_UNITS_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_PART = re.compile(r"\s*(\d+)\s*(millisecond|second|minute|hour|day)s?\s*")


def interval_ms(text: str) -> int:
    """A Spark interval such as ``"2 minutes"`` or ``"1 minute 30 seconds"`` in milliseconds."""
    parts = _PART.findall(text)
    if not parts or _PART.sub("", text):
        raise ValueError(f"{text!r}: expected '<n> <unit>' pairs, unit one of {sorted(_UNITS_MS)}")
    return sum(int(n) * _UNITS_MS[unit] for n, unit in parts)


class PipelineSink(FindingSink):
    """Hands every finding event (appeared, ongoing, cleared) to the findings pipeline."""

    def __init__(self, pipeline: FindingPipeline) -> None:
        self.pipeline = pipeline

    def emit(self, finding: Finding) -> None:
        self.pipeline.handle(finding)


class WindowStateCollector:
    """Exports the incremental state's size and what it dropped (``reason`` as in
    :class:`~aggregation.window_state.WindowState`), read at scrape time."""

    def __init__(self, service: AnalysisService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        state = self.service.state
        if state is None:
            return
        yield GaugeMetricFamily(
            "linkwatch_analyzer_window_state_records", "records held by the window state", value=state.records
        )
        dropped = CounterMetricFamily(
            "linkwatch_analyzer_window_state_dropped",
            "records the window state could not keep",
            labels=["reason"],
        )
        for reason, n in sorted({**state.dropped, "duplicate": state.duplicates}.items()):
            dropped.add_metric([reason], n)
        yield dropped
        yield CounterMetricFamily(
            "linkwatch_analyzer_window_state_expired",
            "records of windows aged out of the lookback",
            value=state.expired,
        )
        yield CounterMetricFamily(
            "linkwatch_analyzer_window_stream_restarts",
            "times the window feed failed and was started again from a rebuilt state",
            value=self.service.window_restarts,
        )


class StreamDropsCollector:
    """Exports what the samples stream discarded before any watermark or state saw it, by
    reason (:data:`spark_metrics.streaming.DROP_REASONS` and ``late``), read at scrape time."""

    def __init__(self, service: AnalysisService) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily

        dropped = CounterMetricFamily(
            "linkwatch_analyzer_stream_dropped",
            "records of the samples topic the stream discarded, by reason",
            labels=["reason"],
        )
        for reason, n in sorted(self.service.stream_drops.counts().items()):
            dropped.add_metric([reason], n)
        yield dropped


class AnalysisService:
    def __init__(
        self,
        cfg: AnalyzerConfig,
        sinks: list[FindingSink] | None = None,
        clock: Callable[[], float] = time.time,
        pipeline: FindingPipeline | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.detectors = load_detectors(cfg.detectors)  # fails fast on unknown names / bad thresholds
        self.metrics = PrometheusSink(gauges=[g for d in self.detectors for g in d.gauges])
        extra = list(sinks) if sinks is not None else [TerminalSink()]
        self.pipeline = pipeline
        if self.pipeline is None and cfg.remediation is not None:
            from alerts.hooks.findings import load_notifiers
            from findings.pipeline import build_pipeline

            self.pipeline = build_pipeline(cfg.remediation, load_notifiers(cfg.remediation.notifiers))
        policy = cfg.policy.as_policy()
        if self.pipeline is not None:
            # The pipeline's policy decides; the engine passes every finding and its clearing on.
            policy = FindingPolicyConfig(rules=[], recheck_after_s=cfg.policy.recheck_after_s)
            extra.append(PipelineSink(self.pipeline))
        self.engine = Engine(self.detectors, sinks=[self.metrics, *extra], policy=policy)
        self.spark = None
        self.query = None
        self.sampler = None
        self.last: Aggregates | None = None
        self.state: WindowState | None = None
        self.window_query = None
        self.window_restarts = 0  # the window stream failed and was started again
        self._stopping = threading.Event()
        # Set when a micro-batch completes a newer window: the next evaluation runs then, not at
        # the end of interval_s (a window's findings need not wait up to an interval more).
        self._window_done = threading.Event()
        self._complete_through: int | None = None
        self._feed_started = 0.0  # time.monotonic() at the driver feed's start
        self._feed_said = ""  # what was logged about its catching up: "", "waiting", "late"
        self._archive_opts: StreamOptions | None = None
        from spark_metrics.streaming import StreamDrops

        self.stream_drops = StreamDrops()
        self._drops_listener = None
        self.metrics.registry.register(WindowStateCollector(self))
        self.metrics.registry.register(StreamDropsCollector(self))
        self._http: MetricsServer | None = None

    @property
    def metrics_port(self) -> int | None:
        """The ``/metrics`` port as bound (``metrics.port: 0`` picks a free one), once started."""
        return self._http.server_port if self._http is not None else None

    @property
    def archive_dir(self) -> Path:
        return self.cfg.state_dir / "archive"

    def start(self) -> AnalysisService:
        from spark_metrics.session import spark_session
        from spark_metrics.streaming import StreamDropsListener, StreamOptions, start_archive_stream

        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        self.spark = spark_session(
            self.cfg.spark_master,
            app_name="linkwatch-analyze",
            kafka=True,
            shuffle_partitions=self.cfg.shuffle_partitions,
            # The stream submits a job every trigger; FAIR lets evaluation jobs run between them
            # instead of queueing behind a stream that is catching up.
            extra={"spark.scheduler.mode": "FAIR", **self.cfg.spark_conf},
            log_file=self.cfg.spark_log,
        )
        opts = StreamOptions(
            kafka=self.cfg.kafka,
            archive_dir=self.archive_dir,
            checkpoint_dir=self.cfg.state_dir / "checkpoint",
            topic=self.cfg.samples_topic,
            watermark=self.cfg.watermark,
            trigger_s=self.cfg.trigger_s,
            bounds=self.cfg.event_time_bounds,
            max_record_bytes=self.cfg.max_record_bytes,
        )
        self._check_checkpoint(opts.checkpoint_dir)
        self._drops_listener = StreamDropsListener(self.stream_drops)
        self.spark.streams.addListener(self._drops_listener)
        self.query = start_archive_stream(self.spark, opts)
        if self.cfg.evaluation == "incremental":
            self._start_state(opts)
        if self.cfg.publish_findings:
            self.engine.sinks.append(KafkaFindingSink(self.cfg.kafka, self.cfg.findings_topic))
        if self.cfg.hot_keys.topics:
            from analyzer.key_sampler import KeySampler

            hk = self.cfg.hot_keys
            self.sampler = KeySampler(
                self.cfg.kafka,
                hk.topics,
                hk.support,
                hk.epsilon,
                hk.sample_every,
                hk.max_records_per_tick,
            )
        if self.cfg.metrics.enabled:
            self._http = MetricsServer(
                self.metrics.registry, self.cfg.metrics.host, self.cfg.metrics.port
            ).start()
        return self

    def _check_checkpoint(self, checkpoint_dir: Path) -> None:
        """Say so when the archive's checkpoint resumes with a watermark ahead of the clock:
        a record stamped in the future reached it before the event-time bound existed (or with
        a wider ``max_event_lead``), and the archive drops every record older than it as late
        until the clock catches up. Only a new checkpoint clears it."""
        from spark_metrics.streaming import checkpoint_watermark_ms

        mark = checkpoint_watermark_ms(checkpoint_dir)
        now_ms = int(self.clock() * 1000)
        if mark is not None and mark > now_ms + interval_ms(self.cfg.max_event_lead):
            log.error(
                "the archive's checkpoint %s resumes with a watermark %.0f s ahead of now: every record "
                "older than it is dropped as late (reason=late). Stop the analyzer and move the "
                "checkpoint away; the stream then starts again from the topic (the archive is kept, "
                "and re-archived records are removed by key when it is read)",
                checkpoint_dir,
                (mark - now_ms) / 1000,
            )

    def _start_state(self, archive: StreamOptions) -> None:
        """Rebuild the window state from the archive's horizon, then feed it from the samples
        topic read again from that horizon (re-sends are dropped by key): by a consumer in the
        driver (``window_feed: driver``) or by a second Spark query (``spark``)."""
        now_ms = int(self.clock() * 1000)
        self.state = self.rebuild_state(now_ms)
        self._archive_opts = archive
        if self.cfg.window_feed == "driver":
            from analyzer.window_feed import WindowFeed

            self.window_query = WindowFeed(
                archive.kafka,
                archive.topic,
                self._on_records,
                now_ms - self.cfg.state_horizon_ms,
                STATE_KINDS,
                self.state.dropped,
                max_age_ms=archive.bounds.max_age_ms,
                max_lead_ms=archive.bounds.max_lead_ms,
                max_record_bytes=archive.max_record_bytes,
                clock=self.clock,
                on_caught_up=self._window_done.set,  # evaluate now, not at the next interval
            ).start()
            self._feed_started = time.monotonic()
            self._feed_said = ""
            return
        from spark_metrics.streaming import StreamOptions, start_window_stream

        opts = StreamOptions(
            kafka=archive.kafka,
            archive_dir=archive.archive_dir,
            checkpoint_dir=self.cfg.state_dir / "window-checkpoint",
            topic=archive.topic,
            trigger_s=archive.trigger_s,
            bounds=archive.bounds,
            max_record_bytes=archive.max_record_bytes,
        )
        self.window_query = start_window_stream(
            self.spark,
            opts,
            self._on_batch,
            now_ms - self.cfg.state_horizon_ms,
            STATE_KINDS,
            stopping=self._stopping,
        )

    def _check_window_stream(self) -> None:
        """A failed window stream (its error is logged by the batch handler) is started again
        from a state rebuilt from the archive, so the evaluation never goes on from a state
        that stopped growing."""
        query = self.window_query
        if query is None or self._stopping.is_set() or query.isActive:
            return
        log.error("the window stream stopped (%s); rebuilding the window state", query.exception())
        self.window_restarts += 1
        self._start_state(self._archive_opts)

    def _feed_caught_up(self) -> bool:
        """Whether the window state may be judged: the driver feed has read every partition up
        to its end at the feed's start (``WindowFeed.caught_up``; the Spark query has no such
        gap: its first micro-batch reads them all at once). Before that the state lacks some
        partitions' samples, and their brokers would be judged on a part of their windows or
        as unseen. A feed still behind after ``FEED_CATCH_UP_MAX_S`` (a partition that cannot be
        read, its leader offline) is judged on what it read, with a warning naming the partitions
        behind: one unreadable partition must not stop every judgement."""
        caught = getattr(self.window_query, "caught_up", None)
        if caught is None or caught.is_set():
            return True
        waited_s = time.monotonic() - self._feed_started
        if waited_s < FEED_CATCH_UP_MAX_S:
            if self._feed_said != "waiting":
                self._feed_said = "waiting"
                log.info(
                    "evaluation waits for the window feed to read %s up to where it started",
                    self.cfg.samples_topic,
                )
            return False
        if self._feed_said != "late":
            self._feed_said = "late"
            log.warning(
                "the window feed has not read partitions %s of %s up to where it started after %.0f s; "
                "evaluating on what it read (their brokers may be judged on part of their samples)",
                self.window_query.behind,
                self.cfg.samples_topic,
                waited_s,
            )
        return True

    def rebuild_state(self, now_ms: int) -> WindowState:
        """A window state holding the archive's records of the state horizon before ``now_ms``."""
        state = WindowState(
            self.cfg.cluster,
            self.cfg.window_s,
            self.cfg.state_horizon_ms,
            self.cfg.state_max_records,
            settle_ms=int(self.cfg.window_settle_s * 1000),
        )
        state.add_json(self._archived_values(now_ms - self.cfg.state_horizon_ms, now_ms), now_ms)
        return state

    def _archived_values(self, from_ms: int, to_ms: int) -> list[str]:
        from pyspark.sql import functions as F

        from spark_metrics.batch import read_archive

        raw = read_archive(self.spark, self.archive_dir, from_ms, to_ms, single_partition=True)
        if raw is None:
            return []
        kinds = F.get_json_object("value", "$.kind").isin(list(STATE_KINDS))
        return [r["value"] for r in raw.where(kinds).collect()]

    def _on_batch(self, values: list[str]) -> None:
        """The Spark feed's micro-batch (record JSON), in the driver."""
        self._fold(lambda now_ms: self.state.add_json(values, now_ms), len(values))

    def _on_records(self, recs: list[R.Record]) -> None:
        """The driver feed's poll (records decoded and checked by the feed)."""
        self._fold(lambda now_ms: self.state.add(recs, now_ms), len(recs))

    def _fold(self, add: Callable[[int], None], n: int) -> None:
        # Runs in the feed's thread; an exception would stop the feed.
        try:
            now_ms = int(self.clock() * 1000)
            add(now_ms)
            done = self.state.complete_stages_through(now_ms)
            if done is not None and (self._complete_through is None or done > self._complete_through):
                self._complete_through = done
                self._window_done.set()
        except Exception:
            self.state.dropped["batch_failed"] += n
            log.exception("merging a micro-batch into the window state failed; %d records dropped", n)

    def _reread(self, since: int, now_ms: int, hot: tuple) -> Aggregates:
        from spark_metrics.aggregate import aggregate, collect
        from spark_metrics.batch import read_archive

        # Our own scheduler pool: shares the cores fairly with the stream's (default) pool.
        self.spark.sparkContext.setLocalProperty("spark.scheduler.pool", "linkwatch-analysis")
        raw = read_archive(self.spark, self.archive_dir, since, now_ms, single_partition=True)
        if raw is None:
            return Aggregates(cluster=self.cfg.cluster, window_s=self.cfg.window_s, hot_keys=hot)
        raw = raw.cache()  # read the archive once per evaluation, not once per aggregate
        try:
            frames = aggregate(raw, self.cfg.window_s, cluster=self.cfg.cluster, deduplicate=False)
            return collect(frames, self.cfg.cluster, self.cfg.window_s, hot)
        finally:
            raw.unpersist()

    def tick(self, now_ms: int | None = None) -> Changes:
        """Evaluate once over the recent windows (from the window state, or re-read from the
        archive with ``evaluation: reread``)."""
        now_ms = int(self.clock() * 1000) if now_ms is None else now_ms
        span = self.cfg.window_s * 1000 * self.cfg.lookback_windows
        hot = ()
        if self.sampler is not None:
            skipped = self.sampler.skipped
            self.sampler.poll()
            hot = self.sampler.hot_keys()
            self.metrics.key_sampler_skipped.labels(self.cfg.cluster).inc(self.sampler.skipped - skipped)
        since = now_ms - span - self.cfg.window_s * 1000
        self._check_window_stream()
        if self.state is not None and not self._feed_caught_up():
            return Changes()
        if self.state is not None:
            data = self.state.aggregates(now_ms, since, hot)
        else:
            data = self._reread(since, now_ms, hot)
        self.last = data
        changes = self.engine.evaluate(data, now_ms)
        if self.pipeline is not None:
            self.pipeline.tick()
        self.metrics.observe(data, self.engine.measure(data, now_ms))
        return changes

    def run(self, stop: threading.Event, on_change: Callable[[Changes], None] | None = None) -> None:
        """Tick every ``interval_s``, and as soon as a newer window is complete, until ``stop``
        is set; a failed tick is logged and retried."""
        while not stop.is_set():
            started = time.monotonic()
            try:
                changes = self.tick()
                if on_change is not None:
                    on_change(changes)
            except Exception:
                log.exception("analysis tick failed; retrying next interval")
            self.wait_next(stop, started)

    def wait_next(self, stop: threading.Event, started: float, poll_s: float = 0.25) -> None:
        """Wait until ``interval_s`` after ``started`` (``time.monotonic()``), or until a
        micro-batch completes a newer window (``evaluation: incremental``), or ``stop``. At
        most one extra evaluation per window: windows complete once every ``window_s``."""
        while not stop.is_set():
            left = self.cfg.interval_s - (time.monotonic() - started)
            if left <= 0:
                return
            if self._window_done.wait(min(left, poll_s)):
                self._window_done.clear()
                return

    def stop(self) -> None:
        self._stopping.set()  # before the stop cancels a running micro-batch (window_batch_handler)
        for query in (self.window_query, self.query):
            if query is None:
                continue
            try:
                query.stop()
            except Exception:
                log.exception("stopping the stream %s failed", query.name)
        if self._drops_listener is not None:
            try:
                self.spark.streams.removeListener(self._drops_listener)
            except Exception:
                log.exception("removing the stream's drop listener failed")
        if self.sampler is not None:
            self.sampler.close()
        self.engine.close()
        if self._http is not None:
            self._http.close()


def run_continuously(
    cfg: AnalyzerConfig, stop: threading.Event | None = None, write: Callable[[str], None] = print
) -> AnalysisService:
    """Run the analysis until ``stop`` is set (or Ctrl-C), printing findings as they appear
    and clear. Returns the stopped service (its ``engine.tracker.active`` holds the last state)."""
    stop = stop or threading.Event()
    service = AnalysisService(cfg, sinks=[TerminalSink(write)]).start()
    try:
        service.run(stop)
    except KeyboardInterrupt:
        pass
    finally:
        service.stop()
    return service


if __name__ == "__main__":  # spark-submit entry point: spark-submit … analyzer/service.py <config.yaml>
    import sys

    from linkwatch.config import load_config

    run_continuously(
        load_config(sys.argv[1] if len(sys.argv) > 1 else None, AnalyzerConfig, "LINKWATCH_ANALYZER_")
    )
