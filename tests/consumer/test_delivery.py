"""DeliveryRecords decodes fetched bytes exactly as kafka-python's PartitionRecords does.

The same record bytes — built with kafka-python's own record builders, in every format a broker
can return — go through kafka-python's ``Fetcher.PartitionRecords`` (each ``ConsumerRecord``
then turned into a :class:`Delivery`) and through :class:`DeliveryRecords`; every field of every
record, the position bookkeeping after each ``take`` and the errors must be the same. Then, on
the real cluster, the consumer reads transactional, compressed, headered data exactly as
``KafkaConsumer`` does.
"""

from __future__ import annotations

import struct
import time
import uuid
from collections import namedtuple
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import calc_crc32c

from consumer import AsyncFetchConsumer, ConsumerConfig
from consumer.delivery import Delivery, DeliveryRecords
from tests.consumer.conftest import create_topic

TP = TopicPartition("orders", 3)
NOW_MS = 1_795_000_000_000
Aborted = namedtuple("Aborted", "producer_id first_offset")  # shaped like the FetchResponse field

# (key, value, headers) of the records every batch is built from: null key, null value (a
# tombstone), empty value, headers with a null value, a large value.
RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"k0", b"v0", []),
    (None, b"no key", []),
    (b"tombstone", None, []),
    (b"k3", b"", [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]),
    (b"k4", b"x" * 5000, [("a", None), ("b", b"2")]),
]


def _batch(magic: int, offset: int, compression: int = 0, **kw: Any) -> bytes:
    builder = MemoryRecordsBuilder(
        magic=magic, compression_type=compression, batch_size=1 << 20, offset=offset, **kw
    )
    for i, (key, value, headers) in enumerate(RECORDS):
        builder.append(NOW_MS + i, key, value, headers if magic == 2 else None)
    builder.close()
    return bytes(builder.buffer())


def _recrc(buf: bytearray) -> bytes:
    at = DefaultRecordBatch.ATTRIBUTES_OFFSET
    struct.pack_into(">I", buf, DefaultRecordBatch.CRC_OFFSET, calc_crc32c(memoryview(buf)[at:]))
    return bytes(buf)


def _control_batch(offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker: one record whose key is (version 0, type 1 commit / 0 abort) in a
    batch with the control bit set — what the broker writes when a transaction ends."""
    builder = MemoryRecordsBuilder(
        magic=2,
        compression_type=0,
        batch_size=1024,
        offset=offset,
        transactional=True,
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
    )
    builder.append(NOW_MS, struct.pack(">hh", 0, 1 if commit else 0), b"\x00\x00\x00\x00\x00\x00", None)
    builder.close()
    buf = bytearray(builder.buffer())
    attrs_at = DefaultRecordBatch.ATTRIBUTES_OFFSET
    attrs = struct.unpack_from(">h", buf, attrs_at)[0] | DefaultRecordBatch.CONTROL_MASK
    struct.pack_into(">h", buf, attrs_at, attrs)
    return _recrc(buf)


def _corrupt(data: bytes) -> bytes:
    buf = bytearray(data)
    buf[-3] ^= 0xFF  # inside the last record's value: the batch CRC no longer matches
    return bytes(buf)


N = len(RECORDS)
TXN = {"transactional": True, "producer_id": 7, "producer_epoch": 0, "base_sequence": 0}
# id -> (bytes, fetch offset, isolation level, aborted transactions, takes)
SCENARIOS: dict[str, tuple[bytes, int, Any, list[Aborted], list[int | None]]] = {
    "v2 plain, three batches": (_batch(2, 0) + _batch(2, N) + _batch(2, 2 * N), 0, None, [], [None]),
    "v2 partial takes": (_batch(2, 0) + _batch(2, N), 0, None, [], [2, 4, 1, None]),
    "v2 gzip": (_batch(2, 100, 1) + _batch(2, 100 + N, 1), 100, None, [], [None]),
    "v2 gzip, fetch offset inside the batch": (_batch(2, 100, 1), 103, None, [], [None]),
    "v2 gzip then plain": (_batch(2, 0, 1) + _batch(2, N), 0, None, [], [3, None]),
    "v2 transactional, read_uncommitted": (
        _batch(2, 0, **TXN) + _control_batch(N, 7, True),
        0,
        None,
        [],
        [None],
    ),
    "v2 committed transaction then more": (
        _batch(2, 0, **TXN) + _control_batch(N, 7, True) + _batch(2, N + 1),
        0,
        IsolationLevel.READ_COMMITTED,
        [],
        [None],
    ),
    "v2 aborted transaction, read_committed": (
        _batch(2, 0, **TXN) + _control_batch(N, 7, False) + _batch(2, N + 1),
        0,
        IsolationLevel.READ_COMMITTED,
        [Aborted(7, 0)],
        [None],
    ),
    "v2 aborted transaction, read_uncommitted": (
        _batch(2, 0, **TXN) + _control_batch(N, 7, False) + _batch(2, N + 1),
        0,
        None,
        [Aborted(7, 0)],
        [None],
    ),
    "v1 plain": (_batch(1, 0) + _batch(1, N), 0, None, [], [None]),
    "v1 gzip, fetch offset inside": (_batch(1, 10, 1), 12, None, [], [None]),
    "v0 plain": (_batch(0, 0), 0, None, [], [2, None]),
    "empty fetch": (b"", 0, None, [], [None]),
}


def _records(cls: type, data: bytes, fetch_offset: int, isolation: Any, aborted: list[Aborted]) -> Any:
    kw: dict[str, Any] = {"aborted_transactions": aborted}
    if isolation is not None:
        kw["isolation_level"] = isolation
    return cls(fetch_offset, TP, MemoryRecords(data), check_crcs=True, **kw)


def _fields(d: Delivery) -> tuple:
    return (
        d.tp,
        d.offset,
        d.timestamp_ms,
        d.key,
        d.value,
        d.raw_key,
        d.raw_value,
        d.headers,
        d.size,
        d.epoch,
    )


def _state(pr: Any) -> tuple:
    return (pr.next_fetch_offset, pr.records_read, pr.bytes_read, pr.leader_epoch, bool(pr))


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_same_records_and_positions_as_kafka_python(scenario: str) -> None:
    data, fetch_offset, isolation, aborted, takes = SCENARIOS[scenario]
    stock = _records(Fetcher.PartitionRecords, data, fetch_offset, isolation, aborted)
    fast = _records(DeliveryRecords, data, fetch_offset, isolation, aborted)
    offsets: list[int] = []
    for n in takes:
        want = [Delivery.from_record(r) for r in stock.take(n)]
        got = fast.take(n)
        assert all(type(d) is Delivery for d in got)
        assert [_fields(d) for d in got] == [_fields(d) for d in want]
        assert _state(fast) == _state(stock), f"after take({n})"
        offsets += [d.offset for d in got]
    assert not fast, "every record taken: the records are drained"
    assert bool(offsets) == bool(data), (
        "a scenario with records delivers some (the comparison is not vacuous)"
    )
    assert offsets == sorted(offsets) and all(o >= fetch_offset for o in offsets)


def test_a_transaction_marker_is_never_delivered_and_the_position_moves_past_it() -> None:
    data = _batch(2, 0, **TXN) + _control_batch(N, 7, True)
    fast = _records(DeliveryRecords, data, 0, None, [])
    assert [d.offset for d in fast.take()] == list(range(N))
    assert fast.next_fetch_offset == N + 1


def _until_error(pr: Any) -> tuple[list[list[int]], str]:
    """Offsets of each take() until the records are drained or one raises; the error text."""
    takes: list[list[int]] = []
    try:
        while pr:
            takes.append([d.offset for d in pr.take()])
    except CorruptRecordError as e:
        return takes, str(e)
    return takes, ""


@pytest.mark.parametrize("magic", [0, 1, 2])
@pytest.mark.parametrize("good_before", [0, 2])
def test_corrupt_data_raises_like_kafka_python(magic: int, good_before: int) -> None:
    """The records decoded before the bad one are returned, then the same CorruptRecordError
    (old formats check each record's CRC, format v2 the whole batch's)."""
    data = b"".join(_batch(magic, i * N) for i in range(good_before)) + _corrupt(
        _batch(magic, good_before * N)
    )
    stock = _until_error(_records(Fetcher.PartitionRecords, data, 0, None, []))
    fast = _until_error(_records(DeliveryRecords, data, 0, None, []))
    assert fast == stock
    assert "crc" in fast[1]


def _record_length_off_by_two() -> bytes:
    buf = bytearray(_batch(2, 0))
    assert buf[61] < 0x7E  # first record's length varint: one byte (zigzag), +2 = length + 1
    buf[61] += 2
    return _recrc(buf)


def _trailing_bytes() -> bytes:
    buf = bytearray(_batch(2, 0)) + b"\x00\x00\x00"
    struct.pack_into(">i", buf, 8, struct.unpack_from(">i", buf, 8)[0] + 3)  # batchLength
    return _recrc(buf)


def _one_record_too_many() -> bytes:
    buf = bytearray(_batch(2, 0))
    struct.pack_into(">i", buf, 57, N + 1)  # records count
    return _recrc(buf)


@pytest.mark.parametrize(
    "make", [_record_length_off_by_two, _trailing_bytes, _one_record_too_many], ids=lambda f: f.__name__
)
def test_malformed_batch_with_a_valid_crc_raises_like_kafka_python(make: Any) -> None:
    """Structure errors a CRC cannot catch (a buggy producer): the same records come out before
    the error, then a CorruptRecordError with kafka-python's message."""
    data = make()
    stock = _until_error(_records(Fetcher.PartitionRecords, data, 0, None, []))
    fast = _until_error(_records(DeliveryRecords, data, 0, None, []))
    assert fast == stock
    assert fast[1], "the malformed batch raised"


@pytest.mark.cluster
def test_consumer_reads_real_transactional_compressed_data_like_kafka_consumer(
    cluster3, admin, topic_name
) -> None:
    """Committed and aborted transactions (markers in the log), gzip, headers, null keys: the
    async consumer delivers the same records (read_uncommitted, like KafkaConsumer's default)
    and moves past the markers."""
    create_topic(admin, topic_name, partitions=2)
    txn = KafkaProducer(
        bootstrap_servers=cluster3.bootstrap,
        transactional_id=f"t-{uuid.uuid4().hex[:6]}",
        compression_type="gzip",
    )
    txn.init_transactions()
    for commit in (True, False, True):
        txn.begin_transaction()
        for i in range(50):
            txn.send(
                topic_name,
                value=b"txn-%d" % i,
                key=None if i % 5 else b"k%d" % i,
                partition=i % 2,
                headers=[("i", str(i).encode())],
            )
        txn.flush()  # on the broker before the marker (an abort drops what is still unsent)
        (txn.commit_transaction if commit else txn.abort_transaction)()
    txn.close()
    plain = KafkaProducer(bootstrap_servers=cluster3.bootstrap)
    for i in range(20):
        plain.send(topic_name, value=b"after-%d" % i, partition=i % 2)
    plain.flush()
    plain.close()

    def fields(topic: str, partition: int, offset: int, ts: int, key: Any, value: Any, headers: Any) -> tuple:
        return (topic, partition, offset, ts, key, value, list(headers or []))

    ref = KafkaConsumer(
        bootstrap_servers=cluster3.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    ref.assign([TopicPartition(topic_name, p) for p in range(2)])
    want: list[tuple] = []
    deadline = time.monotonic() + 30
    while len(want) < 170 and time.monotonic() < deadline:
        for recs in ref.poll(500).values():
            want += [
                fields(r.topic, r.partition, r.offset, r.timestamp, r.key, r.value, r.headers) for r in recs
            ]
    ref.close()
    assert len(want) == 170, "3 transactions of 50 (one aborted, read_uncommitted) + 20 plain"

    cfg = ConsumerConfig(bootstrap_servers=cluster3.bootstrap, client_id="delivery-test")
    got: list[tuple] = []
    with AsyncFetchConsumer(cfg, partitions=[(topic_name, p) for p in range(2)]).start() as c:
        deadline = time.monotonic() + 30
        while len(got) < 170 and time.monotonic() < deadline:
            batch = c.poll(0.5)
            got += [
                fields(d.topic, d.partition, d.offset, d.timestamp_ms, d.key, d.value, d.headers)
                for d in batch
            ]
            c.ack_many(batch)
        time.sleep(1.0)
        got += [
            fields(d.topic, d.partition, d.offset, d.timestamp_ms, d.key, d.value, d.headers)
            for d in c.poll(0.5)
        ]
    assert sorted(got) == sorted(want)
    by_partition = {p: [g[2] for g in got if g[1] == p] for p in range(2)}
    assert all(offsets == sorted(offsets) for offsets in by_partition.values()), "in order per partition"
