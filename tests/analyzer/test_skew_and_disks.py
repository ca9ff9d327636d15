"""Skewed partitions, hot keys and disk/broker imbalance tables, with no-false-positive rows."""

from __future__ import annotations

import pytest

from analyzer.disk_imbalance import DiskImbalanceDetector
from analyzer.hot_keys import HotKeysDetector
from analyzer.skewed_partitions import SkewedPartitionsDetector
from linkwatch.aggregates import Aggregates, HotKey, LogDirWindow, PartitionWindow
from linkwatch.imbalance import imbalance

W = 10
T0 = 1_700_000_000_000
GIB = 1 << 30


def t(i: int) -> int:
    return T0 + i * W * 1000


def partitions(topic: str, per_window: list[list[float]], size: float = 10 * 2**20) -> list[PartitionWindow]:
    """``per_window[i][p]`` = bytes/s of partition p in window i; sizes even unless skewed below."""
    return [
        PartitionWindow(
            topic=topic,
            partition=p,
            window_start_ms=t(i),
            size_bytes=int(size),
            bytes_in_per_s=v,
            messages_in_per_s=v / 100,
        )
        for i, loads in enumerate(per_window)
        for p, v in enumerate(loads)
    ]


EVEN = [100_000.0] * 4
HOT = [700_000.0, 100_000.0, 100_000.0, 100_000.0]  # I = 1.8

SKEW_CASES = [
    ("even topic", partitions("a", [EVEN] * 4), {}),
    ("skewed topic", partitions("a", [HOT] * 4), {"topic:a": [0]}),
    ("idle skewed topic", partitions("a", [[70.0, 10.0, 10.0, 10.0]] * 4, size=100), {}),
    ("one skewed window", partitions("a", [EVEN, EVEN, EVEN, HOT]), {}),
    ("cold start, one window", partitions("a", [HOT]), {}),
    ("single partition", partitions("a", [[900_000.0]] * 4), {}),
    ("recovered topic", partitions("a", [HOT, HOT, EVEN, EVEN]), {}),
    (
        "unknown traffic",
        [
            PartitionWindow(
                topic="a",
                partition=p,
                window_start_ms=t(i),
                size_bytes=10 * 2**20,
                bytes_in_per_s=None,
                messages_in_per_s=None,
            )
            for i in range(4)
            for p in range(4)
        ],
        {},
    ),
]


@pytest.mark.parametrize(("rows", "expected"), [c[1:] for c in SKEW_CASES], ids=[c[0] for c in SKEW_CASES])
def test_skewed_partitions_table(rows, expected) -> None:
    data = Aggregates(cluster="c", window_s=W, partitions=rows)
    found = SkewedPartitionsDetector().detect(data, t(4))
    assert {f.subject: f.evidence["hot_partitions"] for f in found} == expected


def test_skew_finding_names_hot_keys() -> None:
    keys = [HotKey(topic="a", key="user-1", count=600, n=1000, support=0.05, epsilon=0.005, partitions=(0,))]
    data = Aggregates(cluster="c", window_s=W, partitions=partitions("a", [HOT] * 4), hot_keys=keys)
    [f] = SkewedPartitionsDetector().detect(data, t(4))
    assert f.evidence["hot_keys"] == [{"key": "user-1", "count": 600, "share": 0.6, "n": 1000}]
    assert f.evidence["values"]["bytes_in"]["ratio"] == [1.8, 1.8, 1.8]


HOT_KEY_CASES = [
    (
        "hot key",
        [HotKey(topic="a", key="k", count=300, n=2000, support=0.05, epsilon=0.005)],
        {"topic:a": ["k"]},
    ),
    ("too few samples", [HotKey(topic="a", key="k", count=300, n=500, support=0.05, epsilon=0.005)], {}),
    (
        "reported but below support",
        [HotKey(topic="a", key="k", count=95, n=2000, support=0.05, epsilon=0.005)],
        {},
    ),
]


@pytest.mark.parametrize(
    ("keys", "expected"), [c[1:] for c in HOT_KEY_CASES], ids=[c[0] for c in HOT_KEY_CASES]
)
def test_hot_keys_table(keys, expected) -> None:
    found = HotKeysDetector().detect(Aggregates(cluster="c", window_s=W, hot_keys=keys), t(1))
    assert {f.subject: list(f.evidence["values"]) for f in found} == expected


def logdirs(n_windows: int, special: dict[tuple[int, str], dict]) -> list[LogDirWindow]:
    rows = []
    for i in range(n_windows):
        for b in range(3):
            for d in ("/d0", "/d1"):
                kw = {"used": 40 * GIB, "io": 0.1} | special.get((b, d), {})
                rows.append(
                    LogDirWindow(
                        broker=b,
                        log_dir=d,
                        window_start_ms=t(i),
                        capacity_bytes=100 * GIB,
                        used_bytes=int(kw["used"]),
                        usage_ratio=kw["used"] / (100 * GIB),
                        io_util=kw["io"],
                    )
                )
    return rows


DISK_CASES = [
    ("even disks", logdirs(3, {}), set()),
    ("full disk", logdirs(3, {(1, "/d1"): {"used": 95 * GIB}}), {("hot_disk", "log_dir:1:/d1", "critical")}),
    ("busy disk", logdirs(3, {(2, "/d0"): {"io": 0.95}}), {("hot_disk", "log_dir:2:/d0", "warning")}),
    (
        "busy cluster, all disks at 90 % io",
        logdirs(3, {(b, d): {"io": 0.9} for b in range(3) for d in ("/d0", "/d1")}),
        set(),
    ),
    (
        "heavy broker",
        logdirs(3, {(0, "/d0"): {"used": 45 * GIB + 40 * GIB}, (0, "/d1"): {"used": 85 * GIB}}),
        {
            ("hot_disk", "log_dir:0:/d0", "warning"),
            ("hot_disk", "log_dir:0:/d1", "warning"),
            ("broker_imbalance", "broker:0", "warning"),
        },
    ),
    (
        "small cluster, uneven but tiny",
        [
            LogDirWindow(
                broker=b,
                log_dir="/d",
                window_start_ms=t(i),
                capacity_bytes=GIB,
                used_bytes=(b + 1) * 1000,
                usage_ratio=0.0,
                io_util=None,
            )
            for i in range(3)
            for b in range(3)
        ],
        set(),
    ),
    ("cold start", logdirs(1, {(1, "/d1"): {"used": 95 * GIB}}), set()),
]


@pytest.mark.parametrize(("rows", "expected"), [c[1:] for c in DISK_CASES], ids=[c[0] for c in DISK_CASES])
def test_disk_table(rows, expected) -> None:
    found = DiskImbalanceDetector().detect(Aggregates(cluster="c", window_s=W, logdirs=rows), t(3))
    assert {(f.rule, f.subject, f.severity) for f in found} == expected


@pytest.mark.parametrize(
    ("loads", "expected"),
    [
        ({}, (0.0, None)),
        ({"a": 0.0, "b": 0.0}, (0.0, None)),
        ({"a": 1.0, "b": 1.0}, (0.0, "a")),
        ({"a": 3.0, "b": 1.0}, (0.5, "a")),
    ],
)
def test_imbalance(loads, expected) -> None:
    assert imbalance(loads) == expected
