"""Bench: lag passes over ONE group committed on 10,000 partitions (issue 6, "a group with 10,000
partitions"), with per-item faults mixed in, on a dedicated 1-node cluster.

    .venv/bin/python bench/lag_big_group.py                       # starts and stops its own 1-node cluster
    .venv/bin/python bench/lag_big_group.py --bootstrap HOST:PORT # use a running cluster
    .venv/bin/python bench/lag_big_group.py --topics 2 --partitions 500   # smaller

Set-up: ``--topics`` × ``--partitions`` partitions (RF 1), ``--records`` records each; one group
commits offset 1 on every partition (one ``alter_group_offsets``). Faults in the same group:
a topic of ``--gone`` partitions committed and then deleted (each partition must become ERR with
its reason), and ``--beyond`` partitions committed past their end offset (lag clamped to 0 and
counted). Then:

* **floor** (the baseline, same run) — the two admin calls any lag tool must make for this group:
  ``list_group_offsets`` + ``list_partition_offsets`` for its partitions, nothing else;
* **pass** — ``LagCollector.run_pass`` (lag in messages, statuses, metrics rendered, records
  built), ``--passes`` times: wall time per pass and the process RSS after each (growth after the
  first pass shows whether state is bounded);
* **pass+seconds** — the same with lag in seconds (record at each committed offset, at most
  ``max_timestamp_reads`` per pass, the rest interpolated), first pass and a repeat;
* tracemalloc peak of one pass (Python allocations).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
import uuid
from pathlib import Path

import psutil
from _kit import retry, wait_ready
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewTopic, OffsetSpec
from kafka.structs import OffsetAndMetadata
from prometheus_client import CollectorRegistry, generate_latest

from lag.collector import CollectorConfig, LagCollector, PassResult
from lag.outputs import LagMetrics, lag_records
from lag.rules import Status
from lag.timestamps import TimestampReader
from testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port
from testbed.faults import DeleteMidPass

MIB = 1024 * 1024


def rss() -> int:
    return psutil.Process().memory_info().rss


def setup(
    admin: KafkaAdminClient, bootstrap: str, args: argparse.Namespace, prefix: str
) -> tuple[str, list[str]]:
    topics = [f"{prefix}-t{i}" for i in range(args.topics)]
    gone = f"{prefix}-gone"
    t0 = time.monotonic()
    for t in topics:  # one topic per request: a 1,000-partition CreateTopics is already large
        admin.create_topics([NewTopic(t, args.partitions, 1)])
    admin.create_topics([NewTopic(gone, args.gone, 1)])
    tps = [TopicPartition(t, p) for t in topics for p in range(args.partitions)]
    gone_tps = [TopicPartition(gone, p) for p in range(args.gone)]
    wait_ready(admin, tps + gone_tps, timeout_s=600, poll_s=2)
    print(f"  topics created and ready: {time.monotonic() - t0:.0f}s")
    t0 = time.monotonic()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50, batch_size=16384)
    now_ms = int(time.time() * 1000)
    for tp in tps:
        for i in range(args.records):
            producer.send(
                tp.topic, b"v", partition=tp.partition, timestamp_ms=now_ms - (args.records - i) * 60_000
            )
    producer.flush()
    producer.close()
    print(f"  produced {len(tps) * args.records} records: {time.monotonic() - t0:.0f}s")
    t0 = time.monotonic()
    group = f"{prefix}-big"
    offsets = {tp: OffsetAndMetadata(1, "", -1) for tp in tps + gone_tps}
    for tp in tps[: args.beyond]:
        offsets[tp] = OffsetAndMetadata(args.records + 1000, "", -1)  # past the end: clamped
    retry(lambda: admin.alter_group_offsets(group, offsets), attempts=60, delay_s=1)
    vanishing = f"{prefix}-vanishing"
    retry(
        lambda: admin.alter_group_offsets(vanishing, {tps[0]: OffsetAndMetadata(1, "", -1)}),
        attempts=60,
        delay_s=1,
    )
    print(f"  committed {len(offsets)} offsets: {time.monotonic() - t0:.0f}s")
    return group, topics


def floor_pass(admin: KafkaAdminClient, group: str) -> int:
    committed = admin.list_group_offsets(group)[group]
    ends = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in committed})
    return sum(max(0, ends[tp].offset - o.offset) for tp, o in committed.items() if tp in ends)


def full_pass(
    collector: LagCollector, metrics: LagMetrics, registry: CollectorRegistry
) -> tuple[PassResult, int]:
    result = collector.run_pass()
    metrics.update(result, collector.clamped_total)
    exposition = generate_latest(registry)
    n = sum(1 for _ in lag_records(result, "bench", "bench"))
    assert n == sum(len(g.partitions) for g in result.groups.values())
    return result, len(exposition)


def summarize(result: PassResult, group: str) -> str:
    g = result.groups[group]
    statuses: dict[str, int] = {}
    methods: dict[str, int] = {}
    for p in g.partitions:
        statuses[p.verdict.status.value] = statuses.get(p.verdict.status.value, 0) + 1
        methods[p.method] = methods.get(p.method, 0) + 1
    return f"{len(g.partitions)} partitions, statuses {statuses}, methods {methods}, group {g.verdict.status.value}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--records", type=int, default=3)
    ap.add_argument("--gone", type=int, default=50)
    ap.add_argument("--beyond", type=int, default=20)
    ap.add_argument("--passes", type=int, default=10)
    ap.add_argument(
        "--smoke", action="store_true", help="a size that runs in seconds (1 topic x 20 partitions, 2 passes)"
    )
    args = ap.parse_args()
    if args.smoke:
        args.topics, args.partitions, args.gone, args.beyond, args.passes = 1, 20, 3, 2, 2
    cluster = None
    if args.bootstrap is None:
        root = Path(tempfile.mkdtemp(prefix="lag-big-")) / "kafka"
        spec = ClusterSpec(
            brokers=1, root=root, base_port=find_free_base_port(1, start=41000), request_log_level="INFO"
        )
        cluster = LocalCluster(spec)
        t0 = time.monotonic()
        args.bootstrap = cluster.up().bootstrap
        print(f"1-node cluster up in {time.monotonic() - t0:.0f}s: {args.bootstrap} ({root})")
    try:
        return run(args, own_cluster=cluster is not None)
    finally:
        if cluster is not None:
            t0 = time.monotonic()
            cluster.down()
            print(f"cluster down in {time.monotonic() - t0:.0f}s")
            root.parent.rmdir()  # the mkdtemp directory, empty once the cluster is removed


def run(args: argparse.Namespace, own_cluster: bool) -> int:
    admin = KafkaAdminClient(
        bootstrap_servers=args.bootstrap, client_id="lag-big", request_timeout_ms=120_000
    )
    prefix = f"big-{uuid.uuid4().hex[:6]}"
    total = args.topics * args.partitions
    print(f"set-up: {args.topics} topics x {args.partitions} partitions = {total} (+{args.gone} to delete)")
    t0 = time.monotonic()
    group, topics = setup(admin, args.bootstrap, args, prefix)
    print(f"set-up total {time.monotonic() - t0:.0f}s")

    include = [f"^{group}$"]
    vanishing = f"{prefix}-vanishing"
    faulty = DeleteMidPass(admin, [f"{prefix}-gone"], [vanishing])
    collector = LagCollector(
        faulty, None, CollectorConfig(include=[*include, f"^{vanishing}$"], max_timestamp_reads=0)
    )
    metrics = LagMetrics("bench")
    registry = CollectorRegistry()
    registry.register(metrics)

    floors = []
    for _ in range(3):  # before the faults: the floor sees the whole group
        t0 = time.perf_counter()
        floor_pass(admin, group)
        floors.append(time.perf_counter() - t0)
    rss0 = rss()
    walls, rsss, admin_s = [], [], []
    for i in range(args.passes):
        t0 = time.perf_counter()
        result, exposition_bytes = full_pass(collector, metrics, registry)
        walls.append(time.perf_counter() - t0)
        rsss.append(rss())
        admin_s.append(sum(result.call_seconds.values()))
        if i == 0:
            print(f"\npass 1: {summarize(result, group)}")
            print(
                f"  admin calls {result.admin_calls}, per call { ({k: round(v, 2) for k, v in result.call_seconds.items()}) }"
            )
            print(f"  pass errors: {result.errors or 'none'}; clamped this pass: {result.clamped}")
            print(f"  /metrics exposition {exposition_bytes / MIB:.1f} MiB")
            errs = [p for p in result.groups[group].partitions if p.verdict.status is Status.ERR]
            if errs:
                print(f"  {len(errs)} ERR partitions, e.g.: {errs[0].verdict.reason}")
            if vanishing in result.groups:
                print(
                    f"  vanished group: {result.groups[vanishing].verdict.status.value}: {result.groups[vanishing].verdict.reason}"
                )
    tracemalloc.start()
    full_pass(collector, metrics, registry)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()

    reader = TimestampReader(args.bootstrap, timeout_s=10.0)
    with_ts = LagCollector(admin, reader, CollectorConfig(include=include))
    t0 = time.perf_counter()
    first = with_ts.run_pass()
    ts_first = time.perf_counter() - t0
    t0 = time.perf_counter()
    with_ts.run_pass()
    ts_again = time.perf_counter() - t0
    reader.close()

    print(f"\n{'way':<34}{'wall s (median)':>16}{'min':>8}{'max':>8}")
    print(
        f"{'floor (2 bare admin calls)':<34}{statistics.median(floors):>16.2f}{min(floors):>8.2f}{max(floors):>8.2f}"
    )
    print(
        f"{'pass (lag msgs, status, outputs)':<34}{statistics.median(walls):>16.2f}{min(walls):>8.2f}{max(walls):>8.2f}"
    )
    print(f"{'pass+seconds, first':<34}{ts_first:>16.2f}")
    print(f"{'pass+seconds, repeat (cached)':<34}{ts_again:>16.2f}")
    print(f"pass / floor: {statistics.median(walls) / statistics.median(floors):.1f}x")
    print(
        f"per pass: admin calls {statistics.median(admin_s):.2f}s, the rest (rules, history, metrics, "
        f"records) {statistics.median(walls) - statistics.median(admin_s):.2f}s = "
        f"{(statistics.median(walls) - statistics.median(admin_s)) / total * 1e3:.2f} ms per partition"
    )
    print(f"wall per pass: {[round(w, 2) for w in walls]}")
    print(f"pass+seconds first: {summarize(first, group)}")
    half = args.passes // 2
    print(
        f"\nRSS before passes {rss0 / MIB:.0f} MiB; after each pass "
        f"{[round(r / MIB) for r in rsss]} MiB; growth pass 1 {(rsss[0] - rss0) / MIB:+.1f} MiB, "
        f"passes 2..{half} {(rsss[half - 1] - rsss[0]) / MIB:+.1f} MiB (windows filling), "
        f"passes {half + 1}..{args.passes} {(rsss[-1] - rsss[half - 1]) / MIB:+.1f} MiB"
    )
    print(
        f"tracemalloc peak of one pass: {peak / MIB:.1f} MiB; tracked (group, partition) pairs: {collector.tracked_partitions}"
    )
    if not own_cluster:  # our own cluster is removed whole (deleting 10,000 partitions is slow)
        admin.delete_topics(topics)
        admin.delete_groups([group])
    admin.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
