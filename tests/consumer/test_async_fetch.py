"""AsyncFetchConsumer on the real 3-broker cluster: delivery, order, bounded buffer."""

from __future__ import annotations

import time
import uuid

import pytest

from consumer import AsyncFetchConsumer, ConsumerConfig
from tests.consumer.conftest import create_topic, produce

pytestmark = pytest.mark.cluster


def _drain(consumer: AsyncFetchConsumer, expected: int, timeout_s: float = 60) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + timeout_s
    n = 0
    while n < expected and time.monotonic() < deadline:
        for d in consumer.poll(timeout_s=0.5):
            got.setdefault(d.partition, []).append(d.value)
            consumer.ack(d)
            n += 1
    return got


@pytest.mark.parametrize(
    "mode",
    ["subscribe", "assign"],
)
def test_every_record_of_every_partition_in_order(cluster3, admin, topic_name, mode):
    led = create_topic(admin, topic_name, partitions=6)
    assert len(set(led.values())) == 3  # partitions led by all brokers
    sent = produce(cluster3.bootstrap, topic_name, partitions=6, per_partition=500)
    cfg = ConsumerConfig(
        bootstrap_servers=cluster3.bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:6]}" if mode == "subscribe" else None,
        buffer_max_records=300,  # far below the 3000 records: pausing/resuming must happen
        buffer_max_bytes=64 * 1024,
    )
    kwargs = (
        {"topics": [topic_name]}
        if mode == "subscribe"
        else {"partitions": [(topic_name, p) for p in range(6)]}
    )
    with AsyncFetchConsumer(cfg, **kwargs) as consumer:
        got = _drain(consumer, 3000)
        assert consumer.peak_buffer_bytes <= 64 * 1024 + 6 * cfg.max_partition_fetch_bytes
    assert got == sent


def test_committed_offsets_are_the_processed_prefix(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=3)
    produce(cluster3.bootstrap, topic_name, partitions=3, per_partition=20)
    group = f"g-{uuid.uuid4().hex[:6]}"
    cfg = ConsumerConfig(bootstrap_servers=cluster3.bootstrap, group_id=group)
    with AsyncFetchConsumer(cfg, topics=[topic_name]) as consumer:
        seen = 0
        deadline = time.monotonic() + 60
        while seen < 60 and time.monotonic() < deadline:
            for d in consumer.poll(timeout_s=0.5):
                seen += 1
                # partition 0: leave offset 5 unacked -> commit stops at 5
                if not (d.partition == 0 and d.offset == 5):
                    consumer.ack(d)
        consumer.commit()
    committed = admin.list_group_offsets(group)[group]
    by_partition = {tp.partition: om.offset for tp, om in committed.items()}
    assert by_partition == {0: 5, 1: 20, 2: 20}
