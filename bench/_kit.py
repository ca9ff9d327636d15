"""Small helpers the benchmarks share (run as scripts: ``bench/`` is on ``sys.path``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec

from linkwatch import records as R


def wait_ready(admin: KafkaAdminClient, tps: list[TopicPartition], timeout_s: float, poll_s: float) -> None:
    """Until every partition in ``tps`` answers ListOffsets (new topics take a while)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if len(admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})) == len(tps):
                return
        except Exception:
            pass
        time.sleep(poll_s)
    raise SystemExit(f"{len(tps)} partitions did not become ready in {timeout_s:.0f}s")


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def retry(fn: Callable[[], Any], attempts: int, delay_s: float) -> Any:
    """``fn()``, retried on any error up to ``attempts`` times (the last error is raised)."""
    for i in range(attempts):
        try:
            return fn()
        except Exception:
            if i == attempts - 1:
                raise
            time.sleep(delay_s)
    return None


def read_samples(bootstrap: str, topic: str = R.SAMPLES_TOPIC, timeout_s: float = 120.0) -> list[R.Record]:
    """Every record on the samples topic (or ``topic``: the findings topic) up to the end
    offsets it has when the read starts: agents still shipping do not keep the read going.
    Undecodable records are counted and reported; raises TimeoutError if the end is not reached
    within ``timeout_s``."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        end = consumer.end_offsets(parts)
        out: list[R.Record] = []
        bad = 0
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: the end offsets {end} not reached in {timeout_s:.0f} s")
            for tp, msgs in consumer.poll(timeout_ms=1000).items():
                for msg in msgs:
                    if msg.offset >= end[tp]:
                        continue
                    try:
                        out.append(R.decode(msg.value))
                    except R.RecordError:
                        bad += 1
    finally:
        consumer.close()
    if bad:
        print(f"{topic}: {bad} records could not be decoded (left out of the replay)")
    return out


@contextlib.contextmanager
def bootstrap_or_own_cluster(
    bootstrap: str | None, prefix: str, brokers: int = 3, start_port: int = 37000
) -> Iterator[str]:
    """``bootstrap`` when given; otherwise a ``brokers``-node cluster of the bench's own on loopback
    (under a fresh ``prefix`` temp dir), its bootstrap yielded and the cluster stopped after."""
    if bootstrap is not None:
        yield bootstrap
        return
    from testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port

    root = Path(tempfile.mkdtemp(prefix=prefix)) / "kafka"
    cluster = LocalCluster(
        ClusterSpec(brokers=brokers, root=root, base_port=find_free_base_port(brokers, start=start_port))
    )
    try:
        yield cluster.up().bootstrap
    finally:
        cluster.down()
