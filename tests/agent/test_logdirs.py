"""Log dirs of the real brokers agree with DescribeLogDirs; host figures are sane; bad dirs are counted."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from agent.health import Health
from agent.logdirs import HostCollector, LogDirCollector, page_cache_bytes, parse_partition_dir
from linkwatch.records import HostStats, LogDirUsage, PartitionSize
from testbed.cluster import ClusterState
from tests.agent.conftest import Captured


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("orders-12", ("orders", 12)),
        ("my-topic-with-dashes-0", ("my-topic-with-dashes", 0)),
        ("__consumer_offsets-49", ("__consumer_offsets", 49)),
        ("orders-3.abc123-delete", None),
        ("orders-3.abc123-future", None),
        ("orders-3.abc123-stray", None),
        ("meta.properties", None),
        ("orders-x", None),
        ("-1", None),
    ],
)
def test_partition_dir_names(name: str, expected: tuple[str, int] | None) -> None:
    assert parse_partition_dir(name) == expected


def test_sizes_agree_with_describe_log_dirs(cluster3: ClusterState, admin, captured: Captured) -> None:
    topic = captured.topic  # written earlier, idle now: sizes are stable
    reported = {}
    for broker in admin.describe_log_dirs():
        for d in broker["log_dirs"]:
            for t in d["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        reported[(broker["broker"], d["log_dir"], p["partition_index"])] = p["partition_size"]
    ours = {}
    for node in cluster3.nodes:
        health = Health()
        records = LogDirCollector(node.log_dirs, cluster="t", broker=node.node_id, health=health).collect(0)
        for r in records:
            if isinstance(r, PartitionSize) and r.topic == topic:
                ours[(node.node_id, r.log_dir, r.partition)] = r.size_bytes
                assert r.segments >= 1
                assert r.oldest_segment_ms <= r.newest_segment_ms
        usage = [r for r in records if isinstance(r, LogDirUsage)]
        assert {u.log_dir for u in usage} == set(node.log_dirs)
        assert all(0 < u.used_bytes <= u.capacity_bytes for u in usage)
        assert not health.dropped
    assert len(reported) == 9  # 3 partitions x 3 replicas
    assert ours == reported
    assert sum(ours.values()) > 0


def test_unreadable_log_dir_is_counted_and_others_still_reported(tmp_path: Path) -> None:
    good = tmp_path / "good"
    (good / "t-0").mkdir(parents=True)
    (good / "t-0" / "00000000000000000000.log").write_bytes(b"x" * 100)
    health = Health()
    records = LogDirCollector(
        [str(tmp_path / "missing"), str(good)], cluster="t", broker=1, health=health
    ).collect(0)
    assert health.dropped == {"log_dir_unreadable": 1}
    assert [r.size_bytes for r in records if isinstance(r, PartitionSize)] == [100]


def test_host_stats_rates_and_page_cache(tmp_path: Path) -> None:
    host = HostCollector(cluster="t", broker=1, health=Health())
    assert host.collect(0) == []  # first round only primes the counters
    with open(tmp_path / "f", "wb") as f:
        f.write(os.urandom(4 << 20))
        f.flush()
        os.fsync(f.fileno())
    time.sleep(0.5)
    (record,) = host.collect(1)
    assert isinstance(record, HostStats)
    assert record.page_cache_bytes == page_cache_bytes() or record.page_cache_bytes > 0
    assert 0.0 <= record.cpu_percent <= 100.0
    assert record.disk_write_bytes_per_s >= 0
