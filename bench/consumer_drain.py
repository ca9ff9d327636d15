"""Drain throughput of AsyncFetchConsumer vs kafka-python's KafkaConsumer, in alternating rounds.

``consumer_compare.py`` times a 60 000-record drain (about half a second), which one scheduling
hiccup on a shared machine moves by 2×. This bench produces one large backlog once (``--records``
over a 6-partition topic, two partitions per broker, 200-byte values) and lets each client drain
all of it from offset 0, alternating clients for ``--rounds`` rounds: each round gives both
clients nearly the same machine. Per client: median records/s (first record to last) and CPU
seconds of the process while draining (both threads for the async consumer); per round: the
throughput ratio async / KafkaConsumer, and its median.

The application does nothing but count (and, for the async consumer, ack each batch): this is
the client's own cost. Usage::

    linkwatch cluster up --dir /tmp/lw-cbench --base-port 31000
    python bench/consumer_drain.py --cluster-dir /tmp/lw-cbench [--records 300000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from consumer_compare import PARTITIONS, create_topic, produce  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from consumer import AsyncFetchConsumer, ConsumerConfig
from testbed.cluster import ClusterState


def _drain(name: str, poll: Callable[[], int], n: int) -> tuple[float, float]:
    """Call ``poll`` (returns how many records it got) until ``n`` records came: (records/s from
    the first record to the last, CPU seconds of the process meanwhile)."""
    got, cpu0, first = 0, time.process_time(), None
    deadline = time.monotonic() + 300
    while got < n and time.monotonic() < deadline:
        k = poll()
        if k and first is None:
            first = time.monotonic()
        got += k
    last, cpu = time.monotonic(), time.process_time() - cpu0
    if got < n or first is None:
        raise RuntimeError(f"{name} drained {got} of {n}")
    return got / (last - first), cpu


def drain_async(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    cfg = ConsumerConfig(bootstrap_servers=bootstrap, group_id=f"drain-{uuid.uuid4().hex[:6]}")
    c = AsyncFetchConsumer(cfg, partitions=[(topic, p) for p in range(PARTITIONS)]).start()

    def poll() -> int:
        batch = c.poll(timeout_s=0.1, max_records=500)
        c.ack_many(batch)
        return len(batch)

    try:
        return _drain("async consumer", poll, n)
    finally:
        c.close()


def drain_kafka_python(bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    c = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=f"drain-{uuid.uuid4().hex[:6]}", auto_offset_reset="earliest"
    )
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    try:
        return _drain(
            "KafkaConsumer", lambda: sum(len(r) for r in c.poll(timeout_ms=100, max_records=500).values()), n
        )
    finally:
        c.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--cluster-dir", type=Path, required=True, help="A running `linkwatch cluster up` directory."
    )
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--smoke", action="store_true", help="a size that runs in seconds (3,000 records, 1 round)"
    )
    args = p.parse_args()
    if args.smoke:
        args.records, args.rounds = 3_000, 1
    state = ClusterState.load(args.cluster_dir)
    if state is None:
        print(f"no cluster in {args.cluster_dir}", file=sys.stderr)
        return 2
    admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
    topic = f"bench-drain-{uuid.uuid4().hex[:6]}"
    create_topic(admin, topic)
    produce(state.bootstrap, topic, args.records, rate=None)
    clients = {"AsyncFetchConsumer": drain_async, "KafkaConsumer": drain_kafka_python}
    rates: dict[str, list[float]] = {name: [] for name in clients}
    cpus: dict[str, list[float]] = {name: [] for name in clients}
    try:
        for i in range(args.rounds):
            order = list(clients) if i % 2 == 0 else list(reversed(clients))
            for name in order:
                rate, cpu = clients[name](state.bootstrap, topic, args.records)
                rates[name].append(rate)
                cpus[name].append(cpu)
            print(
                f"round {i + 1}: "
                + ", ".join(f"{n} {rates[n][-1]:.0f} rec/s {cpus[n][-1]:.2f} CPU-s" for n in clients),
                flush=True,
            )
    finally:
        admin.delete_topics([topic])
        admin.close()
    ratios = [a / k for a, k in zip(rates["AsyncFetchConsumer"], rates["KafkaConsumer"], strict=True)]
    print(f"{args.records} records, {args.rounds} rounds (medians)")
    for name in clients:
        per_cpu = args.records / statistics.median(cpus[name])
        print(
            f"{name:20} {statistics.median(rates[name]):9.0f} rec/s "
            f"{statistics.median(cpus[name]):6.2f} CPU-s ({per_cpu:.0f} rec per CPU-s)"
        )
    print(
        f"throughput ratio per round: {', '.join(f'{r:.2f}' for r in ratios)} -> median {statistics.median(ratios):.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
