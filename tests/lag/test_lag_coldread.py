"""Cold reads: the page-cache window rule, and a risk confirmed on the broker's files."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from lag.coldread import (
    ColdReadConfig,
    ColdReadWatch,
    cold_read_risks,
    page_cache_window_s,
    proc_page_cache_window,
)
from lag.collector import PassResult
from linkwatch.pagecache import check_cold_read
from linkwatch.segments import partition_dir
from testbed.cluster import ClusterState
from testbed.faults import evict_page_cache
from tests.lag.lagkit import month_old_topic, write_load

GIB = 1024**3


@pytest.mark.parametrize(
    ("cache", "rate", "window"),
    [
        (80 * GIB, 170 * 1024**2, 481.9),  # 80 GB of page cache at 170 MB/s of writes holds about 8 minutes
        (10 * GIB, 10 * 1024**2, 1024.0),
        (10 * GIB, 0.0, math.inf),  # nothing written: nothing is evicted
    ],
)
def test_page_cache_window(cache: float, rate: float, window: float) -> None:
    assert page_cache_window_s(cache, rate) == pytest.approx(window, rel=1e-3)


RISK_CASES = [
    # (group, topic, partition, committed, lag_seconds, leader), windows, expect a risk
    (("g", "t", 0, 5, 900.0, 1), {1: 480.0}, True),
    (("g", "t", 0, 5, 300.0, 1), {1: 480.0}, False),  # within the window
    (("g", "t", 0, 5, 480.0, 1), {1: 480.0}, False),  # exactly at the window
    (("g", "t", 0, 5, None, 1), {1: 480.0}, False),  # lag seconds unknown: not judged
    (("g", "t", 0, 5, 900.0, None), {1: 480.0}, False),  # no leader
    (("g", "t", 0, 5, 900.0, -1), {1: 480.0}, False),  # offline
    (("g", "t", 0, 5, 900.0, 2), {1: 480.0}, False),  # no window for that broker
    (("g", "t", 0, 5, 9e9, 1), {1: math.inf}, False),  # a broker that writes nothing
]


@pytest.mark.parametrize(("row", "windows", "risky"), RISK_CASES)
def test_cold_read_rule(row: tuple, windows: dict[int, float], risky: bool) -> None:
    risks = cold_read_risks([row], windows)
    assert bool(risks) is risky
    if risky:
        assert (risks[0].leader, risks[0].window_s) == (1, windows[1])


@pytest.mark.cluster
def test_group_reading_old_data_is_a_confirmed_cold_read_risk(
    cluster3: ClusterState, admin, topic_name: str, group_name: str, make_collector, tmp_path: Path
) -> None:
    data = month_old_topic(admin, cluster3.bootstrap, topic_name, group_name)
    old, fresh, leader = data.old, data.fresh, data.leader
    dirs = cluster3.node(leader).log_dirs
    pdir = partition_dir(dirs, topic_name, 0)
    time.sleep(1.0)
    for seg in sorted(pdir.glob("*.log"))[:-1]:  # the old segments leave the page cache
        evict_page_cache(seg)
    cfg = ColdReadConfig(
        windows_from="proc", confirm="local", log_dirs={n.node_id: n.log_dirs for n in cluster3.nodes}
    )
    watch = ColdReadWatch(cfg, "test", "i1")
    collector = make_collector([old, fresh])
    stop = threading.Event()
    writer = threading.Thread(target=write_load, args=(stop, tmp_path / "load.bin"), daemon=True)
    writer.start()
    try:
        result = collector.run_pass()
        findings = watch.update(result)
    finally:
        stop.set()
        writer.join()
    cached, _rate, _window = proc_page_cache_window(0.2)
    assert cached > 0
    # The window is measured on a shared machine: the fresh group is flagged too if (and only if)
    # the measured window is shorter than its few seconds of lag.
    window = watch.windows(result)[leader]
    lag_s = {g: result.groups[g].lag_seconds_max for g in (old, fresh)}
    expected = sorted(f"group:{g}" for g in (old, fresh) if (lag_s[g] or 0) > window)
    assert f"group:{old}" in expected
    assert sorted(f.subject for f in findings) == expected, [f.summary for f in findings]
    f = next(f for f in findings if f.subject == f"group:{old}")
    item = f.evidence["partitions"][0]
    assert item["leader"] == leader and item["lag_seconds"] > item["page_cache_window_s"] > 0
    assert item["confirmed"] is True, item["confirmation"]
    assert f.evidence["confirmed"] == 1 and "1 confirmed on the broker" in f.summary
    assert watch.at_risk[(old, topic_name, 0)] == leader
    # The caught-up group reads data still in memory, and nothing is said about it.
    warm = check_cold_read(dirs, topic_name, 0, 4035, skip_bytes=0)
    assert warm.confirmed is False and warm.resident_pages == warm.total_pages > 0, warm.reason
    # Same set next pass: no repeated finding.
    assert watch.update(collector.run_pass()) == []


def _pass_with_risky_partitions(n: int, leader: int = 1) -> PassResult:
    from lag.collector import GroupLag, PartitionLag
    from lag.rules import GroupVerdict, Status, Verdict

    ok = Verdict(Status.OK, "behind", {})
    parts = [PartitionLag("g", "t", p, 5, 900, 895, 9000.0, "record_timestamp", leader, ok) for p in range(n)]
    return PassResult(
        ts_s=time.time(), groups={"g": GroupLag("g", "Empty", False, parts, GroupVerdict(Status.OK, "", {}))}
    )


CONFIRM_FAILURES = [
    # (config overrides, words every partition's confirmation carries)
    ({"agent_urls": {}}, "no agent URL for broker 1 in cold_read.agent_urls"),
    ({"agent_urls": {1: "http://127.0.0.1:1"}}, "agent http://127.0.0.1:1 not reachable"),
    ({"agent_urls": {1: "http://127.0.0.1:1"}, "confirm_budget_s": 1e-9}, "not checked: confirmation budget"),
]


@pytest.mark.parametrize(("overrides", "words"), CONFIRM_FAILURES)
def test_agent_confirmation_failures_are_reasons_not_errors(overrides: dict, words: str) -> None:
    cfg = ColdReadConfig(windows_from="static", static_windows_s={1: 60.0}, confirm="agent", **overrides)
    watch = ColdReadWatch(cfg, "test", "i1")
    (finding,) = watch.update(_pass_with_risky_partitions(3))
    items = finding.evidence["partitions"]
    assert len(items) == 3 and finding.evidence["confirmed"] == 0
    for item in items:
        assert item["confirmed"] is None and item["confirmed_by"] == "agent"
        assert words in item["confirmation"], item
    assert "0 confirmed by the leader's agent" in finding.summary
