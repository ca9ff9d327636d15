"""linkwatch's own topics: what they are for, the settings they should have, and a plan to make a
cluster match (``linkwatch topics``).

The samples topic carries every agent's, probe's and lag collector's records to the analyzer;
the findings topic carries findings to the remediator and anything else that acts on them. A
cluster that does not create topics on first use (``auto.create.topics.enable=false``, the
usual production setting) needs them created before the agents publish. The topics the
processes create themselves (the remediation lease and state, the probe's topic when it manages
it) are not listed here: they are created with their own settings at start.

Settings, and why:

* ``linkwatch.samples``: 6 partitions (the analyzer's stream reads them in parallel; records
  are keyed by source, so a source's records stay in order), ``retention.ms`` 3 days (a restarted
  analyzer backfills from it, bounded by its ``max_event_age``), ``cleanup.policy=delete``.
* ``linkwatch.findings``: 1 partition (findings are judged in the order they were raised; a
  few a minute), ``retention.ms`` 7 days (a remediator down over a weekend resumes from its
  committed position, docs/remediation.md), ``cleanup.policy=delete``.
* Both: replication factor 3 (or the number of brokers when fewer), ``min.insync.replicas`` 2
  when replicated three times, so an acknowledged record survives a broker's loss.

Contract: :func:`plan` only reads the cluster; :func:`apply` creates the missing topics and
changes nothing else (a topic that exists with other settings is reported, never altered: its
owner decides).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from linkwatch.config import rename_keys
from linkwatch.kafka_client import KafkaClientConfig
from linkwatch.records import FINDINGS_TOPIC, SAMPLES_TOPIC

DAY_MS = 86_400_000


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    purpose: str = ""


def own_topics(samples: str = SAMPLES_TOPIC, findings: str = FINDINGS_TOPIC) -> list[TopicSpec]:
    return [
        TopicSpec(
            samples,
            6,
            {"retention.ms": str(3 * DAY_MS), "cleanup.policy": "delete"},
            "agents', probes' and lag collectors' records to the analyzer",
        ),
        TopicSpec(
            findings,
            1,
            {"retention.ms": str(7 * DAY_MS), "cleanup.policy": "delete"},
            "findings to the remediator and notifiers",
        ),
    ]


@dataclass(frozen=True)
class TopicState:
    spec: TopicSpec
    exists: bool
    differs: dict[str, tuple[str | None, str]]  # key -> (on the cluster, recommended)

    def line(self) -> str:
        if not self.exists:
            return f"✗ {self.spec.name}: missing ({self.spec.purpose})"
        if self.differs:
            diff = ", ".join(
                f"{k} {have} (recommended {want})" for k, (have, want) in sorted(self.differs.items())
            )
            return f"~ {self.spec.name}: exists; differs: {diff}"
        return f"✓ {self.spec.name}: exists with the recommended settings"


def replication(brokers: int) -> int:
    return max(1, min(3, brokers))


def plan(admin: Any, specs: list[TopicSpec]) -> list[TopicState]:
    """Each spec against the cluster (read only)."""
    from kafka.admin import ConfigResource, ConfigResourceType

    listed = set(admin.list_topics())
    states = []
    for spec in specs:
        if spec.name not in listed:
            states.append(TopicState(spec, False, {}))
            continue
        differs: dict[str, tuple[str | None, str]] = {}
        [meta] = admin.describe_topics([spec.name])
        have_partitions = len(meta.get("partitions") or [])
        if have_partitions != spec.partitions:
            differs["partitions"] = (str(have_partitions), str(spec.partitions))
        keys = list(spec.configs)
        result = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, spec.name, keys)], config_filter="all"
        )
        by_name = next(iter(result.values()), {}) if result else {}
        have = {
            k: (e.get("value") if isinstance(e, dict) else e) for k, e in by_name.get(spec.name, {}).items()
        }
        for key, want in spec.configs.items():
            if have.get(key) != want:
                differs[key] = (have.get(key), want)
        states.append(TopicState(spec, True, differs))
    return states


def apply(admin: Any, states: list[TopicState], brokers: int) -> list[str]:
    """Create the missing topics; the names created."""
    from kafka.admin import NewTopic

    rf = replication(brokers)
    missing = [s.spec for s in states if not s.exists]
    if not missing:
        return []
    topics = []
    for spec in missing:
        configs = dict(spec.configs)
        if rf >= 3:
            configs.setdefault("min.insync.replicas", "2")
        topics.append(NewTopic(spec.name, spec.partitions, rf, topic_configs=configs))
    admin.create_topics(topics, raise_errors=True)
    return [t.name for t in missing]


class TopicsConfig(BaseModel):
    """What ``linkwatch topics -c FILE`` reads of any component's config: its ``kafka:`` section
    (the keys every component shares; a component's own keys there are ignored) and the topic
    names it sets. The other keys belong to the component and are ignored here."""

    model_config = ConfigDict(extra="ignore")

    kafka: KafkaClientConfig = KafkaClientConfig()
    samples_topic: str = SAMPLES_TOPIC
    findings_topic: str = FINDINGS_TOPIC

    @model_validator(mode="before")
    @classmethod
    def _pick(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"})
        kafka = data.get("kafka") if isinstance(data.get("kafka"), dict) else {}
        out: dict[str, Any] = {
            "kafka": {k: v for k, v in kafka.items() if k in KafkaClientConfig.model_fields}
        }
        publish = data.get("publish") if isinstance(data.get("publish"), dict) else {}
        for key in ("samples_topic", "findings_topic"):
            value = data.get(key, publish.get(key))
            if value is not None:
                out[key] = value
        if "topic" in kafka and "samples_topic" not in out:  # the agent's output topic
            out["samples_topic"] = kafka["topic"]
        return out
