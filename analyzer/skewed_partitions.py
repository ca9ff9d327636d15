"""Skewed partitions: per topic, imbalance of traffic and size across its partitions.

Rule 1 — in a window, a topic is skewed on a measure when it has at least ``min_partitions``
partitions, its total load on that measure is above the floor for that measure (idle topics
are never skewed), and ``I = max/avg − 1 > max_imbalance``.

Rule 2 — it fires when Rule 1 holds in at least ``min_windows`` of the last ``recent_windows``
windows. Partitions at or above ``hot_factor`` × the average are named as hot; hot keys that
lossy counting found for the topic are attached as evidence.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import Field

from analyzer.base import Detector, DetectorConfig
from linkwatch.aggregates import Aggregates, HotKey, PartitionWindow
from linkwatch.imbalance import imbalance, recent_windows
from linkwatch.records import Finding

MEASURES = {"bytes_in": "bytes_in_per_s", "messages_in": "messages_in_per_s", "size": "size_bytes"}


class SkewedPartitionsConfig(DetectorConfig):
    measures: list[str] = Field(default_factory=lambda: ["bytes_in", "size"])
    max_imbalance: float = Field(1.0, gt=0)
    hot_factor: float = Field(1.5, gt=1)
    min_partitions: int = Field(2, ge=2)
    # Floors on a topic's total per window, per measure, below which it is not judged.
    min_total: dict[str, float] = Field(
        default_factory=lambda: {"bytes_in": 10_240.0, "messages_in": 10.0, "size": 1_048_576.0}
    )
    recent_windows: int = Field(3, ge=1)
    min_windows: int = Field(2, ge=1)


def _loads(rows: list[PartitionWindow], field: str) -> dict[int, float]:
    out = {}
    for r in rows:
        v = getattr(r, field)
        if v is not None:
            out[r.partition] = float(v)
    return out


class SkewedPartitionsDetector(Detector[SkewedPartitionsConfig]):
    name = "skewed_partitions"
    rule = "skewed_partitions"
    Config = SkewedPartitionsConfig

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        cfg = self.config
        by_topic: dict[str, dict[int, list[PartitionWindow]]] = defaultdict(lambda: defaultdict(list))
        for r in data.partitions:
            by_topic[r.topic][r.window_start_ms].append(r)
        keys: dict[str, list[HotKey]] = defaultdict(list)
        for k in data.hot_keys:
            keys[k.topic].append(k)
        findings = []
        for topic in sorted(by_topic):
            windows = recent_windows(set(by_topic[topic]), now_ms, data.window_s, cfg.recent_windows)
            skewed = {m: self._judge(by_topic[topic], windows, m, cfg) for m in cfg.measures}
            firing = {m: v for m, v in skewed.items() if sum(1 for w in v if w["skewed"]) >= cfg.min_windows}
            if firing:
                findings.append(self._finding(data, now_ms, cfg, topic, firing, keys.get(topic, [])))
        return findings

    def _judge(
        self, rows: dict[int, list[PartitionWindow]], windows: list[int], measure: str, cfg
    ) -> list[dict]:
        out = []
        for w in windows:
            loads = _loads(rows[w], MEASURES[measure])
            total = sum(loads.values())
            ratio, _ = imbalance(loads)
            avg = total / len(loads) if loads else 0.0
            ok = len(loads) >= cfg.min_partitions and total >= cfg.min_total.get(measure, 0.0)
            hot = sorted(p for p, v in loads.items() if avg > 0 and v >= cfg.hot_factor * avg)
            out.append(
                {
                    "window_start_ms": w,
                    "ratio": round(ratio, 4),
                    "avg": avg,
                    "loads": loads,
                    "hot": hot,
                    "skewed": ok and ratio > cfg.max_imbalance,
                }
            )
        return out

    def _finding(self, data, now_ms, cfg, topic: str, firing: dict[str, list[dict]], hot_keys: list[HotKey]):
        last = {m: v[-1] for m, v in firing.items()}
        hot = sorted({p for v in last.values() for p in v["hot"]})
        keys = sorted(hot_keys, key=lambda k: -k.count)
        measures = ", ".join(f"{m} I={v['ratio']:.2f}" for m, v in last.items())
        summary = f"topic {topic} is skewed ({measures}); hot partitions {hot}"
        if keys:
            summary += "; hot keys " + ", ".join(f"{k.key!r} ({k.share:.0%})" for k in keys[:5])
        evidence = {
            "topic": topic,
            "hot_partitions": hot,
            "hot_keys": [
                {"key": k.key, "count": k.count, "share": round(k.share, 4), "n": k.n} for k in keys[:20]
            ],
            "values": {
                m: {"ratio": [w["ratio"] for w in v], "loads": {str(p): x for p, x in v[-1]["loads"].items()}}
                for m, v in firing.items()
            },
            "baseline": {
                m: {"avg": v[-1]["avg"], "max_imbalance": cfg.max_imbalance} for m, v in firing.items()
            },
            "windows": sorted({w["window_start_ms"] for v in firing.values() for w in v}),
        }
        worst = max(v["ratio"] for v in last.values())
        severity = "critical" if worst > 3 * cfg.max_imbalance else "warning"
        action = (
            "spread the hot keys (a key-aware partitioner or salting the hottest keys) or add partitions; "
            "move hot partitions' leaders to the least-loaded brokers"
        )
        return self.finding(
            data,
            now_ms,
            subject=f"topic:{topic}",
            severity=severity,
            summary=summary,
            evidence=evidence,
            action=action,
        )
