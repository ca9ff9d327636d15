"""Helpers for the remediation tests on the real 3-broker cluster: topics, data, findings, configs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

import yaml
from kafka import KafkaProducer, TopicPartitionReplica
from kafka.admin import NewTopic

from linkwatch.records import Finding
from remediation.config import RemediatorConfig, load_remediation_config
from tests.waiting import wait_until


def create_topic(admin, name: str, assignment: dict[int, list[int]]) -> None:
    admin.create_topics([NewTopic(name, -1, -1, replica_assignments=assignment)])

    def ready() -> bool:
        meta = admin.describe_topics([name])
        parts = meta[0].get("partitions") or [] if meta else []
        led = len(parts) == len(assignment) and all(
            p["leader_id"] == assignment[p["partition_index"]][0]
            and len(p["isr_nodes"]) == len(assignment[p["partition_index"]])
            for p in parts
        )
        # In sync is not yet on a log dir everywhere: a broker lists a new replica in
        # DescribeLogDirs a moment later, and a snapshot taken before would differ from any later.
        return led and len(replica_dirs(admin, name)) == sum(len(r) for r in assignment.values())

    wait_until(ready, 30, f"topic {name} led as assigned, every replica on a log dir")


def produce(
    bootstrap: str, topic: str, bytes_per_partition: dict[int, int], record_bytes: int = 4096
) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5, compression_type=None)
    payload = b"x" * record_bytes
    for p, n in bytes_per_partition.items():
        for _ in range(max(1, n // record_bytes)):
            producer.send(topic, payload, partition=p)
    producer.flush()
    producer.close()


def place(admin, topic: str, partitions: list[int], broker: int, log_dir: str) -> None:
    """Move replicas of ``topic`` on ``broker`` into ``log_dir`` and wait for it (test setup)."""
    admin.alter_replica_log_dirs({TopicPartitionReplica(topic, p, broker): log_dir for p in partitions})

    def there() -> bool:
        where = replica_dirs(admin, topic)
        return all(where.get((p, broker)) == (log_dir, False) for p in partitions)

    wait_until(there, 60, f"{topic} replicas in {log_dir}")


def replica_dirs(admin, topic: str) -> dict[tuple[int, int], tuple[str, bool]]:
    """(partition, broker) -> (log dir, is future); a future copy wins while it exists."""
    out: dict[tuple[int, int], tuple[str, bool]] = {}
    for entry in admin.describe_log_dirs():
        for d in entry["log_dirs"]:
            for t in d["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        key = (p["partition_index"], entry["broker"])
                        if p.get("is_future_key") or key not in out:
                            out[key] = (d["log_dir"], bool(p.get("is_future_key")))
    return out


def finding(
    rule: str, subject: str, *, active: bool = True, ts_ms: int | None = None, **evidence: Any
) -> Finding:
    return Finding(
        cluster="test",
        source="test",
        ts_ms=ts_ms if ts_ms is not None else int(time.time() * 1000),
        rule=rule,
        subject=subject,
        severity="critical",
        summary=f"{rule} on {subject}",
        evidence=evidence,
        action="",
        active=active,
    )


def config(tmp: Path, bootstrap: str, **overrides: Any) -> tuple[RemediatorConfig, Path]:
    """Write a config file (as an operator would) and load it through the real loader."""
    data: dict[str, Any] = {
        "cluster": "test",
        "bootstrap_servers": bootstrap,
        "execute": True,
        "state_dir": str(tmp / "state"),
        "lease": {"enabled": False},
        "cooldown_s": 60,
        "impact": {"settle_s": 0},  # the impact tests set their own
    }
    data.update(overrides)
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "remediation.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_remediation_config(path), path


def demoting(topic: str) -> dict[str, Any]:
    """``config`` arguments: ``slow_broker`` findings demote the broker's leadership of ``topic``."""
    return {
        "rules": {"slow_broker": "demote_leadership"},
        "remediations": {"demote_leadership": {"topics": [topic]}},
    }


def leaders(admin, topic: str) -> dict[int, int]:
    meta = admin.describe_topics([topic])
    return {p["partition_index"]: p["leader_id"] for p in (meta[0].get("partitions") or [])}


def replicas(admin, topic: str) -> dict[int, list[int]]:
    meta = admin.describe_topics([topic])
    return {p["partition_index"]: list(p["replica_nodes"]) for p in (meta[0].get("partitions") or [])}


def throttles(admin, topic: str) -> dict[str, Any]:
    """Every throttle config set on the brokers and on ``topic`` (empty: none left)."""
    from remediation.view import read_view

    v = read_view(admin, [topic], with_log_dirs=False)
    return {
        **{f"broker:{b}": c for b, c in v.broker_configs.items() if c},
        **{f"topic:{t}": c for t, c in v.topic_configs.items() if c},
    }


class FilledDir(NamedTuple):
    """Broker 1's first log dir once filled by the ``fill_broker1_dir`` fixture."""

    path: str
    used_bytes: int  # what it holds once filled

    def rebalance_disks(self, **settings: Any) -> dict[str, Any]:
        """``config`` arguments: hot_disk -> rebalance_disks with this dir at 90 % of its
        capacity (over the 80 % high mark), moves to other brokers only; ``settings`` the rest."""
        base = {"capacity_bytes": self.capacity_bytes, "high_ratio": 0.8, "allow_intra_broker": False}
        return {
            "rules": {"hot_disk": "rebalance_disks"},
            "remediations": {"rebalance_disks": base | settings},
        }

    @property
    def capacity_bytes(self) -> int:
        return int(self.used_bytes / 0.9)
