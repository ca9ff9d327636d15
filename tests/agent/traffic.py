"""Real client traffic for agent tests: acks=all produce + a consumer group on every broker."""

from __future__ import annotations

import threading
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic


def create_topic(
    admin, topic: str, partitions: int = 3, rf: int = 3, leaders: list[int] | None = None
) -> list[int]:
    """Create ``topic`` and wait for its leaders; returns them, one per partition. ``leaders``:
    broker ids, one per partition, that must lead them (replicas assigned with that broker
    first, preferred leaders elected if leadership went elsewhere), so traffic reaches every one
    of those brokers. Use the leaders returned: a later ``describe_topics`` may ask a broker
    that has not seen the topic yet."""
    if leaders is None:
        admin.create_topics([NewTopic(topic, partitions, rf)])
    else:
        ring = sorted(set(leaders))
        assignment = {
            p: [b, *[x for x in ring[ring.index(b) :] + ring[: ring.index(b)] if x != b][: rf - 1]]
            for p, b in enumerate(leaders)
        }
        admin.create_topics([NewTopic(topic, replica_assignments=assignment)])
    deadline = time.monotonic() + 30
    elected = False
    while time.monotonic() < deadline:
        meta = admin.describe_topics([topic])
        parts = (meta[0].get("partitions") or []) if meta else []
        if len(parts) == len(leaders or range(partitions)) and all(
            p.get("leader_id", -1) >= 0 for p in parts
        ):
            if leaders is None or all(p["leader_id"] == leaders[p["partition_index"]] for p in parts):
                return [p["leader_id"] for p in sorted(parts, key=lambda p: p["partition_index"])]
            if not elected:
                admin.elect_leaders(0, {topic: list(range(len(leaders)))}, raise_errors=False)
                elected = True
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has not the expected leaders after 30s: {leaders}")


def run_traffic(
    bootstrap: str,
    topic: str,
    seconds: float,
    rate: int = 200,
    consume: bool = True,
    until: threading.Event | None = None,
    group: bool = True,
    fetch_max_wait_ms: int = 100,
    fetch_min_bytes: int = 1,
) -> int:
    """Produce ~``rate`` messages/s with acks=all for ``seconds`` (or until ``until`` is set)
    while a consumer reads them: in a consumer group, or (``group=False``) assigned every
    partition at once, so it fetches from every leader without waiting for a group join."""
    stop = threading.Event()
    until = until or threading.Event()
    consumed = [0]

    def consumer_loop() -> None:
        c = KafkaConsumer(
            *([topic] if group else []),
            bootstrap_servers=bootstrap,
            group_id=f"g-{topic}" if group else None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_min_bytes=fetch_min_bytes,
        )
        if not group:
            deadline = time.monotonic() + 30
            while not (parts := c.partitions_for_topic(topic)) and time.monotonic() < deadline:
                time.sleep(0.2)
            c.assign([TopicPartition(topic, p) for p in sorted(parts or [])])
        try:
            while not stop.is_set():
                for records in c.poll(timeout_ms=200).values():
                    consumed[0] += len(records)
        finally:
            c.close()

    thread = threading.Thread(target=consumer_loop, daemon=True)
    if consume:
        thread.start()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2)
    sent = 0
    start = time.monotonic()
    while time.monotonic() - start < seconds and not until.is_set():
        for i in range(max(1, rate // 20)):
            producer.send(topic, key=str(sent + i).encode(), value=b"v" * 300)
        sent += max(1, rate // 20)
        time.sleep(0.05)
    producer.flush()
    producer.close()
    time.sleep(1.0)
    stop.set()
    if consume:
        thread.join(timeout=10)
    return sent
