"""Bench: one lag evaluation pass over 200 groups and 2,000 partitions, vs one admin call per group.

    .venv/bin/python bench/lag_pass.py                      # starts (and stops) a local 3-broker cluster
    .venv/bin/python bench/lag_pass.py --bootstrap HOST:PORT # use a running cluster

Set-up: ``--topics`` topics × ``--partitions`` partitions (RF 1) with ``--records`` records each;
every group commits offsets (through ``alter_group_offsets``, no consumers) for
``2000 / groups`` partitions. Then, in the same run, alternating:

* **batched** — :class:`LagCollector.run_pass` (list_groups, batched list_group_offsets,
  describe_topics, describe_cluster, one list_partition_offsets), without and with lag seconds;
* **per group** (the baseline, what most exporters do) — for each group one ``list_group_offsets``
  and one ``list_partition_offsets`` for its partitions.

Prints wall time (median of ``--repeat``), admin calls and peak Python memory (tracemalloc).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _kit import retry, wait_ready
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic, OffsetSpec
from kafka.structs import OffsetAndMetadata

from lag.collector import CollectorConfig, LagCollector
from lag.timestamps import TimestampReader
from linkwatch.testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port


def setup(admin: KafkaAdminClient, bootstrap: str, args: argparse.Namespace, prefix: str) -> list[str]:
    topics = [f"{prefix}-t{i}" for i in range(args.topics)]
    admin.create_topics([NewTopic(t, args.partitions, 1) for t in topics])
    tps = [TopicPartition(t, p) for t in topics for p in range(args.partitions)]
    wait_ready(admin, tps, timeout_s=120, poll_s=1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    now_ms = int(time.time() * 1000)
    for tp in tps:
        for i in range(args.records):
            producer.send(
                tp.topic, b"v", partition=tp.partition, timestamp_ms=now_ms - (args.records - i) * 1000
            )
    producer.flush()
    producer.close()
    groups = [f"{prefix}-g{i}" for i in range(args.groups)]
    per = len(tps) // len(groups)
    for i, g in enumerate(groups):
        offsets = {tp: OffsetAndMetadata(args.records // 2, "", -1) for tp in tps[i * per : (i + 1) * per]}
        retry(lambda g=g, offsets=offsets: admin.alter_group_offsets(g, offsets), attempts=60, delay_s=0.5)
    return groups


def per_group_pass(admin: KafkaAdminClient, groups: list[str]) -> tuple[int, int]:
    """The baseline: one OffsetFetch and one ListOffsets per group. Returns (calls, partitions)."""
    calls = n = 0
    for g in groups:
        committed = retry(lambda g=g: admin.list_group_offsets(g), attempts=60, delay_s=0.5)[g]
        ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in committed})
        calls += 2
        for tp, oam in committed.items():
            max(0, ends[tp].offset - oam.offset)
            n += 1
    return calls, n


def measure(fn: Callable[[], Any]) -> tuple[float, int, Any]:
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return wall, peak, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--records", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cluster = None
    if args.bootstrap is None:
        root = Path(tempfile.mkdtemp(prefix="lag-bench-")) / "kafka"
        cluster = LocalCluster(
            ClusterSpec(brokers=3, root=root, base_port=find_free_base_port(3, start=36000))
        )
        t0 = time.monotonic()
        args.bootstrap = cluster.up().bootstrap
        print(f"cluster up in {time.monotonic() - t0:.0f}s: {args.bootstrap}")
    try:
        return run(args)
    finally:
        if cluster is not None:
            cluster.down()


def run(args: argparse.Namespace) -> int:
    admin = KafkaAdminClient(
        bootstrap_servers=args.bootstrap, client_id="lag-bench", request_timeout_ms=60000
    )
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    t0 = time.monotonic()
    groups = setup(admin, args.bootstrap, args, prefix)
    print(
        f"set-up {time.monotonic() - t0:.0f}s: {len(groups)} groups, {args.topics}x{args.partitions} partitions, "
        f"{args.records} records each"
    )
    include = [f"^{prefix}-g"]
    no_ts = LagCollector(admin, None, CollectorConfig(include=include, max_timestamp_reads=0))
    reader = TimestampReader(args.bootstrap, timeout_s=10.0)
    with_ts = LagCollector(admin, reader, CollectorConfig(include=include))
    rows: dict[str, list[tuple[float, int, int, int]]] = {
        "batched": [],
        "batched+seconds": [],
        "per group": [],
    }
    # First pass with seconds reads every record; later passes hit the (tp, offset) cache.
    wall, peak, first = measure(with_ts.run_pass)
    print(
        f"batched+seconds, first pass (reads {reader.reads} records): {wall:.2f}s, peak {peak / 1e6:.1f} MB"
    )
    for _ in range(args.repeat):
        wall, peak, res = measure(no_ts.run_pass)
        res_calls = res.call_seconds
        rows["batched"].append(
            (wall, peak, res.admin_calls, sum(len(g.partitions) for g in res.groups.values()))
        )
        wall, peak, res = measure(with_ts.run_pass)
        rows["batched+seconds"].append(
            (wall, peak, res.admin_calls, sum(len(g.partitions) for g in res.groups.values()))
        )
        wall, peak, (calls, n) = measure(lambda: per_group_pass(admin, groups))
        rows["per group"].append((wall, peak, calls, n))
    print(
        f"\n{'way':<18}{'wall s (median)':>16}{'min':>8}{'max':>8}{'peak MB':>9}{'admin calls':>13}{'pairs':>7}"
    )
    for name, rs in rows.items():
        walls = [r[0] for r in rs]
        print(
            f"{name:<18}{statistics.median(walls):>16.3f}{min(walls):>8.3f}{max(walls):>8.3f}"
            f"{max(r[1] for r in rs) / 1e6:>9.1f}{rs[-1][2]:>13}{rs[-1][3]:>7}"
        )
    print(
        f"batched pass, time per admin call (last pass): { {k: round(v, 3) for k, v in res_calls.items()} }"
    )
    base = statistics.median(r[0] for r in rows["per group"])
    fast = statistics.median(r[0] for r in rows["batched"])
    print(f"\nbatched pass is {base / fast:.1f}x faster than one call per group")
    methods: dict[str, int] = {}
    for g in first.groups.values():
        for p in g.partitions:
            methods[p.method] = methods.get(p.method, 0) + 1
    print(f"lag-seconds methods on the first pass: {methods}")
    reader.close()
    admin.delete_topics([f"{prefix}-t{i}" for i in range(args.topics)])
    admin.delete_groups(groups)
    admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
