"""Default vs round-robin vs skew-aware partitioning of Zipf-keyed records, side by side.

For each Zipf exponent (``--exponents``, default 1.0 1.2 1.5) one record list is drawn once
(``--records`` records over ``--keys`` keys, values of 50–500 bytes) and sent, unchanged, through
three producers into a fresh 12-partition topic each (partition p led by broker p % 3 + 1, four
per broker):

* ``default``     — kafka-python's ``DefaultPartitioner`` (murmur2 of the key, as the Java client);
* ``round_robin`` — keys ignored, partitions in turn;
* ``skew_aware``  — :class:`producer.SkewAwarePartitioner` (its defaults, or ``--support`` with
  ε = support / 5; d sized per hot key; acks fed back with ``watch``).

Per run:

* imbalance ``I = max/avg − 1`` of the per-partition messages and bytes (from the acks);
* producer throughput (records/s from the first send to the end of ``flush``) and p99 ack latency
  (send call → ack callback);
* a stateful per-key counting consumer group, once per ``--consumers`` size (members holding the
  partitions a range assignor gives them, assigned statically so that no rebalance falls in the
  measured time; :func:`consumer.split_keys.counting` state): each record costs ``--work-us`` of
  simulated I/O-bound work (a sleep per batch, so members run in parallel and the member holding
  the heaviest partitions is the bottleneck: with 12 members, one per partition, the member
  reading the hottest partition); group throughput = records / (first record → last record of
  the whole group), and per-key state = (partition, key) entries summed over members (each entry
  one key → count; the memory is proportional to it).

Every partitioner runs ``--repeats`` times per exponent (interleaved); the medians are printed
after the runs. The machine must be quiet for figures worth recording. Usage::

    python bench/skew_partitioner.py [--records 100000] [--keys 10000] [--consumers 3 12]

starts its own 3-broker cluster in a temporary directory and stops it at the end;
``--cluster-dir DIR`` uses a running ``linkwatch cluster up --dir DIR`` cluster instead.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _kit import retry  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.partitioner import DefaultPartitioner, Partitioner

from consumer.split_keys import counting
from producer import SkewAwarePartitioner
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port

PARTITIONS = 12


class RoundRobinPartitioner(Partitioner):
    """Partitions in turn, whatever the key (thread-safe)."""

    def __init__(self) -> None:
        self._next = 0
        self._lock = threading.Lock()

    def partition(
        self, topic: str, key: Any, serialized_key: Any, value: Any, serialized_value: Any, cluster: Any
    ) -> int:
        parts = sorted(cluster.partitions_for_topic(topic))
        with self._lock:
            self._next += 1
            return parts[self._next % len(parts)]


def partitioners(support: float | None) -> dict[str, Callable[[], Partitioner]]:
    def skew_aware() -> Partitioner:
        if support is None:
            return SkewAwarePartitioner()
        return SkewAwarePartitioner(support=support, epsilon=support / 5)

    return {"default": DefaultPartitioner, "round_robin": RoundRobinPartitioner, "skew_aware": skew_aware}


@dataclass
class Result:
    msgs_imbalance: float
    bytes_imbalance: float
    produce_rate: float
    ack_p99_ms: float
    group_rates: dict[int, float]  # members -> records/s of the whole group
    state_entries: int


def median_result(rs: list[Result]) -> Result:
    med = statistics.median
    return Result(
        med(r.msgs_imbalance for r in rs),
        med(r.bytes_imbalance for r in rs),
        med(r.produce_rate for r in rs),
        med(r.ack_p99_ms for r in rs),
        {m: med(r.group_rates[m] for r in rs) for m in rs[0].group_rates},
        int(med(r.state_entries for r in rs)),
    )


def zipf_records(n: int, keys: int, exponent: float, seed: int) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    weights = [1 / (k**exponent) for k in range(1, keys + 1)]
    ks = rng.choices(range(keys), weights=weights, k=n)
    return [(b"key-%d" % k, b"x" * rng.randint(50, 500)) for k in ks]


def imbalance(loads: list[float]) -> float:
    avg = sum(loads) / len(loads)
    return max(loads) / avg - 1 if avg else 0.0


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def create_topic(admin: KafkaAdminClient, name: str) -> None:
    admin.create_topics(
        [NewTopic(name, -1, -1, replica_assignments={p: [p % 3 + 1] for p in range(PARTITIONS)})]
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = (admin.describe_topics([name]) or [{}])[0].get("partitions") or []
        if len(parts) == PARTITIONS and all(p["leader_id"] > 0 for p in parts):
            return
        time.sleep(0.2)
    raise SystemExit(f"topic {name} has no leaders after 30s")


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]], partitioner: Partitioner):
    """Send every record; (records/s, ack latencies in ms, messages and bytes per partition)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, partitioner=partitioner)
    lat_ms: list[float] = []
    msgs, nbytes = [0] * PARTITIONS, [0] * PARTITIONS
    lock = threading.Lock()

    def on_ack(sent_at: float, md: Any) -> None:
        with lock:
            lat_ms.append((time.monotonic() - sent_at) * 1000)
            msgs[md.partition] += 1
            nbytes[md.partition] += md.serialized_key_size + md.serialized_value_size

    start = time.monotonic()
    for key, value in records:
        fut = producer.send(topic, key=key, value=value)
        fut.add_callback(lambda md, t=time.monotonic(): on_ack(t, md))
        if isinstance(partitioner, SkewAwarePartitioner):
            partitioner.watch(fut)
    producer.flush(300)
    rate = len(records) / (time.monotonic() - start)
    producer.close()
    if len(lat_ms) != len(records):
        raise SystemExit(f"{len(records) - len(lat_ms)} records were not acked")
    return rate, lat_ms, msgs, nbytes


def range_assignment(partitions: int, members: int) -> list[list[int]]:
    """What Kafka's range assignor gives each member of a group: contiguous runs, the first
    ``partitions % members`` members one partition more."""
    per, extra = divmod(partitions, members)
    out, start = [], 0
    for i in range(members):
        size = per + (1 if i < extra else 0)
        out.append(list(range(start, start + size)))
        start += size
    return out


def consume_group(bootstrap: str, topic: str, n: int, members: int, work_us: float) -> tuple[float, int]:
    """The per-key counting group: (records/s for the whole group, per-key state entries)."""
    owned = [[TopicPartition(topic, p) for p in ps] for ps in range_assignment(PARTITIONS, members)]
    states = [counting() for _ in range(members)]
    done = threading.Event()
    lock = threading.Lock()
    seen = {"n": 0, "first": 0.0, "last": 0.0}

    def member(i: int) -> None:
        c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False)
        c.assign(owned[i])
        try:
            while not done.is_set():
                batch = c.poll(timeout_ms=200, max_records=500)
                k = 0
                for tp, recs in batch.items():
                    for r in recs:
                        states[i].add(tp.partition, r.key, None)
                    k += len(recs)
                if k:
                    time.sleep(k * work_us / 1e6)  # the job's per-record work (I/O bound)
                    with lock:
                        now = time.monotonic()
                        seen["first"] = seen["first"] or now
                        seen["n"] += k
                        seen["last"] = now
                        if seen["n"] >= n:
                            done.set()
        finally:
            c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    for t in threads:
        t.start()
    done.wait(timeout=600)
    done.set()
    for t in threads:
        t.join(30)
    if seen["n"] < n:
        raise SystemExit(f"the group consumed {seen['n']} of {n} records")
    return n / max(seen["last"] - seen["first"], 1e-9), sum(s.entries() for s in states)


def run(
    state: ClusterState, admin: KafkaAdminClient, name: str, records: list[tuple[bytes, bytes]], args
) -> Result:
    topic = f"bench-skew-{name}-{uuid.uuid4().hex[:6]}"
    create_topic(admin, topic)
    try:
        rate, lat, msgs, nbytes = produce(state.bootstrap, topic, records, partitioners(args.support)[name]())
        rates, entries = {}, 0
        for members in args.consumers:
            rates[members], entries = consume_group(
                state.bootstrap, topic, len(records), members, args.work_us
            )
    finally:
        retry(lambda: admin.delete_topics([topic]), attempts=3, delay_s=1.0)
    return Result(imbalance(msgs), imbalance(nbytes), rate, p99(lat), rates, entries)


def row(s: float, name: str, r: Result) -> str:
    groups = " ".join(f"{r.group_rates[m]:11.0f}" for m in sorted(r.group_rates))
    return (
        f"{s:5.1f} {name:12} {r.msgs_imbalance:7.2f} {r.bytes_imbalance:8.2f} {r.produce_rate:14.0f} "
        f"{r.ack_p99_ms:11.1f} {groups} {r.state_entries:14d}"
    )


def compare(results: dict[str, Result]) -> str:
    d, rr, sk = results["default"], results["round_robin"], results["skew_aware"]
    groups = ", ".join(
        f"{m} members {sk.group_rates[m] / d.group_rates[m]:.2f}x" for m in sorted(sk.group_rates)
    )
    return (
        f"      skew_aware vs default: imbalance msgs {sk.msgs_imbalance / max(d.msgs_imbalance, 1e-9):.3f}x, "
        f"bytes {sk.bytes_imbalance / max(d.bytes_imbalance, 1e-9):.3f}x; group throughput {groups}; "
        f"state vs round_robin {sk.state_entries / max(rr.state_entries, 1):.2f}x"
    )


def bench(state: ClusterState, args: argparse.Namespace) -> None:
    admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
    support = "defaults" if args.support is None else f"support {args.support:g}"
    print(
        f"{args.records} records, {args.keys} keys, {PARTITIONS} partitions over 3 brokers, skew_aware {support}, "
        f"consumer groups of {args.consumers} members at {args.work_us:g} µs/record, {args.repeats} repeats",
        flush=True,
    )
    groups = " ".join(f"{f'group{m} r/s':>11}" for m in sorted(args.consumers))
    header = (
        f"{'zipf':>5} {'partitioner':12} {'I msgs':>7} {'I bytes':>8} {'produce rec/s':>14} "
        f"{'ack p99 ms':>11} {groups} {'state entries':>14}"
    )
    medians: dict[float, dict[str, Result]] = {}
    try:
        for s in args.exponents:
            records = zipf_records(args.records, args.keys, s, args.seed)
            runs: dict[str, list[Result]] = {name: [] for name in partitioners(args.support)}
            for i in range(args.repeats):
                print(f"run {i + 1}\n{header}", flush=True)
                for name in runs:
                    runs[name].append(run(state, admin, name, records, args))
                    print(row(s, name, runs[name][-1]), flush=True)
            medians[s] = {name: median_result(rs) for name, rs in runs.items()}
    finally:
        admin.close()
    print(f"medians of {args.repeats} runs\n{header}")
    for s, results in medians.items():
        for name, r in results.items():
            print(row(s, name, r))
        print(compare(results))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cluster-dir",
        type=Path,
        help="A running 3-broker `linkwatch cluster up` directory (default: start one for this run).",
    )
    p.add_argument("--records", type=int, default=100_000)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--exponents", type=float, nargs="+", default=[1.0, 1.2, 1.5])
    p.add_argument("--consumers", type=int, nargs="+", default=[3, 12], help="Group sizes to measure.")
    p.add_argument("--work-us", type=float, default=100.0, help="Simulated work per consumed record (µs).")
    p.add_argument(
        "--support", type=float, default=None, help="Hot-key support s (default: the partitioner's own)."
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=16)
    p.add_argument(
        "--smoke", action="store_true", help="a size that runs in seconds (2,000 records, Zipf 1.2, one run)"
    )
    args = p.parse_args()
    if args.smoke:
        args.records, args.keys, args.exponents, args.consumers, args.repeats = 2_000, 200, [1.2], [3], 1
    if args.cluster_dir is not None:
        state = ClusterState.load(args.cluster_dir)
        if state is None:
            print(f"no cluster in {args.cluster_dir}", file=sys.stderr)
            return 2
        bench(state, args)
        return 0
    with tempfile.TemporaryDirectory(prefix="lw-skew-bench-") as tmp:
        spec = ClusterSpec(brokers=3, root=Path(tmp) / "kafka", base_port=find_free_base_port(3, start=31000))
        cluster = LocalCluster(spec)
        try:
            bench(cluster.up(), args)
        finally:
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
