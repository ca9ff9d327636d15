"""What the application receives (:class:`Delivery`), and the fetch-response decoder that makes them.

kafka-python turns each fetched record into a ``ConsumerRecord`` (a 13-field named tuple, two
deserializer calls and a header-size sum per record) inside ``Fetcher.PartitionRecords``; the
async consumer then copied each into a :class:`Delivery`. On a backlog drain that wrapping cost
more than decoding the record itself (``bench/results/consumer.md``). :class:`DeliveryRecords`
replaces ``PartitionRecords`` on the consumer's own fetcher and makes one :class:`Delivery` per
record straight from the decoded record, with the same semantics as the class it replaces:

* batch CRC checked when ``check_crcs`` (the default), ``CorruptRecordError`` otherwise;
* control batches (transaction markers) skipped; with ``read_committed``, batches of aborted
  transactions skipped, through the base class's own bookkeeping;
* ``next_fetch_offset``, ``records_read``, ``bytes_read`` and ``leader_epoch`` kept per record, so
  a partial ``take(n)`` and kafka-python's position updates and fetch metrics are unchanged;
* a fetch offset inside a batch (compressed batches are fetched whole): the records before it
  are skipped by the base class;
* old message formats (magic 0/1) go through the records' public properties and per-record CRC.

Format-v2 records (every broker since Kafka 0.11) are decoded from the batch's buffer directly,
following the record layout (``DefaultRecordBatch._read_msg``) with the common one-byte varints
decoded inline: 0.6× kafka-python's per-record cost (``bench/decode_compare.py``). Contract with
kafka-python (pinned in ``pyproject.toml``): a ``DefaultRecordBatch`` holds its (decompressed)
records in ``_buffer`` from ``_pos``, ``_num_records`` of them. ``tests/consumer/test_delivery.py``
decodes the same bytes with both classes — every format, compression, transactions, corrupt and
malformed batches — and compares every field and error, so an upgrade that changes this fails
there, not in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kafka import errors as Errors
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import decode_varint

from consumer import kafka_compat

TP = tuple[str, int]
RECORD_OVERHEAD_BYTES = 64  # per-record bookkeeping counted against buffer_max_bytes


class Delivery:
    """One record handed to the application. Ack or fail it exactly once per delivery.

    ``key``/``value`` are the deserialized forms (the raw bytes when no deserializer is set);
    ``raw_key``/``raw_value`` stay the bytes (what a dead letter carries). ``size`` is what the
    record counts against the consumer's buffer bound. ``epoch`` is the assignment generation the
    record was fetched under: an ack from an older one is stale."""

    __slots__ = (
        "attempts",
        "epoch",
        "headers",
        "key",
        "offset",
        "partition",
        "raw_key",
        "raw_value",
        "size",
        "timestamp_ms",
        "topic",
        "tp",
        "value",
    )

    def __init__(
        self,
        tp: TP,
        offset: int,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        epoch: int = 0,
    ) -> None:
        self.tp = tp
        self.topic, self.partition = tp
        self.offset = offset
        self.timestamp_ms = timestamp_ms
        self.raw_key = self.key = key
        self.raw_value = self.value = value
        self.headers = headers
        self.epoch = epoch
        self.attempts = 0
        self.size = (
            (len(key) if key is not None else 0)
            + (len(value) if value is not None else 0)
            + RECORD_OVERHEAD_BYTES
        )

    @classmethod
    def from_record(cls, rec: Any, epoch: int = 0) -> Delivery:
        """From a kafka-python ``ConsumerRecord`` (or anything with its fields)."""
        return cls(
            (rec.topic, rec.partition),
            rec.offset,
            rec.timestamp,
            rec.key,
            rec.value,
            rec.headers or [],
            epoch,
        )

    def header(self, name: str) -> bytes | None:
        for k, v in self.headers:
            if k == name:
                return v
        return None

    def __repr__(self) -> str:
        return f"Delivery({self.topic}-{self.partition}@{self.offset})"


# What the hot path reads from kafka-python's batch (checked at import, so a kafka-python that
# renamed them fails loudly here rather than decoding wrongly).
_BATCH_ATTRS = ("_maybe_uncompress", "base_offset", "first_timestamp", "max_timestamp", "timestamp_type")
if not all(hasattr(DefaultRecordBatch, a) for a in _BATCH_ATTRS):
    raise ImportError(
        f"kafka-python's DefaultRecordBatch lacks {_BATCH_ATTRS}: DeliveryRecords needs the pinned version"
    )


class DeliveryRecords(Fetcher.PartitionRecords):
    """``Fetcher.PartitionRecords`` that yields :class:`Delivery` objects (epoch 0; the consumer
    sets it when it accepts them). Installed with :func:`install`. kafka-python's deserializers
    are not applied (the async consumer deserializes in ``poll``); :func:`install` refuses a
    consumer that has them."""

    def _unpack_records(
        self, tp: Any, records: Any, key_deserializer: Any, value_deserializer: Any
    ) -> Iterator[Delivery]:
        key_tp = (tp.topic, tp.partition)
        check_crcs = self.check_crcs
        read_committed = self.isolation_level == IsolationLevel.READ_COMMITTED
        try:
            batch = records.next_batch()
            last_batch = None
            while batch is not None:
                last_batch = batch
                if check_crcs and not batch.validate_crc():
                    raise Errors.CorruptRecordError(
                        f"Record batch for partition {self.topic_partition} at offset {batch.base_offset} failed crc check"
                    )
                if batch.magic == 2:
                    self.leader_epoch = batch.leader_epoch
                    if read_committed and batch.has_producer_id():
                        self._consume_aborted_transactions_up_to(batch.last_offset)
                        if self._contains_abort_marker(batch):
                            self.aborted_producer_ids.discard(batch.producer_id)
                        elif self._is_batch_aborted(batch):
                            self.next_fetch_offset = batch.next_offset
                            batch = records.next_batch()
                            continue
                    if batch.is_control_batch:
                        self.next_fetch_offset = batch.next_offset
                        batch = records.next_batch()
                        continue
                    yield from self._v2_records(batch, key_tp)
                else:
                    for r in batch:
                        if check_crcs and not r.validate_crc():
                            raise Errors.CorruptRecordError(
                                f"Record for partition {self.topic_partition} at offset {r.offset} failed crc check"
                            )
                        self.records_read += 1
                        self.bytes_read += r.size_in_bytes
                        self.next_fetch_offset = r.offset + 1
                        yield Delivery(key_tp, r.offset, r.timestamp, r.key, r.value, r.headers or [])
                batch = records.next_batch()
            # Format v2 keeps a batch's last offset even when compaction removed its last records:
            # fetch from after the batch, or the same batch would be fetched again and again.
            if last_batch is not None and last_batch.magic == 2:
                self.next_fetch_offset = last_batch.next_offset
            self.drain()
        except StopIteration as e:  # a StopIteration inside a generator would end it silently
            raise RuntimeError("StopIteration raised unpacking record batches") from e

    def _v2_records(self, batch: DefaultRecordBatch, key_tp: TP) -> Iterator[Delivery]:
        """The records of one format-v2 batch, decoded from its buffer directly (the layout of
        ``DefaultRecordBatch._read_msg``, with the one-byte varints — attributes, small deltas
        and lengths, header counts — decoded inline instead of by a call each)."""
        batch._maybe_uncompress()
        buf, pos = batch._buffer, batch._pos
        base_offset = batch.base_offset
        log_append = batch.timestamp_type == DefaultRecordBatch.LOG_APPEND_TIME
        first_ts, max_ts = batch.first_timestamp, batch.max_timestamp
        for _ in range(batch._num_records):
            try:
                length, pos = decode_varint(buf, pos)
                start = pos
                if buf[pos] < 0x80:  # attributes (unused)
                    pos += 1
                else:
                    pos = decode_varint(buf, pos)[1]
                b = buf[pos]
                if b < 0x80:
                    ts_delta, pos = (b >> 1) ^ -(b & 1), pos + 1
                else:
                    ts_delta, pos = decode_varint(buf, pos)
                offset_delta, pos = decode_varint(buf, pos)
                b = buf[pos]
                if b < 0x80:
                    key_len, pos = (b >> 1) ^ -(b & 1), pos + 1
                else:
                    key_len, pos = decode_varint(buf, pos)
                if key_len >= 0:
                    key: bytes | None = bytes(buf[pos : pos + key_len])
                    pos += key_len
                else:
                    key = None
                value_len, pos = decode_varint(buf, pos)
                if value_len >= 0:
                    value: bytes | None = bytes(buf[pos : pos + value_len])
                    pos += value_len
                else:
                    value = None
                b = buf[pos]
                if b < 0x80:
                    count, pos = (b >> 1) ^ -(b & 1), pos + 1
                else:
                    count, pos = decode_varint(buf, pos)
                if count < 0:
                    raise Errors.CorruptRecordError(f"Found invalid number of record headers {count}")
                headers: list[tuple[str, bytes | None]] = []
                for _h in range(count):
                    h_key_len, pos = decode_varint(buf, pos)
                    if h_key_len < 0:
                        raise Errors.CorruptRecordError(f"Invalid negative header key size {h_key_len}")
                    h_key = buf[pos : pos + h_key_len].decode("utf-8")
                    pos += h_key_len
                    h_value_len, pos = decode_varint(buf, pos)
                    if h_value_len >= 0:
                        headers.append((h_key, bytes(buf[pos : pos + h_value_len])))
                        pos += h_value_len
                    else:
                        headers.append((h_key, None))
            except (ValueError, IndexError) as err:
                raise Errors.CorruptRecordError(f"Found invalid record structure: {err!r}") from err
            if pos - start != length:
                raise Errors.CorruptRecordError(
                    f"Invalid record size: expected to read {length} bytes in record payload, but instead read {pos - start}"
                )
            offset = base_offset + offset_delta
            self.records_read += 1
            self.bytes_read += length
            self.next_fetch_offset = offset + 1
            yield Delivery(key_tp, offset, max_ts if log_append else first_ts + ts_delta, key, value, headers)
        if pos != len(buf):
            raise Errors.CorruptRecordError(f"{len(buf) - pos} unconsumed bytes after all records consumed")


def install(consumer: Any) -> None:
    """Make ``consumer`` (a kafka-python ``KafkaConsumer``) return :class:`Delivery` objects from
    ``poll`` instead of ``ConsumerRecord``s. Only for a consumer this package owns."""
    if consumer.config.get("key_deserializer") or consumer.config.get("value_deserializer"):
        raise ValueError(
            "DeliveryRecords does not apply kafka-python deserializers: create the consumer without them"
        )
    kafka_compat.set_partition_records(consumer, DeliveryRecords)
