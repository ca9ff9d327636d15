"""Offset → segment → batch position, on real log dirs with many segments and on bad input."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from linkwatch.segments import (
    SegmentError,
    find_segment,
    index_position,
    locate,
    partition_dir,
    segment_base_offsets,
)
from testbed.cluster import ClusterState

FIND_CASES = [
    ([0], 0, 0),
    ([0], 10**12, 0),
    ([0, 100, 250], 99, 0),
    ([0, 100, 250], 100, 100),
    ([0, 100, 250], 249, 100),
    ([0, 100, 250], 251, 250),
    ([368769, 737337], 500000, 368769),
]


@pytest.mark.parametrize(("bases", "offset", "expected"), FIND_CASES)
def test_find_segment_is_the_greatest_base_at_or_below(bases: list[int], offset: int, expected: int) -> None:
    assert find_segment(bases, offset) == expected


def test_bad_input_each_with_its_reason(tmp_path: Path) -> None:
    empty = tmp_path / "t-0"
    empty.mkdir()
    (empty / "leader-epoch-checkpoint").write_text("0\n")
    (empty / "123.log").write_bytes(b"")  # not a 20-digit name: ignored
    cases = [
        (lambda: find_segment([100, 200], 5), "before_log_start"),
        (lambda: find_segment([], 5), "before_log_start"),
        (lambda: partition_dir([tmp_path], "missing", 0), "no_partition_dir"),
        (lambda: locate([tmp_path], "t", 0, 0), "no_segments"),
    ]
    for call, reason in cases:
        with pytest.raises(SegmentError) as e:
            call()
        assert e.value.reason == reason


def test_index_lookup_ignores_the_preallocated_zero_tail(tmp_path: Path) -> None:
    index = tmp_path / "00000000000000001000.index"
    entries = [(10, 4100), (25, 8300), (40, 12500)]
    index.write_bytes(b"".join(struct.pack(">ii", r, p) for r, p in entries) + b"\0" * 8 * 100)
    rows = [(1000, 0), (1009, 0), (1010, 4100), (1030, 8300), (1040, 12500), (5000, 12500)]
    assert [index_position(index, 1000, off) for off, _ in rows] == [p for _, p in rows]
    assert index_position(tmp_path / "missing.index", 0, 5) == 0


def many_segment_topic(
    cluster: ClusterState, admin: KafkaAdminClient, name: str, chunks: int = 30
) -> list[str]:
    """A one-partition topic rolled by time (segment.ms=50) into many segments; its leader's dirs."""
    admin.create_topics([NewTopic(name, 1, 1, topic_configs={"segment.ms": "50", "retention.ms": "-1"})])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, linger_ms=0, batch_size=2048)
    try:
        for _ in range(chunks):
            for _ in range(40):
                producer.send(name, b"x" * 100, partition=0)
            producer.flush()
            time.sleep(0.06)
    finally:
        producer.close()
    leader = admin.describe_topics([name])[0]["partitions"][0]["leader_id"]
    return cluster.node(leader).log_dirs


def scan_batches(pdir: Path) -> list[tuple[str, int, int, int]]:
    """Brute force: every batch of every segment as (file, position, first offset, last offset)."""
    out = []
    for log in sorted(pdir.glob("*.log")):
        data = log.read_bytes()
        pos = 0
        while pos + 27 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            out.append((log.name, pos, base, base + delta))
            pos += 12 + length
    return out


@pytest.mark.cluster
def test_locate_matches_a_full_scan_on_many_segments(cluster3: ClusterState, admin, topic_name: str) -> None:
    dirs = many_segment_topic(cluster3, admin, topic_name)
    pdir = partition_dir(dirs, topic_name, 0)
    bases = segment_base_offsets(pdir)
    assert len(bases) >= 10, bases
    batches = scan_batches(pdir)
    assert batches[-1][3] == 30 * 40 - 1
    # The binary search over base offsets agrees with a linear scan at every offset, and with
    # the segment the full scan found each batch in.
    for off in range(30 * 40 + 1):
        assert find_segment(bases, off) == max(b for b in bases if b <= off), off
    for name, _pos, first, last in batches:
        assert f"{find_segment(bases, first):020d}.log" == name == f"{find_segment(bases, last):020d}.log"
    for name, pos, first, last in batches[:: max(1, len(batches) // 60)] + batches[-1:]:
        for off in {first, last, (first + last) // 2}:
            found = locate(dirs, topic_name, 0, off)
            assert (found.log_path.name, found.position, found.batch_base_offset) == (name, pos, first), off
    end = locate(dirs, topic_name, 0, 30 * 40)  # the next offset to be written
    assert end.batch_bytes == 0 and end.position == (pdir / end.log_path.name).stat().st_size
