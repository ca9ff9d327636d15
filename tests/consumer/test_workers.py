"""PartitionWorkers on the real 3-broker cluster: concurrency across partitions, order within
one, failures retried, and only handled records committed."""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict

import pytest

from consumer import AsyncFetchConsumer, ConsumerConfig, Delivery
from consumer.workers import PartitionWorkers
from linkwatch.errors import ConfigError
from tests.consumer.conftest import create_topic, produce

pytestmark = pytest.mark.cluster


class Recorder:
    """A handler that waits ``work_s`` per record (like a database call) and records what it saw."""

    def __init__(self, work_s: float, fail_once: set[tuple[int, int]] = frozenset()) -> None:
        self.work_s = work_s
        self.fail_once = set(fail_once)
        self.lock = threading.Lock()
        self.seen: dict[int, list[bytes]] = defaultdict(list)
        self.active = 0
        self.max_active = 0

    def __call__(self, d: Delivery) -> None:
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            time.sleep(self.work_s)
            with self.lock:
                if (d.partition, d.offset) in self.fail_once:
                    self.fail_once.discard((d.partition, d.offset))
                    raise RuntimeError(f"transient failure at {d.partition}@{d.offset}")
                self.seen[d.partition].append(d.value)
        finally:
            with self.lock:
                self.active -= 1

    def count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.seen.values())


def _run_until(workers: PartitionWorkers, done, timeout_s: float = 60) -> None:
    stop = threading.Event()
    thread = threading.Thread(target=workers.run, args=(stop,))
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    thread.join(30)
    assert not thread.is_alive()


def test_partitions_run_concurrently_in_order_and_failures_are_retried(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=6)
    sent = produce(cluster3.bootstrap, topic_name, partitions=6, per_partition=40)
    group = f"g-{uuid.uuid4().hex[:6]}"
    cfg = ConsumerConfig(bootstrap_servers=cluster3.bootstrap, group_id=group, max_retries=2)
    handler = Recorder(work_s=0.005, fail_once={(0, 3), (4, 17)})
    with AsyncFetchConsumer(cfg, partitions=[(topic_name, p) for p in range(6)]) as consumer:
        workers = PartitionWorkers(consumer, handler, workers=4, queue_records=8)
        _run_until(workers, lambda: handler.count() >= 240)
        consumer.commit()
        stats = dict(consumer.stats)
    # A retried record is redelivered after the records of its partition already queued, so
    # order holds for every partition that saw no failure; the others hold every record once.
    for p, values in sent.items():
        if p in (0, 4):
            assert sorted(handler.seen[p]) == sorted(values)
        else:
            assert handler.seen[p] == values, f"partition {p} out of order"
    assert handler.max_active > 1, "the workers never ran two records at once"
    assert workers.failed == 2 and stats.get("retried") == 2
    committed = admin.list_group_offsets(group)[group]
    assert {tp.partition: om.offset for tp, om in committed.items()} == dict.fromkeys(range(6), 40)


def test_stopping_without_drain_commits_only_handled_records(cluster3, admin, topic_name):
    create_topic(admin, topic_name, partitions=3)
    produce(cluster3.bootstrap, topic_name, partitions=3, per_partition=200)
    group = f"g-{uuid.uuid4().hex[:6]}"
    cfg = ConsumerConfig(bootstrap_servers=cluster3.bootstrap, group_id=group)
    handler = Recorder(work_s=0.01)
    with AsyncFetchConsumer(cfg, partitions=[(topic_name, p) for p in range(3)]) as consumer:
        workers = PartitionWorkers(consumer, handler, workers=3, queue_records=50)
        stop = threading.Event()
        thread = threading.Thread(target=workers.run, args=(stop,), kwargs={"drain": False})
        thread.start()
        deadline = time.monotonic() + 60
        while handler.count() < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        thread.join(30)
        consumer.commit()
    handled = {p: len(v) for p, v in handler.seen.items()}
    assert 0 < sum(handled.values()) < 600
    committed = admin.list_group_offsets(group)[group]
    # In-order handling per partition: the committed offset is exactly what was handled.
    assert {tp.partition: om.offset for tp, om in committed.items() if om.offset > 0} == {
        p: n for p, n in handled.items() if n > 0
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"workers": 0}, "workers: must be >= 1"), ({"queue_records": 0}, "queue_records: must be >= 1")],
)
def test_bad_settings_name_the_key(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        PartitionWorkers(object(), lambda d: None, **kwargs)  # type: ignore[arg-type]
