"""Bench: one lag evaluation pass over 200 groups (40,000 (group, partition) pairs) against its
admin-call floor and one call per group, all evaluating the same pairs.

    .venv/bin/python bench/lag_pass.py                       # starts (and stops) a local 3-broker cluster
    .venv/bin/python bench/lag_pass.py --bootstrap HOST:PORT # use a running cluster
    .venv/bin/python bench/lag_pass.py --bootstrap HOST:PORT --smoke   # seconds: 4 groups, 2 x 10 partitions

Set-up: ``--topics`` topics × ``--partitions`` partitions (RF 1) with ``--records`` records each;
every group commits offsets (through ``alter_group_offsets``, no consumers) for
``topics × partitions / groups`` partitions of one topic. The collector evaluates every
partition of a topic a group commits on (those without a commit too: their messages are read
by nobody), so with the defaults each group has 200 pairs: 10 committed, 190 without a commit,
40,000 in all. Then, in the same run, alternating:

* **pass** — :meth:`LagCollector.run_pass`: list_groups, batched list_group_offsets,
  describe_topics, describe_cluster, one list_partition_offsets for the end offsets and one
  for the log starts, then every pair's status and reason decided (per topic, as arrays) and
  each group's verdict; no lag seconds (``max_timestamp_reads: 0``);
* **pass+seconds** — the same with lag in seconds (the record at each position read once, then
  cached);
* **pass, then every pair read** — the pass, then every :class:`PartitionLag` built with its
  verdict's words, as ``/metrics`` and the ``ConsumerLag`` samples read them (the pass builds
  them only on demand);
* **admin floor** — the admin calls of the pass alone, as the pass timed them
  (``PassResult.call_seconds``): what any lag tool evaluating these pairs must wait for;
* **per group** (the baseline most exporters use) — one describe_topics, then for each group one
  ``list_group_offsets`` and one ``list_partition_offsets`` for every partition of the topics it
  commits on, and its lag per pair (end − max(committed, 0)): the same pairs, lag in messages
  only, no status.

Prints wall time (median of ``--repeat``), admin calls, pairs and the peak of Python
allocations during the call (tracemalloc, which slows Python code about 3×: the peaks are
measured in separate calls from the timed ones).
"""

from __future__ import annotations

import argparse
import os
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

from lag.collector import CollectorConfig, LagCollector, PassResult
from lag.timestamps import TimestampReader
from testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port

SMOKE = {"groups": 4, "topics": 2, "partitions": 10, "records": 4, "repeat": 1}


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
    per = max(1, len(tps) // len(groups))
    for i, g in enumerate(groups):
        offsets = {tp: OffsetAndMetadata(args.records // 2, "", -1) for tp in tps[i * per : (i + 1) * per]}
        retry(lambda g=g, offsets=offsets: admin.alter_group_offsets(g, offsets), attempts=60, delay_s=0.5)
    return groups


def per_group_pass(admin: KafkaAdminClient, groups: list[str]) -> tuple[int, int]:
    """The baseline, on the pass's pairs: per group its commits and the end offsets of every
    partition of the topics it commits on. Returns (admin calls, pairs)."""
    partitions = {t["name"]: [p["partition_index"] for p in t["partitions"]] for t in admin.describe_topics()}
    calls, n = 1, 0
    for g in groups:
        committed = retry(lambda g=g: admin.list_group_offsets(g), attempts=60, delay_s=0.5)[g]
        offsets = {tp: oam.offset for tp, oam in committed.items()}
        pairs = {TopicPartition(t, p) for t in {tp.topic for tp in offsets} for p in partitions.get(t, ())}
        ends = admin.list_partition_offsets(dict.fromkeys(pairs, OffsetSpec.LATEST))
        calls += 2
        for tp in pairs:
            max(0, ends[tp].offset - max(offsets.get(tp, 0), 0))
            n += 1
    return calls, n


def read_every_pair(result: PassResult) -> int:
    """What /metrics and the samples read of a pass: every pair with its verdict's words."""
    return sum(len(p.verdict.reason) > 0 for g in result.groups.values() for p in g.partitions)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def peak_mb(fn: Callable[[], Any]) -> float:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=200)
    ap.add_argument("--records", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help=f"a size that runs in seconds: {SMOKE}")
    args = ap.parse_args()
    if args.smoke:
        vars(args).update(SMOKE)
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
        f"{args.records} records each; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    include = [f"^{prefix}-g"]
    no_ts = LagCollector(admin, None, CollectorConfig(include=include, max_timestamp_reads=0))
    reader = TimestampReader(args.bootstrap, timeout_s=10.0)
    with_ts = LagCollector(admin, reader, CollectorConfig(include=include))
    # First pass with seconds reads every record; later passes hit the (tp, offset) cache.
    wall, first = timed(with_ts.run_pass)
    print(f"pass+seconds, first pass (reads {reader.reads} records): {wall:.2f}s", flush=True)
    rows: dict[str, list[tuple[float, int, int]]] = {
        k: [] for k in ("pass", "pass+seconds", "pass, then every pair read", "admin floor", "per group")
    }
    for _ in range(args.repeat):
        wall, res = timed(no_ts.run_pass)
        pairs = sum(len(g.partitions) for g in res.groups.values())
        rows["pass"].append((wall, res.admin_calls, pairs))
        rows["admin floor"].append((sum(res.call_seconds.values()), res.admin_calls, pairs))
        wall, res2 = timed(with_ts.run_pass)
        rows["pass+seconds"].append(
            (wall, res2.admin_calls, sum(len(g.partitions) for g in res2.groups.values()))
        )
        wall, read = timed(lambda: read_every_pair(no_ts.run_pass()))
        rows["pass, then every pair read"].append((wall, res.admin_calls, read))
        wall, (calls, n) = timed(lambda: per_group_pass(admin, groups))
        rows["per group"].append((wall, calls, n))
    peaks = {
        "pass": peak_mb(no_ts.run_pass),
        "pass+seconds": peak_mb(with_ts.run_pass),
        "pass, then every pair read": peak_mb(lambda: read_every_pair(no_ts.run_pass())),
        "per group": peak_mb(lambda: per_group_pass(admin, groups)),
    }
    print(
        f"\n{'way':<28}{'wall s (median)':>16}{'min':>8}{'max':>8}{'peak MB':>9}{'admin calls':>13}{'pairs':>8}"
    )
    for name, rs in rows.items():
        walls = [r[0] for r in rs]
        peak = f"{peaks[name]:>9.1f}" if name in peaks else f"{'-':>9}"
        print(
            f"{name:<28}{statistics.median(walls):>16.3f}{min(walls):>8.3f}{max(walls):>8.3f}"
            f"{peak}{rs[-1][1]:>13}{rs[-1][2]:>8}"
        )
    print(f"pass, time per admin call (last pass): { {k: round(v, 3) for k, v in res.call_seconds.items()} }")
    med = {name: statistics.median(r[0] for r in rs) for name, rs in rows.items()}
    print(
        f"\npass / admin floor: {med['pass'] / med['admin floor']:.2f}x; per group / pass: "
        f"{med['per group'] / med['pass']:.2f}x (both on the same {rows['pass'][-1][2]} pairs)"
    )
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
