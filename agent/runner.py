"""One agent per broker: wires sources to outputs and runs the loop.

:class:`Agent` is the library entry point (the CLI and the demo call it): ``start`` opens the
outputs, ``step`` does one poll round and never raises for bad data or an unreachable output,
``run`` loops until asked to stop, ``stop`` flushes what can be flushed. Each source and output
is isolated: one failing is counted and logged and the others go on.

Agents for the nodes of a local test cluster are started by :mod:`testbed.agents`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from agent.config import AgentConfig
from agent.exporters.http import AgentHttpServer
from agent.exporters.prometheus import AgentMetrics, make_registry
from agent.health import Health
from agent.requestlog.source import RequestLogSource
from agent.requestlog.window import ClosedWindow, WindowAggregator
from linkwatch.errors import SetupError
from linkwatch.kafka_client import kafka_python_kwargs
from linkwatch.metrics_server import serve_metrics
from linkwatch.records import Record

log = logging.getLogger("linkwatch.agent")


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.config = config
        self.health = Health()
        self.metrics = AgentMetrics(config.cluster, config.broker_id, self.health)
        self.registry = make_registry(self.metrics)
        self.http_server = None
        self.sink = None
        self.listeners: list[Callable[[ClosedWindow], None]] = []
        self.collectors: list = []  # periodic collectors: .due(now) / .collect(now) -> records
        rl = config.request_log
        self.aggregator = WindowAggregator(
            cluster=config.cluster,
            broker=config.broker_id,
            window_s=rl.window_s,
            grace_s=rl.grace_s,
            slow_threshold_ms=rl.slow_threshold_ms,
            max_exemplars=rl.max_exemplars_per_window,
            max_ahead_s=rl.max_ahead_s,
        )
        self.request_log = (
            RequestLogSource(
                rl.path,
                self.aggregator,
                self.health,
                position_file=rl.position_file,
                start_at_end=rl.start_at == "end",
                max_line_bytes=rl.max_line_bytes,
                zone=rl.zone(),
            )
            if rl.enabled
            else None
        )
        self._histogram_requests = frozenset(rl.histogram_requests)
        self.capture = self._make_capture() if rl.enabled and config.capture.policy == "sampled" else None
        self._add_jmx()
        self._add_disk_and_host()
        self.tracer = None
        if config.otlp.endpoint:
            try:
                from agent.output.otlp import SlowRequestTracer, make_exporter
            except ImportError as e:  # the [tracing] extra is not installed
                raise SetupError(
                    f"otlp.endpoint is set but {e.name} is not installed: install linkwatch[agent,tracing]"
                ) from None

            self.tracer = SlowRequestTracer(
                make_exporter(config.otlp.endpoint, config.otlp.timeout_s),
                cluster=config.cluster,
                broker=config.broker_id,
            )
            self.listeners.append(lambda win: self.tracer.emit(win.slow_requests))
        self.page_cache = None
        pc = config.page_cache
        if pc.enabled:  # without log_dirs.paths it answers 404 no_log_dirs
            from agent.pagecache_http import PageCacheEndpoint, PageCacheLimits

            self.page_cache = PageCacheEndpoint(
                config.log_dirs.paths,
                config.broker_id,
                PageCacheLimits(
                    span_bytes=pc.span_bytes,
                    skip_bytes=pc.skip_bytes,
                    resident_ratio_below=pc.resident_ratio_below,
                    max_span_bytes=pc.max_span_bytes,
                    max_skip_bytes=64 * 1024 * 1024,
                    max_concurrent=pc.max_concurrent,
                ),
            )
        self._stop = threading.Event()

    def _make_capture(self):
        from agent.capture import BrokerLoggerSwitch, CaptureScheduler

        cap = self.config.capture

        def admin():  # made on first switch, again after a failed one (agent.capture)
            from linkwatch.kafka_client import admin_client
            from linkwatch.reach import check_kafka

            # A broker that does not answer fails in seconds with one line naming the key (reported
            # through on_error, rate-limited), not after a 30 s bootstrap and the client's retries.
            check_kafka(cap.kafka, "capture.kafka.bootstrap_servers")
            return admin_client(**kafka_python_kwargs(cap.kafka, "agent-capture"))

        switch = BrokerLoggerSwitch(
            admin, [self.config.broker_id], idle_level=cap.idle_level, dry_run=cap.dry_run
        )
        return CaptureScheduler(
            switch,
            window_s=self.config.request_log.window_s,
            cpu_budget_pct=cap.cpu_budget_pct,
            full_capture_cost_pct=cap.full_capture_cost_pct,
            max_lines_per_s=cap.max_lines_per_s,
            min_slice_s=cap.min_slice_s,
            slices_per_window=cap.slices_per_window,
            on_error=lambda detail: self.health.drop("capture_switch_error", detail),
        )

    def _add_jmx(self) -> None:
        from agent.jmx.collector import ExporterReader, JmxCollector, JolokiaReader

        jmx = self.config.jmx
        readers = []
        if jmx.jolokia_url:
            readers.append(JolokiaReader(jmx.jolokia_url, jmx.timeout_s))
        if jmx.exporter_url:
            readers.append(ExporterReader(jmx.exporter_url, jmx.timeout_s))
        for reader in readers:
            self.collectors.append(
                JmxCollector(
                    reader,
                    cluster=self.config.cluster,
                    broker=self.config.broker_id,
                    health=self.health,
                    metrics=self.metrics,
                    interval_s=jmx.interval_s,
                    request_handler_pools=jmx.request_handler_pools,
                )
            )

    def _add_disk_and_host(self) -> None:
        from agent.logdirs import HostCollector, LogDirCollector

        cfg = self.config
        common = {
            "cluster": cfg.cluster,
            "broker": cfg.broker_id,
            "health": self.health,
            "metrics": self.metrics,
        }
        if cfg.log_dirs.paths:
            self.collectors.append(
                LogDirCollector(
                    [str(p) for p in cfg.log_dirs.paths],
                    interval_s=cfg.log_dirs.interval_s,
                    partition_records=cfg.log_dirs.partition_records,
                    top_partitions=cfg.log_dirs.top_partitions,
                    **common,
                )
            )
        if cfg.host.enabled:
            self.collectors.append(HostCollector(interval_s=cfg.host.interval_s, **common))

    @property
    def metrics_port(self) -> int | None:
        return self.http_server.server_port if self.http_server is not None else None

    def start(self) -> Agent:
        cfg = self.config
        # /metrics and /page-cache on one aiohttp server (agent.exporters.http).
        page_cache = self.page_cache.handle if self.page_cache is not None else None
        self.http_server = serve_metrics(
            cfg.metrics,
            self.registry,
            lambda registry, host, port: AgentHttpServer(registry, host, port, page_cache=page_cache),
        )
        if cfg.kafka.enabled:
            from agent.output.kafka import KafkaSink

            self.sink = KafkaSink(cfg.kafka, self.health).start()
        if self.capture is not None:
            self.capture.start()
        return self

    def step(self, now_ms: int | None = None) -> list[ClosedWindow]:
        """One round: read the request log, publish closed windows, run due collectors."""
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        closed: list[ClosedWindow] = []
        if self.request_log is not None:
            try:
                closed = self.request_log.poll(now_ms)
            except OSError as e:  # e.g. permission denied on the log: report, keep running
                self.health.set_up(RequestLogSource.NAME, False, str(e))
        records: list[Record] = []
        for win in closed if self.capture is None else self._scale_sampled(closed):
            self.metrics.add_window(win, self._histogram_requests)
            self.health.untimed_connection_us += win.untracked_busy_us
            records += win.sketches
            records += win.slow_requests
            for listener in self.listeners:
                self._isolated(listener, win)
        for collector in self.collectors:
            if collector.due(now_ms):
                got = self._isolated(collector.collect, now_ms)
                records += got or []
        if records and self.sink is not None:
            self.sink.submit(records)
        return closed

    def _scale_sampled(self, closed: list[ClosedWindow]) -> list[ClosedWindow]:
        """Sampled capture: each window's counts times its stride. A window whose capture slice
        did not happen as planned (the switch through the broker's own admin API failed or was
        late: a stalled broker, the very windows that show it) is kept: its lines' quantiles
        are real, its counts the planned stride's estimate, its sketches marked
        ``capture_exact=False``, and its lines counted under ``capture_inexact``."""
        out = []
        for win in closed:
            lines = win.requests_seen
            factor = self.capture.factor(win.start_ms)
            if factor is None:
                if lines:
                    self.health.capture_inexact += lines
                    out.append(win.scaled(self.capture.planned_stride(win.start_ms), exact=False))
                continue
            self.capture.observe(lines, win.start_ms)
            self.health.capture_ratio = 1 / factor
            out.append(win.scaled(factor))
        return out

    def _isolated(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:
            name = getattr(fn, "__qualname__", repr(fn))
            self.health.drop("plugin_error", f"{name}: {type(e).__name__}: {e}")
            return None

    def run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception as e:
                # A failing step must not end the agent (its thread would die and its windows
                # stop with no sign but silence): counted as step_error, logged, tried again.
                self.health.drop("step_error", f"{type(e).__name__}: {e}")
                self._stop.wait(self.config.poll_interval_s)
                continue
            if self._behind():
                # A full poll's worth read and more waiting: read on at once. Waiting a poll
                # interval per MAX_POLL_BYTES would cap the agent near 13 k lines/s, and a log it
                # never catches up with loses its windows as late.
                continue
            self._stop.wait(max(0.0, self.config.poll_interval_s - (time.monotonic() - started)))

    def _behind(self) -> bool:
        return (
            self.request_log is not None
            and self.request_log.follower.up
            and not self.request_log.follower.caught_up
        )

    def stop(self) -> None:
        self._stop.set()
        if self.request_log is not None:
            self.request_log.follower.save_position()
            self.request_log.follower.close()
        if self.capture is not None:
            self.capture.stop()  # always ends with the broker's logger at the idle level
        if self.sink is not None:
            self.sink.stop()
        if self.tracer is not None:
            self.tracer.shutdown()
        if self.http_server is not None:
            self.http_server.close()
            self.http_server = None
