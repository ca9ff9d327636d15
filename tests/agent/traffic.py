"""Real client traffic for agent tests: acks=all produce + a consumer group on every broker."""

from __future__ import annotations

import threading
import time

from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic


def create_topic(admin, topic: str, partitions: int = 3, rf: int = 3) -> None:
    admin.create_topics([NewTopic(topic, partitions, rf)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        meta = admin.describe_topics([topic])
        parts = (meta[0].get("partitions") or []) if meta else []
        if len(parts) == partitions and all(p.get("leader_id", -1) >= 0 for p in parts):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has no leaders after 30s")


def run_traffic(bootstrap: str, topic: str, seconds: float, rate: int = 200, consume: bool = True) -> int:
    """Produce ~``rate`` messages/s with acks=all for ``seconds`` while a consumer reads them."""
    stop = threading.Event()
    consumed = [0]

    def consumer_loop() -> None:
        c = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"g-{topic}",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
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
    while time.monotonic() - start < seconds:
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
