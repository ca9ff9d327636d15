"""Persisted execution state: what every acting remediator must read before it acts.

It holds the actions (``running`` → ``settling`` → ``done`` / ``failed`` / ``stopped`` /
``cancelled`` / ``undone``) with their steps, each step's status (``intent`` is written *before*
the step is sent, so a kill between the write and the call is recovered as "maybe sent"), the
throttles an action set (with the values they replaced), demoted brokers, per-subject
last-action times (cooldowns), the dedup keys acted on, the findings seen
(:class:`~remediation.guardrails.SeenFindings`), findings kept while paused, the breaker, recent
failures, the findings-topic positions judged so far, drop counters, and replies to operator
commands.

Two stores with one interface (``data``, :meth:`save` and the action helpers):

* :class:`TopicStateStore` — **the cluster's**: a compacted topic next to the lease
  (``lease.state_topic``), one record per document (``meta``, ``acted``, ``tracker``,
  ``pending``, ``action/<id>``, ``reply/<id>``). Each :meth:`save` is one Kafka transaction of
  the documents that changed, which also commits the lease group's position on the command
  topic with the lease consumer's group metadata (KIP-447): the broker refuses it from a member
  that is no longer in the lease group's current generation, and the transactional id refuses
  it from a producer a newer holder has fenced. A write from a stale holder never lands, and
  :meth:`TopicStateStore.fence` is the same check with no documents — what every change to the
  cluster is preceded by (:mod:`remediation.fencing`). A new holder reads the whole topic
  (read-committed) and continues where the old one stopped. Used with ``execute: true`` and the
  lease on.
* :class:`FileStateStore` — one JSON file, replaced atomically (write, fsync, rename): for one
  remediator by construction (``lease.enabled: false``) and for dry runs (which create nothing on
  the cluster).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from linkwatch.errors import SetupError
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs

log = logging.getLogger(__name__)

EMPTY: dict[str, Any] = {
    "version": 2,
    "actions": {},
    "demoted": {},  # broker id (str) -> action id
    "last_action": {},  # subject -> epoch s
    "acted": {},  # dedup key -> epoch s when acted on
    "tracker": {"active": {}, "cleared": {}},
    "pending": [],  # findings (dicts) kept while paused
    "paused": False,
    "breaker": None,  # {"reason", "since", "by"} while open
    "failures": [],  # epoch s of recent failed actions
    "offsets": {},  # "topic:partition" -> next offset of the findings topic to judge
    "dropped": {},  # reason -> findings dropped at the boundary
    "replies": {},  # command id -> reply (operator commands through the holder)
}
MAX_ACTED_KEYS = 10_000
MAX_PENDING = 10_000
MAX_FINISHED_ACTIONS = 500
MAX_REPLIES = 100
FINISHED = ("done", "failed", "stopped", "cancelled", "undone", "recovered", "abandoned", "partial")


class Fenced(Exception):
    """This remediator cannot prove it holds the lease: it must not change the cluster or the
    shared state. The message says what refused it."""


def empty() -> dict[str, Any]:
    return copy.deepcopy(EMPTY)


def normalized(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every key of :data:`EMPTY` (older states: ``acted`` was a list)."""
    for k, v in EMPTY.items():
        data.setdefault(k, copy.deepcopy(v))
    if isinstance(data["acted"], list):
        data["acted"] = dict.fromkeys(data["acted"], 0.0)
    return data


class StateStore:
    """What both stores share: the data dict and the action helpers over it."""

    data: dict[str, Any]

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.data = empty()

    def save(self) -> None:
        raise NotImplementedError

    def fence(self) -> None:
        """Raise :class:`Fenced` unless this store may still be written (a no-op for a file)."""

    def prune(self, now: float) -> None:
        """Bound what grows: acted keys, findings kept while paused, finished actions, replies."""
        acted = self.data["acted"]
        if len(acted) > MAX_ACTED_KEYS:
            keep = sorted(acted.items(), key=lambda kv: kv[1])[-MAX_ACTED_KEYS:]
            self.data["acted"] = dict(keep)
        self.data["pending"] = self.data["pending"][-MAX_PENDING:]
        finished = sorted(
            (a for a in self.data["actions"].values() if a["status"] in FINISHED),
            key=lambda a: a.get("finished") or a.get("started") or 0,
        )
        demoted = set(self.data["demoted"].values())
        for a in finished[:-MAX_FINISHED_ACTIONS]:
            if a["id"] not in demoted:
                del self.data["actions"][a["id"]]
        replies = sorted(self.data["replies"].items(), key=lambda kv: kv[1].get("at", 0))
        self.data["replies"] = dict(replies[-MAX_REPLIES:])

    # -- actions ------------------------------------------------------------------------------

    def put_action(self, action: dict[str, Any]) -> None:
        with self._lock:
            self.data["actions"][action["id"]] = action
            self.save()

    def action(self, action_id: str) -> dict[str, Any]:
        return self.data["actions"][action_id]

    def update(self, action_id: str, **fields: Any) -> None:
        with self._lock:
            self.data["actions"][action_id].update(fields)
            self.save()

    def step_status(self, action_id: str, index: int, status: str, **extra: Any) -> None:
        with self._lock:
            step = self.data["actions"][action_id]["steps"][index]
            step["status"] = status
            step.update(extra)
            self.save()

    def running(self) -> list[dict[str, Any]]:
        return [a for a in self.data["actions"].values() if a["status"] in ("planned", "running")]

    def settling(self) -> list[dict[str, Any]]:
        return [a for a in self.data["actions"].values() if a["status"] == "settling"]


class FileStateStore(StateStore):
    """``path`` in a directory created if missing. A directory that cannot be created or a
    file that cannot be read as state raises :class:`SetupError` naming it (``state_dir``)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SetupError(
                f"state_dir {self.path.parent}: cannot be created ({e.strerror}); "
                "set state_dir to a directory this user can write"
            ) from None
        self.data = self._load()

    def _load(self) -> dict[str, Any]:
        if not self.path.exists():
            return empty()
        try:
            data = orjson.loads(self.path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as e:
            raise SetupError(
                f"state_dir: {self.path} cannot be read as state ({e}); move it away to start afresh"
            ) from None
        if not isinstance(data, dict):
            raise SetupError(f"state_dir: {self.path} is not a state file (not a JSON object)")
        return normalized(data)

    def reload(self) -> None:
        with self._lock:
            self.data = self._load()

    def save(self) -> None:
        with self._lock:
            self.prune(time.time())
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, orjson.dumps(self.data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)


# -- the shared store ---------------------------------------------------------------------------

SINGLE_DOCS = ("acted", "tracker", "pending")
META_SKIP = ("actions", "replies", *SINGLE_DOCS)


def documents(data: dict[str, Any]) -> dict[str, bytes]:
    """The state as compacted-topic records: key -> JSON value."""
    docs = {"meta": {k: v for k, v in data.items() if k not in META_SKIP}}
    docs.update({k: data[k] for k in SINGLE_DOCS})
    docs.update({f"action/{aid}": a for aid, a in data["actions"].items()})
    docs.update({f"reply/{cid}": r for cid, r in data["replies"].items()})
    return {k: orjson.dumps(v, option=orjson.OPT_NON_STR_KEYS) for k, v in docs.items()}


def from_documents(docs: dict[str, bytes]) -> dict[str, Any]:
    data: dict[str, Any] = empty()
    for key, raw in docs.items():
        value = orjson.loads(raw)
        if key == "meta":
            data.update(value)
        elif key in SINGLE_DOCS:
            data[key] = value
        elif key.startswith("action/"):
            data["actions"][key.removeprefix("action/")] = value
        elif key.startswith("reply/"):
            data["replies"][key.removeprefix("reply/")] = value
    return normalized(data)


def ensure_state_topic(admin: Any, topic: str) -> None:
    """Compacted, one partition, large records allowed (a plan of thousands of partitions)."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    configs = {
        "cleanup.policy": "compact",
        "max.message.bytes": str(16 << 20),
        # Small segments: compaction keeps what a new holder reads at takeover close to the
        # live documents, not a week of writes.
        "segment.ms": str(3600_000),
        "segment.bytes": str(64 << 20),
        "min.cleanable.dirty.ratio": "0.1",
    }
    with contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, 1, -1, topic_configs=configs)], raise_errors=True)


def read_documents(
    bootstrap: KafkaClientConfig | str, topic: str, timeout_s: float = 30.0, **client: Any
) -> dict[str, bytes]:
    """Every document of the state topic, last value per key (tombstones remove), committed
    transactions only."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        **kafka_python_kwargs(bootstrap, "remediator-state"),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
        allow_auto_create_topics=False,  # reading the state never creates it
        **client,
    )
    try:
        if not consumer.partitions_for_topic(topic):
            return {}  # no remediator has acted yet (the topic is created when one starts)
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        docs: dict[str, bytes] = {}
        deadline = time.monotonic() + timeout_s
        while consumer.position(tp) < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"state topic {topic}: read {consumer.position(tp)} of {end} records")
            for batch in consumer.poll(timeout_ms=500).values():
                for rec in batch:
                    key = rec.key.decode() if rec.key else ""
                    if rec.value is None:
                        docs.pop(key, None)
                    else:
                        docs[key] = rec.value
        return docs
    finally:
        consumer.close()


class TopicStateStore(StateStore):
    """The shared state (see the module docstring). Inactive until :meth:`activate` (when this
    remediator acquired the lease); :meth:`deactivate` when it lost it or was fenced."""

    def __init__(
        self,
        bootstrap: KafkaClientConfig | str,
        topic: str,
        transactional_id: str,
        lease_tp: Any,
        group_metadata: Callable[[], Any],
        command_position: Callable[[], int],
        wait_held: Callable[[], bool] = lambda: False,
    ) -> None:
        super().__init__()
        self.wait_held = wait_held
        self.bootstrap, self.topic = bootstrap, topic
        self.transactional_id = transactional_id
        self.lease_tp = lease_tp
        self.group_metadata = group_metadata
        self.command_position = command_position
        self._producer: Any = None
        self._written: dict[str, bytes] = {}
        self.transactions = 0

    @property
    def active(self) -> bool:
        return self._producer is not None

    def activate(self) -> None:
        """Fence every earlier holder's producer, then read the state it left (committed only)."""
        from kafka import KafkaProducer

        with self._lock:
            self.deactivate()
            producer = KafkaProducer(
                **kafka_python_kwargs(self.bootstrap, "remediator-state"),
                transactional_id=self.transactional_id,
                max_request_size=16 << 20,
                max_block_ms=30_000,
                transaction_timeout_ms=60_000,
            )
            try:
                producer.init_transactions()  # aborts a stale holder's open transaction
            except Exception:
                with contextlib.suppress(Exception):
                    producer.close(timeout=1)
                raise
            docs = read_documents(self.bootstrap, self.topic)
            self._producer = producer
            self._written = docs
            self.data = from_documents(docs)

    def deactivate(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
            if producer is not None:
                with contextlib.suppress(Exception):
                    producer.close(timeout=1)
            self._written = {}
            self.data = empty()

    def save(self) -> None:
        with self._lock:
            self.prune(time.time())
            docs = documents(self.data)
            changed: dict[str, bytes | None] = {k: v for k, v in docs.items() if self._written.get(k) != v}
            changed.update({k: None for k in self._written if k not in docs})
            if not changed:
                return
            self._transaction(changed)
            self._written = docs

    def fence(self) -> None:
        with self._lock:
            self._transaction({})

    def _transaction(self, records: dict[str, bytes | None]) -> None:
        """One transaction: the records, and the lease group's command position committed with
        the lease consumer's group metadata (KIP-447). A generation that moved on while this
        member still holds the lease (a standby joined: the group rebalanced and gave the lease
        back) is retried once the lease is held again; any other failure is :class:`Fenced`."""
        from kafka.errors import CommitFailedError, KafkaError

        if self._producer is None:
            raise Fenced("not the lease holder (shared state not loaded)")
        try:
            self._try_transaction(records)
        except CommitFailedError as e:
            if not self.wait_held():
                self.deactivate()
                raise Fenced(f"shared state write refused: {e}") from e
            try:
                self._try_transaction(records)
            except (KafkaError, TimeoutError, AssertionError, ValueError) as e2:
                self.deactivate()
                raise Fenced(f"shared state write refused: {type(e2).__name__}: {e2}") from e2
        except (KafkaError, TimeoutError, AssertionError, ValueError) as e:
            self.deactivate()
            raise Fenced(f"shared state write refused: {type(e).__name__}: {e}") from e
        self.transactions += 1

    def _try_transaction(self, records: dict[str, bytes | None]) -> None:
        from kafka.errors import CommitFailedError
        from kafka.structs import OffsetAndMetadata

        producer = self._producer
        if producer is None:
            raise Fenced("not the lease holder (shared state not loaded)")
        try:
            producer.begin_transaction()
            for key, value in records.items():
                producer.send(self.topic, key=key.encode(), value=value, partition=0)
            producer.send_offsets_to_transaction(
                {self.lease_tp: OffsetAndMetadata(self.command_position(), "", -1)}, self.group_metadata()
            )
            producer.commit_transaction()
        except Exception as e:
            with contextlib.suppress(Exception):
                producer.abort_transaction()
            if "metadata mismatch" in str(e) and not isinstance(e, CommitFailedError):
                raise CommitFailedError(str(e)) from e
            raise
