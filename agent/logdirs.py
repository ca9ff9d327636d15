"""Log dirs and host: the inputs for disk hot spots, imbalance and the page-cache window.

:class:`LogDirCollector` walks each ``log.dirs`` entry (layout ``<topic>-<partition>/`` holding
``<20-digit base offset>.log|.index|.timeindex`` segments). A partition's size is the sum of its
``.log`` files, which is what the broker reports in DescribeLogDirs. Per log dir it also reports
file-system capacity/usage (``shutil.disk_usage``) and the busy fraction of its block device
(psutil ``busy_time``). Memory does not grow with the number of partitions beyond one record
per partition per round (records can be switched off) and a top-N heap for Prometheus.

:class:`HostCollector` reports CPU, page cache (``Cached`` in ``/proc/meminfo``), disk and
network rates, and the page-cache window = cached bytes / disk write rate (how long written data
stays in cache, so how far behind a consumer may read without going to disk).
"""

from __future__ import annotations

import heapq
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from agent.exporters.prometheus import AgentMetrics
from agent.health import Health
from linkwatch.records import HostStats, LogDirUsage, PartitionSize, Record

SKIP_SUFFIXES = ("-delete", "-future", "-stray")


@dataclass(frozen=True, slots=True)
class PartitionDir:
    topic: str
    partition: int
    size_bytes: int
    segments: int
    oldest_segment_ms: int
    newest_segment_ms: int


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``orders-12`` -> ("orders", 12); None for anything that is not a live partition dir."""
    if name.endswith(SKIP_SUFFIXES) or "." in name.rsplit("-", 1)[-1]:
        return None
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def scan_partition(path: str, topic: str, partition: int) -> PartitionDir:
    size = segments = 0
    oldest, newest = 1 << 62, 0
    with os.scandir(path) as entries:
        for e in entries:
            if e.name.endswith(".log") and e.is_file(follow_symlinks=False):
                st = e.stat(follow_symlinks=False)
                size += st.st_size
                segments += 1
                mtime = int(st.st_mtime * 1000)
                oldest, newest = min(oldest, mtime), max(newest, mtime)
    return PartitionDir(topic, partition, size, segments, oldest if segments else 0, newest)


def scan_log_dir(log_dir: str) -> Iterator[PartitionDir]:
    """Partitions of one log dir, one at a time (never the whole list in memory)."""
    with os.scandir(log_dir) as entries:
        for e in entries:
            parsed = parse_partition_dir(e.name)
            if parsed is not None and e.is_dir(follow_symlinks=False):
                try:
                    yield scan_partition(e.path, *parsed)
                except FileNotFoundError:
                    continue  # deleted while we looked


def device_of(path: str) -> str | None:
    """Block device name (as psutil's per-disk counters name it) holding ``path``."""
    try:
        st = os.stat(path)
        link = os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    except OSError:
        return None
    return os.path.basename(link) if os.path.exists(link) else None


class LogDirCollector:
    def __init__(
        self,
        log_dirs: list[str],
        *,
        cluster: str,
        broker: int,
        health: Health,
        metrics: AgentMetrics | None = None,
        interval_s: float = 60.0,
        partition_records: bool = True,
        top_partitions: int = 50,
    ) -> None:
        self.log_dirs = log_dirs
        self.cluster, self.broker, self.health, self.metrics = cluster, broker, health, metrics
        self.interval_ms = int(interval_s * 1000)
        self.partition_records = partition_records
        self.top_partitions = top_partitions
        self._next_ms = 0
        self._busy: dict[str, tuple[float, float]] = {}  # device -> (busy_time ms, monotonic s)

    def due(self, now_ms: int) -> bool:
        return now_ms >= self._next_ms

    def collect(self, now_ms: int | None = None) -> list[Record]:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        self._next_ms = now_ms + self.interval_ms
        records: list[Record] = []
        top: list[tuple[int, str, str, int]] = []
        gauges: dict[str, dict[tuple[str, ...], float]] = {
            k: {}
            for k in (
                "linkwatch_logdir_capacity_bytes",
                "linkwatch_logdir_used_bytes",
                "linkwatch_logdir_partition_bytes",
                "linkwatch_logdir_io_util_ratio",
            )
        }
        busy = self._busy_times()
        for log_dir in self.log_dirs:
            try:
                usage = shutil.disk_usage(log_dir)
                total = count = 0
                for p in scan_log_dir(log_dir):
                    total += p.size_bytes
                    count += 1
                    item = (p.size_bytes, log_dir, p.topic, p.partition)
                    if len(top) < self.top_partitions:
                        heapq.heappush(top, item)
                    elif item > top[0]:
                        heapq.heapreplace(top, item)
                    if self.partition_records:
                        records.append(self._partition_record(now_ms, log_dir, p))
            except OSError as e:
                self.health.set_up("log_dirs", False, f"{log_dir}: {e}")
                self.health.drop("log_dir_unreadable", str(e), context=log_dir)
                continue
            device = device_of(log_dir)
            util = busy.get(device) if device else None
            records.append(
                LogDirUsage(
                    cluster=self.cluster,
                    source=f"broker-{self.broker}",
                    ts_ms=now_ms,
                    broker=self.broker,
                    log_dir=log_dir,
                    capacity_bytes=usage.total,
                    used_bytes=usage.used,
                    partition_bytes=total,
                    partitions=count,
                    io_util=util,
                )
            )
            gauges["linkwatch_logdir_capacity_bytes"][(log_dir,)] = usage.total
            gauges["linkwatch_logdir_used_bytes"][(log_dir,)] = usage.used
            gauges["linkwatch_logdir_partition_bytes"][(log_dir,)] = total
            if util is not None and device:
                gauges["linkwatch_logdir_io_util_ratio"][(log_dir, device)] = util
        if self.metrics is not None:
            for name, values in gauges.items():
                self.metrics.set_gauges(name, values)
            self.metrics.set_gauges(
                "linkwatch_partition_size_bytes", {(d, t, str(p)): float(s) for s, d, t, p in top}
            )
        return records

    def _partition_record(self, now_ms: int, log_dir: str, p: PartitionDir) -> PartitionSize:
        return PartitionSize(
            cluster=self.cluster,
            source=f"broker-{self.broker}",
            ts_ms=now_ms,
            broker=self.broker,
            log_dir=log_dir,
            topic=p.topic,
            partition=p.partition,
            size_bytes=p.size_bytes,
            segments=p.segments,
            oldest_segment_ms=p.oldest_segment_ms,
            newest_segment_ms=p.newest_segment_ms,
        )

    def _busy_times(self) -> dict[str, float]:
        """Device -> busy fraction since the previous round (none on the first round)."""
        try:
            counters = psutil.disk_io_counters(perdisk=True) or {}
        except (OSError, RuntimeError):
            return {}
        now = time.monotonic()
        out = {}
        for dev, c in counters.items():
            busy_ms = float(getattr(c, "busy_time", 0.0))
            prev = self._busy.get(dev)
            if prev is not None and now > prev[1]:
                out[dev] = max(0.0, min(1.0, (busy_ms - prev[0]) / ((now - prev[1]) * 1000)))
            self._busy[dev] = (busy_ms, now)
        return out


def page_cache_bytes(meminfo: Path = Path("/proc/meminfo")) -> int:
    for line in meminfo.read_text().splitlines():
        if line.startswith("Cached:"):
            return int(line.split()[1]) * 1024
    raise ValueError(f"no Cached line in {meminfo}")


class HostCollector:
    def __init__(
        self,
        *,
        cluster: str,
        broker: int,
        health: Health,
        metrics: AgentMetrics | None = None,
        interval_s: float = 10.0,
    ) -> None:
        self.cluster, self.broker, self.health, self.metrics = cluster, broker, health, metrics
        self.interval_ms = int(interval_s * 1000)
        self._next_ms = 0
        self._prev: tuple[float, object, object] | None = None
        psutil.cpu_percent(interval=None)  # prime: the next call measures since now

    def due(self, now_ms: int) -> bool:
        return now_ms >= self._next_ms

    def collect(self, now_ms: int | None = None) -> list[Record]:
        now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
        self._next_ms = now_ms + self.interval_ms
        now = time.monotonic()
        disk, net = psutil.disk_io_counters(), psutil.net_io_counters()
        prev, self._prev = self._prev, (now, disk, net)
        cpu = psutil.cpu_percent(interval=None) / 100
        cache = page_cache_bytes()
        if prev is None or disk is None or net is None:
            return []
        dt = max(1e-3, now - prev[0])
        pdisk, pnet = prev[1], prev[2]
        write_rate = (disk.write_bytes - pdisk.write_bytes) / dt
        record = HostStats(
            cluster=self.cluster,
            source=f"broker-{self.broker}",
            ts_ms=now_ms,
            broker=self.broker,
            window_s=max(1, round(dt)),
            cpu_percent=cpu * 100,
            page_cache_bytes=cache,
            disk_write_bytes_per_s=write_rate,
            disk_read_bytes_per_s=(disk.read_bytes - pdisk.read_bytes) / dt,
            net_rx_bytes_per_s=(net.bytes_recv - pnet.bytes_recv) / dt,
            net_tx_bytes_per_s=(net.bytes_sent - pnet.bytes_sent) / dt,
        )
        if self.metrics is not None:
            self.metrics.set_gauges("linkwatch_host_cpu_ratio", {(): cpu})
            self.metrics.set_gauges("linkwatch_host_page_cache_bytes", {(): float(cache)})
            self.metrics.set_gauges("linkwatch_host_disk_write_bytes_per_second", {(): write_rate})
            # No writes: nothing is evicted, the window is unbounded; the series is left out rather
            # than keeping the last interval's value.
            window = {(): cache / write_rate} if write_rate > 0 else {}
            self.metrics.set_gauges("linkwatch_host_page_cache_window_seconds", window)
        return [record]
