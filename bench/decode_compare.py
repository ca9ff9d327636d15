"""Per-record cost of turning fetched bytes into what the application gets.

The same fetch-response bytes (``--batches`` record batches of ``--per-batch`` records, 200-byte
values and 8-byte keys, as ``bench/consumer_compare.py`` produces) are decoded, in alternating
rounds, by:

* ``kafka-python``            — ``Fetcher.PartitionRecords`` → ``ConsumerRecord`` (what ``KafkaConsumer.poll`` does);
* ``kafka-python + Delivery`` — the same, then one :class:`Delivery` per record (the async consumer before);
* ``DeliveryRecords``         — :class:`~consumer.delivery.DeliveryRecords` (the async consumer now).

Prints the median µs per record of each and the ratios to ``kafka-python`` measured in the same
rounds. Usage::

    python bench/decode_compare.py [--rounds 41] [--batches 60] [--per-batch 500] [--gzip]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from kafka.consumer.fetcher import Fetcher
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.structs import TopicPartition

from consumer.delivery import Delivery, DeliveryRecords

TP = TopicPartition("bench", 0)


def fetch_bytes(batches: int, per_batch: int, compression: int) -> bytes:
    out, offset, now_ms = [], 0, int(time.time() * 1000)
    for _ in range(batches):
        b = MemoryRecordsBuilder(magic=2, compression_type=compression, batch_size=1 << 30, offset=offset)
        for i in range(per_batch):
            b.append(now_ms + i, b"key-%04d" % (i % 1000), os.urandom(100).hex().encode())
            offset += 1
        b.close()
        out.append(bytes(b.buffer()))
    return b"".join(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=41)
    p.add_argument("--batches", type=int, default=60)
    p.add_argument("--per-batch", type=int, default=500)
    p.add_argument("--gzip", action="store_true", help="gzip-compressed batches")
    p.add_argument("--smoke", action="store_true", help="a size that runs in seconds (3 rounds of 4 x 100)")
    args = p.parse_args()
    if args.smoke:
        args.rounds, args.batches, args.per_batch = 3, 4, 100
    data = fetch_bytes(args.batches, args.per_batch, 1 if args.gzip else 0)
    n = args.batches * args.per_batch

    paths: dict[str, Callable[[], list]] = {
        "kafka-python": lambda: Fetcher.PartitionRecords(0, TP, MemoryRecords(data)).take(),
        "kafka-python + Delivery": lambda: [
            Delivery.from_record(r) for r in Fetcher.PartitionRecords(0, TP, MemoryRecords(data)).take()
        ],
        "DeliveryRecords": lambda: DeliveryRecords(0, TP, MemoryRecords(data)).take(),
    }
    for f in paths.values():  # warm up, and every path decodes every record
        assert len(f()) == n
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, f in paths.items():
            t0 = time.perf_counter()
            f()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    base = times["kafka-python"]
    print(
        f"{n} records ({args.batches} batches, {'gzip' if args.gzip else 'uncompressed'}), {args.rounds} rounds"
    )
    print(f"{'path':26} {'µs/record':>10} {'ratio':>7}")
    for name, ts in times.items():
        ratio = statistics.median(t / b for t, b in zip(ts, base, strict=True))
        print(f"{name:26} {statistics.median(ts):10.2f} {ratio:7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
