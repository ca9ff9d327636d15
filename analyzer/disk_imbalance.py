"""Disk and broker imbalance, hot disks.

Rule 1 (hot disk, usage) — a log dir whose usage ratio is ≥ ``min_usage`` and exceeds the
cluster's mean usage ratio by ``usage_margin``.
Rule 2 (hot disk, I/O) — a log dir whose io util is ≥ ``io_util_threshold`` and ≥
``io_ratio`` × the median io util of all log dirs.
Rule 3 (broker imbalance) — ``I = max/avg − 1`` of used bytes over brokers (sum of their log
dirs) exceeds ``max_broker_imbalance`` while the average is above ``min_used_bytes``.
Each must hold in ``min_windows`` of the last ``recent_windows`` windows.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from pydantic import Field

from analyzer.base import Detector, DetectorConfig
from linkwatch.aggregates import Aggregates, LogDirWindow
from linkwatch.imbalance import imbalance, recent_windows
from linkwatch.records import Finding


class DiskImbalanceConfig(DetectorConfig):
    min_usage: float = Field(0.5, ge=0, le=1)
    usage_margin: float = Field(0.2, ge=0, le=1)
    critical_usage: float = Field(0.9, ge=0, le=1)
    io_util_threshold: float = Field(0.8, ge=0, le=1)
    io_ratio: float = Field(2.0, ge=1)
    max_broker_imbalance: float = Field(0.5, gt=0)
    min_used_bytes: int = Field(1 << 30, ge=0)
    recent_windows: int = Field(3, ge=1)
    min_windows: int = Field(2, ge=1)


def _hot(rows: list[LogDirWindow], cfg: DiskImbalanceConfig) -> dict[tuple[int, str], list[str]]:
    mean_usage = statistics.fmean(r.usage_ratio for r in rows)
    utils = [r.io_util for r in rows if r.io_util is not None]
    median_util = statistics.median(utils) if utils else None
    out: dict[tuple[int, str], list[str]] = {}
    for r in rows:
        why = []
        if r.usage_ratio >= cfg.min_usage and r.usage_ratio >= mean_usage + cfg.usage_margin:
            why.append("usage")
        if (
            r.io_util is not None
            and median_util is not None
            and r.io_util >= cfg.io_util_threshold
            and r.io_util >= cfg.io_ratio * median_util
        ):
            why.append("io_util")
        if why:
            out[(r.broker, r.log_dir)] = why
    return out


class DiskImbalanceDetector(Detector[DiskImbalanceConfig]):
    name = "disk_imbalance"
    rule = "hot_disk"
    Config = DiskImbalanceConfig

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        cfg = self.config
        by_window: dict[int, list[LogDirWindow]] = defaultdict(list)
        for r in data.logdirs:
            by_window[r.window_start_ms].append(r)
        windows = recent_windows(set(by_window), now_ms, data.window_s, cfg.recent_windows)
        if not windows:
            return []
        hot_counts: dict[tuple[int, str], int] = defaultdict(int)
        broker_hits = 0
        for w in windows:
            for ident in _hot(by_window[w], cfg):
                hot_counts[ident] += 1
            broker_hits += self._broker_imbalanced(by_window[w], cfg)
        last = {(r.broker, r.log_dir): r for r in by_window[windows[-1]]}
        reasons = _hot(by_window[windows[-1]], cfg)
        findings = [
            self._hot_finding(
                data, now_ms, cfg, last[ident], reasons.get(ident, ["usage"]), by_window[windows[-1]], windows
            )
            for ident, n in sorted(hot_counts.items())
            if n >= cfg.min_windows and ident in last
        ]
        if broker_hits >= cfg.min_windows:
            findings.append(self._broker_finding(data, now_ms, cfg, by_window[windows[-1]], windows))
        return findings

    @staticmethod
    def _broker_used(rows: list[LogDirWindow]) -> dict[int, float]:
        used: dict[int, float] = defaultdict(float)
        for r in rows:
            used[r.broker] += r.used_bytes
        return dict(used)

    def _broker_imbalanced(self, rows: list[LogDirWindow], cfg: DiskImbalanceConfig) -> bool:
        used = self._broker_used(rows)
        ratio, _ = imbalance(used)
        return (
            len(used) >= 2
            and sum(used.values()) / len(used) >= cfg.min_used_bytes
            and ratio > cfg.max_broker_imbalance
        )

    def _hot_finding(self, data, now_ms, cfg, r: LogDirWindow, why, rows, windows) -> Finding:
        utils = [x.io_util for x in rows if x.io_util is not None]
        severity = "critical" if r.usage_ratio >= cfg.critical_usage else "warning"
        return self.finding(
            data,
            now_ms,
            subject=f"log_dir:{r.broker}:{r.log_dir}",
            severity=severity,
            summary=f"log dir {r.log_dir} on broker {r.broker} is hot ({', '.join(why)}): usage "
            f"{r.usage_ratio:.0%}" + (f", io util {r.io_util:.0%}" if r.io_util is not None else ""),
            evidence={
                "broker": r.broker,
                "log_dir": r.log_dir,
                "reasons": why,
                "values": {"usage_ratio": r.usage_ratio, "io_util": r.io_util, "used_bytes": r.used_bytes},
                "baseline": {
                    "cluster_mean_usage_ratio": statistics.fmean(x.usage_ratio for x in rows),
                    "cluster_median_io_util": statistics.median(utils) if utils else None,
                },
                "windows": windows,
            },
            action=f"move partitions off {r.log_dir} on broker {r.broker} (free-disk-first reassignment) "
            "or to another log dir of the same broker",
        )

    def _broker_finding(self, data, now_ms, cfg, rows, windows) -> Finding:
        used = self._broker_used(rows)
        ratio, top = imbalance(used)
        return self.finding(
            data,
            now_ms,
            rule="broker_imbalance",
            subject=f"broker:{top}",
            severity="warning",
            summary=f"broker {top} holds {ratio + 1:.1f}× the average used bytes (I={ratio:.2f})",
            evidence={
                "values": {str(b): v for b, v in sorted(used.items())},
                "baseline": {
                    "avg_used_bytes": sum(used.values()) / len(used),
                    "max_imbalance": cfg.max_broker_imbalance,
                },
                "windows": windows,
            },
            action=f"reassign partitions from broker {top} to the brokers with the most free disk",
        )
