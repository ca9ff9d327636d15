"""Hot keys: keys that lossy counting reports above the support, per topic.

Rule — a topic has hot keys when at least ``min_sampled`` records were sampled and one or more
keys have a share ≥ ``support`` (the counter's own support). One finding per topic names them.
"""

from __future__ import annotations

from collections import defaultdict

from pydantic import Field

from analyzer.base import Detector, DetectorConfig
from linkwatch.aggregates import Aggregates, HotKey
from linkwatch.records import Finding


class HotKeysConfig(DetectorConfig):
    min_sampled: int = Field(1000, ge=1)
    max_keys: int = Field(10, ge=1)


class HotKeysDetector(Detector[HotKeysConfig]):
    name = "hot_keys"
    rule = "hot_keys"
    Config = HotKeysConfig

    def detect(self, data: Aggregates, now_ms: int) -> list[Finding]:
        cfg = self.config
        by_topic: dict[str, list[HotKey]] = defaultdict(list)
        for k in data.hot_keys:
            if k.n >= cfg.min_sampled and k.share >= k.support:
                by_topic[k.topic].append(k)
        out = []
        for topic, keys in sorted(by_topic.items()):
            keys = sorted(keys, key=lambda k: -k.count)[: cfg.max_keys]
            n = keys[0].n
            out.append(
                self.finding(
                    data,
                    now_ms,
                    subject=f"topic:{topic}",
                    severity="warning" if keys[0].share >= 2 * keys[0].support else "info",
                    summary=f"topic {topic}: hot keys " + ", ".join(f"{k.key!r} {k.share:.1%}" for k in keys),
                    evidence={
                        "topic": topic,
                        "values": {
                            k.key: {
                                "count": k.count,
                                "share": round(k.share, 4),
                                "partitions": list(k.partitions),
                            }
                            for k in keys
                        },
                        "baseline": {"support": keys[0].support, "epsilon": keys[0].epsilon, "sampled": n},
                        "windows": [],
                    },
                    action="spread the hot keys: salt them or route them to the least-loaded of d partitions",
                )
            )
        return out
