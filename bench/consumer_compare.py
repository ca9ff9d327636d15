"""Compare AsyncFetchConsumer with kafka-python's KafkaConsumer and confluent-kafka's Consumer.

Same load, same run, one client after the other on a real 3-broker cluster, in three cases
(each client is assigned every partition of a fresh 6-partition topic, two led by each broker;
a group id is set for commits but no group membership, so rebalances do not blur the figures):

* ``healthy``     — 3 healthy brokers;
* ``slow_broker`` — broker 2 SIGSTOPped for ``--pause-ms`` out of every second (PauseDutyCycle);
* ``slow_app``    — the application spends ``--app-ms`` per record.

Clients: ``AsyncFetchConsumer`` with the same single poll loop as the others, and
``AsyncFetchConsumer+workers`` — the same consumer with the per-record work on
:class:`~consumer.workers.PartitionWorkers` (one worker per partition, in order per
partition; safe because only acked offsets are committed). With kafka-python's or confluent's
commit-the-polled-position model that concurrency would commit unfinished records, so they run
the loop only.

Per (case, client):

* *throughput* — a backlog of ``--backlog`` records is drained; records/s from the first to
  the last record (in ``slow_app`` the application bounds it for everyone);
* *end-to-end latency* — a producer sends ``--rate`` records/s for ``--seconds`` while the client
  consumes; e2e = the moment the application starts on a record − its CreateTime; p50/p99;
* *broker FetchConsumer send time* — Jolokia ``ResponseSendTimeMs`` (request=FetchConsumer),
  exact window mean Δ(Count·Mean)/ΔCount summed over brokers, and the request count.

Usage::

    linkwatch cluster up --dir /tmp/lw-bench --base-port 31000
    python bench/consumer_compare.py --cluster-dir /tmp/lw-bench
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from consumer import AsyncFetchConsumer, ConsumerConfig
from linkwatch.sketch import exact_quantile
from testbed.cluster import ClusterState
from testbed.faults import PauseDutyCycle

PARTITIONS = 6


def leader_of(partition: int) -> int:
    """The broker leading ``partition`` of every bench topic (two partitions per broker)."""
    return partition % 3 + 1


SEND_TIME = "kafka.network:type=RequestMetrics,name=ResponseSendTimeMs,request=FetchConsumer"


# --------------------------------------------------------------------------- clients
# Each client: open(bootstrap, topic, group, app_s) -> (poll, close, assigned).
# poll() -> [(CreateTime ms, when the application started on it or None, partition)]; None: the
# bench loop does the work (app_s per record) and takes the start time itself.

Polled = list[tuple[int, float | None, int]]


@dataclass
class Client:
    name: str
    open: Callable[
        [str, str, str, float], tuple[Callable[[], Polled], Callable[[], None], Callable[[], bool]]
    ]


def _async(bootstrap: str, topic: str, group: str, app_s: float):
    cfg = ConsumerConfig(bootstrap_servers=bootstrap, group_id=group, client_id="bench-async")
    c = AsyncFetchConsumer(cfg, partitions=[(topic, p) for p in range(PARTITIONS)]).start()

    def poll() -> Polled:
        batch = c.poll(timeout_s=0.1, max_records=500)
        c.ack_many(batch)  # acked before the work: the app-ms sleep happens in the loop below
        return [(d.timestamp_ms, None, d.partition) for d in batch]

    def close() -> None:
        c.close()
        print(f"  async stats: {c.stats}", file=sys.stderr)

    return poll, close, lambda: bool(c.assignment())


def _async_workers(bootstrap: str, topic: str, group: str, app_s: float):
    import queue

    from consumer.workers import PartitionWorkers

    cfg = ConsumerConfig(bootstrap_servers=bootstrap, group_id=group, client_id="bench-async-workers")
    c = AsyncFetchConsumer(cfg, partitions=[(topic, p) for p in range(PARTITIONS)]).start()
    handled: queue.SimpleQueue[tuple[int, float, int]] = queue.SimpleQueue()

    def work(d) -> None:
        handled.put((d.timestamp_ms, time.time(), d.partition))
        if app_s:
            time.sleep(app_s)

    stop = threading.Event()
    pool = PartitionWorkers(c, work, workers=PARTITIONS, queue_records=500)
    runner = threading.Thread(target=pool.run, args=(stop,), daemon=True)
    runner.start()

    def poll() -> Polled:
        out: Polled = []
        try:
            out.append(handled.get(timeout=0.1))
            while len(out) < 5000:
                out.append(handled.get_nowait())
        except queue.Empty:
            pass
        return out

    def close() -> None:
        stop.set()
        runner.join(30)
        c.close()
        print(f"  async+workers stats: {c.stats}", file=sys.stderr)

    return poll, close, lambda: bool(c.assignment())


def _kafka_python(bootstrap: str, topic: str, group: str, app_s: float):
    from kafka import TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", client_id="bench-kp"
    )
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])

    def poll() -> Polled:
        return [
            (r.timestamp, None, r.partition)
            for recs in c.poll(timeout_ms=100, max_records=500).values()
            for r in recs
        ]

    return poll, c.close, lambda: bool(c.assignment())


def _confluent(bootstrap: str, topic: str, group: str, app_s: float):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "client.id": "bench-ck",
        }
    )
    c.assign([TopicPartition(topic, p, -2) for p in range(PARTITIONS)])  # -2: beginning

    def poll() -> Polled:
        return [
            (m.timestamp()[1], None, m.partition())
            for m in c.consume(num_messages=500, timeout=0.1)
            if m.error() is None
        ]

    return poll, c.close, lambda: bool(c.assignment())


CLIENTS = [
    Client("AsyncFetchConsumer", _async),
    Client("AsyncFetchConsumer+workers", _async_workers),
    Client("KafkaConsumer", _kafka_python),
    Client("confluent", _confluent),
]


# --------------------------------------------------------------------------- load and measurements


def create_topic(admin: KafkaAdminClient, name: str) -> None:
    admin.create_topics(
        [NewTopic(name, -1, -1, replica_assignments={p: [leader_of(p)] for p in range(PARTITIONS)})]
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        parts = (admin.describe_topics([name]) or [{}])[0].get("partitions") or []
        if len(parts) == PARTITIONS and all(p["leader_id"] > 0 for p in parts):
            return
        time.sleep(0.2)


def produce(
    bootstrap: str, topic: str, n: int, rate: float | None, stop: threading.Event | None = None
) -> int:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=1, acks=1)
    payload = b"x" * 200
    start = time.monotonic()
    sent = 0
    for i in range(n):
        if stop is not None and stop.is_set():
            break
        producer.send(topic, value=payload, partition=i % PARTITIONS)
        sent += 1
        if rate:
            time.sleep(max(0.0, start + (i + 1) / rate - time.monotonic()))
    producer.flush(60)
    producer.close()
    return sent


def warm_up(state: ClusterState, admin: KafkaAdminClient, seconds: float, rate: float) -> None:
    """Produce and consume at the latency phase's rate for ``seconds`` on a throwaway topic, so
    the brokers' JIT compilation and first-use costs do not fall on the first measured client
    (always ``AsyncFetchConsumer`` in the ``healthy`` case)."""
    if seconds <= 0:
        return
    from kafka import TopicPartition

    topic = f"bench-warmup-{uuid.uuid4().hex[:6]}"
    create_topic(admin, topic)
    producer = threading.Thread(
        target=produce, args=(state.bootstrap, topic, int(rate * seconds), rate), daemon=True
    )
    producer.start()
    c = KafkaConsumer(
        bootstrap_servers=state.bootstrap, auto_offset_reset="earliest", client_id="bench-warmup"
    )
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    while producer.is_alive():
        c.poll(timeout_ms=100)
    c.close()
    admin.delete_topics([topic])


def jolokia_send_time(state: ClusterState) -> tuple[float, float]:
    """Sum over brokers of (Count, Count·Mean) of FetchConsumer ResponseSendTimeMs."""
    count = total = 0.0
    for node in state.nodes:
        with urllib.request.urlopen(f"{node.jolokia_url}/read/{SEND_TIME}", timeout=5) as resp:
            value = json.load(resp)["value"]
        count += value["Count"]
        total += value["Count"] * value["Mean"]
    return count, total


def pct(values: list[float], q: float) -> float:
    return exact_quantile(values, q) if values else float("nan")


@dataclass
class Result:
    case: str
    client: str
    throughput: float
    p50_ms: float
    p99_ms: float
    p99_b13_ms: float  # p99 over the partitions led by brokers 1 and 3 only
    records: int
    send_mean_ms: float
    fetches: int


def run_one(state: ClusterState, admin: KafkaAdminClient, case: str, client: Client, args, fault) -> Result:
    bootstrap = state.bootstrap
    app_s = args.app_ms / 1000 if case == "slow_app" else 0.0
    topic = f"bench-{case}-{uuid.uuid4().hex[:6]}"
    create_topic(admin, topic)
    backlog = args.backlog if case != "slow_app" else int(args.backlog / 10)
    produce(bootstrap, topic, backlog, rate=None)
    poll, close, assigned = client.open(bootstrap, topic, f"bench-{uuid.uuid4().hex[:6]}", app_s)
    try:
        with fault() if case == "slow_broker" else nullcontext():
            # 1. drain the backlog
            # (timed from the moment the client has its assignment: clients that prefetch
            # during the join are not credited with an infinite rate)
            got, first, last = 0, None, 0.0
            deadline = time.monotonic() + 120
            while got < backlog and time.monotonic() < deadline:
                batch = poll()
                if first is None and (batch or assigned()):
                    first = time.monotonic()
                for _ts, started, _p in batch:
                    got += 1
                    if app_s and started is None:
                        time.sleep(app_s)
                if batch:
                    last = time.monotonic()
            throughput = got / (last - first) if first is not None and last > first else float("nan")
            # 2. latency under a steady rate
            rate = args.rate if case != "slow_app" else args.app_rate
            n = int(rate * args.seconds)
            c0, t0 = jolokia_send_time(state)
            stop = threading.Event()
            producer = threading.Thread(target=produce, args=(bootstrap, topic, n, rate, stop), daemon=True)
            producer.start()
            e2e: list[float] = []
            e2e_healthy: list[float] = []  # partitions led by brokers 1 and 3
            deadline = time.monotonic() + args.seconds + 60
            while len(e2e) < n and time.monotonic() < deadline:
                for ts, started, partition in poll():
                    e2e.append((started if started is not None else time.time()) * 1000 - ts)
                    if leader_of(partition) != 2:
                        e2e_healthy.append(e2e[-1])
                    if app_s and started is None:
                        time.sleep(app_s)
            stop.set()
            producer.join(60)
            c1, t1 = jolokia_send_time(state)
    finally:
        close()
    admin.delete_topics([topic])
    send_mean = (t1 - t0) / (c1 - c0) if c1 > c0 else float("nan")
    return Result(
        case,
        client.name,
        throughput,
        pct(e2e, 0.5),
        pct(e2e, 0.99),
        pct(e2e_healthy, 0.99),
        len(e2e),
        send_mean,
        int(c1 - c0),
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cluster-dir", type=Path, required=True, help="A running `linkwatch cluster up` directory."
    )
    p.add_argument("--cases", default="healthy,slow_broker,slow_app")
    p.add_argument("--clients", default=",".join(c.name for c in CLIENTS))
    p.add_argument("--backlog", type=int, default=30_000, help="Records drained for throughput.")
    p.add_argument("--rate", type=float, default=1000, help="Records/s for the latency phase.")
    p.add_argument("--seconds", type=float, default=15)
    p.add_argument("--app-ms", type=float, default=3.0, help="Work per record in the slow_app case.")
    p.add_argument("--app-rate", type=float, default=150, help="Records/s in the slow_app case.")
    p.add_argument("--pause-ms", type=int, default=300, help="Broker 2 stopped this long every second.")
    p.add_argument("--warmup-s", type=float, default=15, help="Load before the first client (0: none).")
    p.add_argument("--json", type=Path, help="Also write the results here.")
    p.add_argument("--log", help="Log level for kafka/linkwatch loggers (e.g. WARNING).")
    p.add_argument(
        "--smoke", action="store_true", help="a size that runs in seconds (healthy case, 2,000 records, 1 s)"
    )
    args = p.parse_args()
    if args.smoke:
        args.cases, args.backlog, args.rate, args.seconds, args.warmup_s = "healthy", 2_000, 200.0, 1.0, 0.0
        import logging

        logging.basicConfig(level=args.log, format="%(asctime)s %(threadName)s %(name)s %(message)s")
    state = ClusterState.load(args.cluster_dir)
    if state is None:
        print(f"no cluster in {args.cluster_dir}", file=sys.stderr)
        return 2
    admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
    pid2 = state.node(2).pid

    @contextmanager
    def fault() -> Iterator[None]:
        with PauseDutyCycle(pid2, pause_ms=args.pause_ms, period_ms=1000):
            yield

    clients = [c for c in CLIENTS if c.name in args.clients.split(",")]
    warm_up(state, admin, args.warmup_s, args.rate)
    results = []
    print(
        f"{'case':12} {'client':27} {'rec/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'p99 b1,3':>8} {'n':>6}"
        f" {'send ms':>8} {'fetches':>8}"
    )
    for case in args.cases.split(","):
        for client in clients:
            r = run_one(state, admin, case, client, args, fault)
            results.append(r)
            print(
                f"{r.case:12} {r.client:27} {r.throughput:8.0f} {r.p50_ms:8.1f} {r.p99_ms:8.1f}"
                f" {r.p99_b13_ms:8.1f} {r.records:6d}"
                f" {r.send_mean_ms:8.3f} {r.fetches:8d}",
                flush=True,
            )
    admin.close()
    for case in args.cases.split(","):
        by = {r.client: r for r in results if r.case == case}
        k = by.get("KafkaConsumer")
        for name in ("AsyncFetchConsumer", "AsyncFetchConsumer+workers"):
            a = by.get(name)
            if a and k:
                print(
                    f"{case}: {name}/KafkaConsumer p99 = {a.p99_ms / k.p99_ms:.2f}, "
                    f"p99 on brokers 1,3 = {a.p99_b13_ms / k.p99_b13_ms:.2f}, "
                    f"throughput = {a.throughput / k.throughput:.2f}"
                )
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
