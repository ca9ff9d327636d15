"""Page-cache residency with mincore, and the broker-side cold-read confirmation."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from linkwatch.pagecache import PAGE, check_cold_read, log_ranges, residency
from linkwatch.segments import partition_dir
from testbed.cluster import ClusterState
from testbed.faults import evict_page_cache
from tests.core.test_segments import many_segment_topic


def test_written_file_is_resident_and_evicted_file_is_not(tmp_path: Path) -> None:
    f = tmp_path / "data.bin"
    f.write_bytes(os.urandom(64 * PAGE))
    f.read_bytes()
    assert residency(f) == residency(f, 0, 64 * PAGE)
    assert residency(f).resident_pages == residency(f).total_pages == 64
    evict_page_cache(f)
    assert residency(f).resident_pages <= 2
    # Reading a range brings back that range only.
    with open(f, "rb") as fh:
        fh.seek(10 * PAGE)
        fh.read(4 * PAGE)
    r = residency(f, 10 * PAGE, 4 * PAGE)
    assert (r.resident_pages, r.total_pages) == (4, 4)
    assert residency(f, 40 * PAGE, 8 * PAGE).resident_pages <= 2


@pytest.mark.parametrize(
    ("start", "length", "pages"),
    [(0, 0, 0), (PAGE * 64, 100, 0), (PAGE - 1, 2, 2), (5, None, 64), (PAGE * 63, PAGE * 10, 1)],
)
def test_ranges_are_clipped_and_page_aligned(
    tmp_path: Path, start: int, length: int | None, pages: int
) -> None:
    f = tmp_path / "data.bin"
    f.write_bytes(b"\1" * 64 * PAGE)
    assert residency(f, start, length).total_pages == pages


def test_missing_file_is_an_error_the_check_reports(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        residency(tmp_path / "nope")
    check = check_cold_read([tmp_path], "t", 0, 5)
    assert check.confirmed is None and "no_partition_dir" in check.reason


def test_ranges_continue_into_the_next_segments(tmp_path: Path) -> None:
    for base, size in ((0, 1000), (10, 500), (20, 300)):
        (tmp_path / f"{base:020d}.log").write_bytes(b"x" * size)
    names = lambda rs: [(p.name[-6:], s, n) for p, s, n in rs]  # noqa: E731
    assert names(log_ranges(tmp_path, [0, 10, 20], 0, 900, 400)) == [("00.log", 900, 100), ("10.log", 0, 300)]
    assert names(log_ranges(tmp_path, [0, 10, 20], 0, 1200, 10_000)) == [
        ("10.log", 200, 300),
        ("20.log", 0, 300),
    ]
    assert log_ranges(tmp_path, [0, 10, 20], 10, 5000, 10) == []


@pytest.mark.cluster
def test_evicted_old_segment_is_confirmed_cold_and_fresh_tail_is_resident(
    cluster3: ClusterState, admin, topic_name: str
) -> None:
    dirs = many_segment_topic(cluster3, admin, topic_name)
    pdir = partition_dir(dirs, topic_name, 0)
    time.sleep(1.0)  # let the broker's asynchronous flush of rolled segments finish
    for seg in pdir.glob("*.log"):
        evict_page_cache(seg)
    cold = check_cold_read(dirs, topic_name, 0, 40, skip_bytes=0)
    assert cold.confirmed is True, cold.reason
    assert cold.segment is not None and cold.resident_pages < cold.total_pages
    # Fresh writes are in the page cache: a group just behind the end reads from memory.
    p = KafkaProducer(bootstrap_servers=cluster3.bootstrap)
    for _ in range(200):
        p.send(topic_name, b"y" * 100, partition=0)
    p.flush()
    p.close()
    warm = check_cold_read(dirs, topic_name, 0, 30 * 40 + 10, skip_bytes=0)
    assert warm.confirmed is False, warm.reason
    assert warm.resident_pages == warm.total_pages > 0
