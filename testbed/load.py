"""Test load: a rate-limited producer with a chosen key distribution, and a group consumer.

Used by tests, the demo and ``linkwatch load``. Keys follow :class:`KeyDistribution`
(``none``, ``uniform`` over N keys, or ``zipf`` with an exponent, which is what makes hot
partitions and hot keys). Counters are kept per partition so callers can turn them into
per-broker throughput with the partition leaders. :meth:`LoadStats.recent` and
:func:`p99_ms` are the one place the ack p99 of the last seconds is computed (demo, benches).
The testbed's clusters create no topic on use: :func:`ensure_topic` makes a test's own topic,
:func:`ensure_own_topics` linkwatch's (samples, findings).
"""

from __future__ import annotations

import bisect
import contextlib
import importlib.util
import itertools
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from linkwatch.errors import ConfigError
from linkwatch.records import FINDINGS_TOPIC, SAMPLES_TOPIC
from linkwatch.sketch import exact_quantile

if TYPE_CHECKING:
    from linkwatch.kafka_client import KafkaClientConfig


@dataclass(frozen=True)
class KeyDistribution:
    """How message keys are drawn. ``spec`` strings: ``none``, ``uniform``, ``zipf:1.2``."""

    kind: str = "uniform"
    keys: int = 1000
    exponent: float = 1.2

    @classmethod
    def parse(cls, spec: str, keys: int = 1000) -> KeyDistribution:
        name, _, arg = spec.partition(":")
        if name not in ("none", "uniform", "zipf"):
            raise ConfigError("--keys", [f"{spec!r}: use none, uniform or zipf:<exponent>"])
        if keys < 1:
            raise ConfigError("--key-count", [f"{keys}: must be at least 1"])
        exponent = 1.2
        if name == "zipf" and arg:
            try:
                exponent = float(arg)
            except ValueError:
                raise ConfigError("--keys", [f"{spec!r}: the Zipf exponent must be a number"]) from None
            if exponent <= 0:
                raise ConfigError("--keys", [f"{spec!r}: the Zipf exponent must be > 0"])
        return cls(kind=name, keys=keys, exponent=exponent)

    def sampler(self, rng: random.Random) -> Callable[[], bytes | None]:
        if self.kind == "none":
            return lambda: None
        names = [f"key-{i:06d}".encode() for i in range(self.keys)]
        if self.kind == "uniform":
            return lambda: names[rng.randrange(self.keys)]
        # Zipf: P(rank k) ∝ 1 / k^s; inverse-CDF lookup over cumulative weights.
        cumulative = list(itertools.accumulate(1.0 / (k**self.exponent) for k in range(1, self.keys + 1)))
        total = cumulative[-1]
        return lambda: names[bisect.bisect_left(cumulative, rng.random() * total)]


@dataclass
class LoadStats:
    """Thread-safe enough for counters read by a display thread (ints are replaced atomically)."""

    sent: int = 0
    acked: int = 0
    errors: int = 0
    acked_by_partition: Counter[int] = field(default_factory=Counter)
    # Recent (ack time, latency seconds, partition); bounded.
    recent_latencies: deque[tuple[float, float, int]] = field(default_factory=lambda: deque(maxlen=20000))
    last_error: str = ""

    def count_error(self, what: str) -> None:
        """One failed send or ack; ``what`` is kept as the last error's text."""
        self.errors += 1
        self.last_error = what

    def recent(self, window_s: float, now: float | None = None) -> list[tuple[float, int]]:
        """(ack latency seconds, partition) of the acks of the last ``window_s`` seconds
        (``now``: a ``time.monotonic()`` reading, default the current one)."""
        now = time.monotonic() if now is None else now
        return [(latency, p) for at, latency, p in list(self.recent_latencies) if now - at <= window_s]


def p99_ms(latencies_s: Iterable[float], min_samples: int = 1) -> float | None:
    """The exact p99 in ms (the value at rank floor(0.99 * (n - 1)), as
    :func:`~linkwatch.sketch.exact_quantile`) of latencies in seconds; None with fewer than
    ``min_samples`` of them (a p99 of a handful of acks says little)."""
    values = list(latencies_s)
    if not values or len(values) < min_samples:
        return None
    return exact_quantile(values, 0.99) * 1000


#: The producer clients a load can run on. ``kafka-python`` (the default) is Python through and
#: through: its batching, sending and ack callbacks take this process's GIL and about a third of a
#: core per 150 msg/s, and an ack's latency is read when the Python thread gets to it.
#: ``librdkafka`` (confluent-kafka) batches and sends in C threads and times each message itself
#: (``Message.latency()``, from ``produce()`` to the broker's ack): a load whose measured latency is
#: the cluster's, not the load generator's, at a small share of the CPU. It partitions keys with
#: murmur2 as kafka-python and the Java client do, so a key lands on the same partition either way.
CLIENTS = ("kafka-python", "librdkafka")


class ProducerLoad:
    """Produce to ``topic`` at ``rate_per_s`` until stopped; run in a background thread.
    ``client``: one of :data:`CLIENTS`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate_per_s: float = 1000.0,
        keys: KeyDistribution | None = None,
        message_bytes: int = 200,
        acks: int | str = 1,
        seed: int = 1,
        linger_ms: int = 5,
        client: str = "kafka-python",
    ) -> None:
        if client not in CLIENTS:
            raise ConfigError("--load-client", [f"{client!r}: use {' or '.join(CLIENTS)}"])
        if client == "librdkafka" and importlib.util.find_spec("confluent_kafka") is None:
            raise ConfigError("--load-client", ["librdkafka needs confluent-kafka (pyproject's dev extra)"])
        if rate_per_s <= 0:
            raise ConfigError("--rate", [f"{rate_per_s}: must be > 0 messages/s"])
        if message_bytes < 1 or message_bytes > 1_000_000:
            raise ConfigError("--size", [f"{message_bytes}: must be between 1 and 1000000 bytes"])
        if str(acks) not in ("0", "1", "all", "-1"):
            raise ConfigError("--acks", [f"{acks!r}: use 0, 1 or all"])
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate_per_s = rate_per_s
        self.keys = keys or KeyDistribution()
        self.message_bytes = message_bytes
        self.acks = acks if acks == "all" else int(acks)
        self.linger_ms = linger_ms
        self.client = client
        self.stats = LoadStats()
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ProducerLoad:
        self._thread = threading.Thread(target=self._run, name=f"load-{self.topic}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> LoadStats:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.stats

    def _run(self) -> None:
        if self.client == "librdkafka":
            self._run_librdkafka()
            return
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.bootstrap,
            acks=self.acks,
            linger_ms=self.linger_ms,
            client_id="linkwatch-load",
            max_block_ms=5000,
        )
        payload = self._payload()
        try:
            self._paced(lambda key: self._send(producer, key, payload), time.sleep)
        finally:
            producer.flush(timeout=10)
            producer.close(timeout=5)

    def _payload(self) -> bytes:
        return bytes(self._rng.getrandbits(8) for _ in range(self.message_bytes))

    def _paced(self, send: Callable[[bytes | None], None], wait: Callable[[float], object]) -> None:
        """Call ``send(key)`` at ``rate_per_s`` until stopped (a send that fails counts in
        ``stats.errors``, not ``stats.sent``, and is made up for); ``wait(s)`` between batches
        (librdkafka serves its acks there)."""
        next_key = self.keys.sampler(self._rng)
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate_per_s) - self.stats.sent
            if due <= 0:
                wait(min(0.01, 1.0 / self.rate_per_s))
                continue
            for _ in range(min(due, 1000)):
                send(next_key())
            wait(0)

    def _run_librdkafka(self) -> None:
        from confluent_kafka import KafkaException, Producer  # found at __init__

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": str(self.acks),
                "linger.ms": self.linger_ms,
                "client.id": "linkwatch-load",
                "partitioner": "murmur2_random",  # kafka-python's and Java's key -> partition
                "message.timeout.ms": 30_000,  # a message not acked in 30 s is an error, counted
            }
        )
        payload = self._payload()

        def send(key: bytes | None) -> None:
            try:
                producer.produce(self.topic, payload, key, on_delivery=self._on_delivery)
            except (BufferError, KafkaException) as e:  # local queue full: count and go on
                self.stats.count_error(f"{type(e).__name__}: {e}")
                return
            self.stats.sent += 1

        try:
            self._paced(send, producer.poll)
        finally:
            producer.flush(10)

    def _on_delivery(self, err, msg) -> None:
        if err is not None:
            self.stats.count_error(str(err))
            return
        self.stats.acked += 1
        self.stats.acked_by_partition[msg.partition()] += 1
        latency = msg.latency()  # librdkafka's own: produce() to ack, seconds
        if latency is not None:
            self.stats.recent_latencies.append((time.monotonic(), latency, msg.partition()))

    def _send(self, producer, key: bytes | None, payload: bytes) -> None:
        sent_at = time.monotonic()
        try:
            future = producer.send(self.topic, key=key, value=payload)
        except Exception as e:  # buffer full or metadata timeout: count and go on
            self.stats.count_error(f"{type(e).__name__}: {e}")
            return
        self.stats.sent += 1
        future.add_callback(self._on_ack, sent_at)
        future.add_errback(self._on_error)

    def _on_ack(self, sent_at: float, metadata) -> None:
        now = time.monotonic()
        self.stats.acked += 1
        self.stats.acked_by_partition[metadata.partition] += 1
        self.stats.recent_latencies.append((now, now - sent_at, metadata.partition))

    def _on_error(self, exc: BaseException) -> None:
        self.stats.count_error(f"{type(exc).__name__}: {exc}")


class ConsumerLoad:
    """Consume ``topic`` in group ``group`` until stopped; counts records per partition."""

    RESTART_S = 1.0  # between a client that raised and the next one: at most one a second

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.group = group
        self.consumed_by_partition: Counter[int] = Counter()
        self.consumed = 0
        self.assigned = threading.Event()  # set once the group gave this consumer partitions
        # The last error that ended a client (it is made again after RESTART_S): a load that
        # stopped reading says why instead of counting nothing in silence.
        self.error: str | None = None
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ConsumerLoad:
        self._thread = threading.Thread(target=self._run, name=f"consume-{self.group}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> int:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        return self.consumed

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
            except Exception as e:  # the client's bootstrap or a poll failed: note it, start again
                self.errors += 1
                self.error = f"{type(e).__name__}: {e}"
                self._stop.wait(self.RESTART_S)

    def _consume(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            client_id=f"linkwatch-load-{self.group}",
        )
        try:
            while not self._stop.is_set():
                for tp, records in consumer.poll(timeout_ms=200).items():
                    self.consumed_by_partition[tp.partition] += len(records)
                    self.consumed += len(records)
                if not self.assigned.is_set() and consumer.assignment():
                    self.assigned.set()
        finally:
            consumer.close()


def ensure_topic(
    admin,
    topic: str,
    partitions: int,
    replication: int,
    configs: dict[str, str] | None = None,
    spread_over: list[int] | None = None,
) -> None:
    """Create ``topic`` if it does not exist; wait until every partition has a leader.

    ``spread_over``: broker ids; the replicas are then assigned explicitly in rotation, so each of
    those brokers is the preferred (first) replica of an equal share of the partitions. Without
    it the controller places them, and skips a broker that is fenced at that moment (one a test
    paused a little earlier), which then leads nothing of the topic."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    if spread_over is not None and not 0 < replication <= len(spread_over):
        raise ValueError(
            f"replication {replication} needs at least that many brokers in spread_over={spread_over}"
        )
    if spread_over is None:
        new = NewTopic(topic, partitions, replication, topic_configs=configs or {})
    else:
        ring = sorted(spread_over)
        assignment = {p: [ring[(p + i) % len(ring)] for i in range(replication)] for p in range(partitions)}
        new = NewTopic(topic, replica_assignments=assignment, topic_configs=configs or {})
    with contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topics([new])
    wait_for_leaders(admin, topic, partitions)


def ensure_own_topics(
    kafka: KafkaClientConfig | str, samples: str = SAMPLES_TOPIC, findings: str = FINDINGS_TOPIC
) -> list[str]:
    """linkwatch's own topics (:func:`linkwatch.topics.own_topics`) on the cluster ``kafka``
    names (a ``kafka:`` section, or bootstrap servers), the missing ones created as ``linkwatch
    topics --create`` creates them; returns the names created, once every partition of both has
    a leader.

    The testbed's clusters create no topic on use (``auto.create.topics.enable=false``, as in
    production): whatever starts an agent, probe, lag collector or analyzer that publishes to or
    reads these calls this first. A topic that exists is left as it is, whatever its partitions:
    one way to make them, so tests sharing a cluster never wait for a partition count another
    test did not give them."""
    from kafka.errors import TopicAlreadyExistsError

    from linkwatch import topics
    from linkwatch.kafka_client import admin_client, kafka_python_kwargs, known_brokers

    specs = topics.own_topics(samples, findings)
    admin = admin_client(**kafka_python_kwargs(kafka, "testbed-topics"))
    try:
        created: list[str] = []
        # Another helper may create one between the plan and the create: its topic will do.
        with contextlib.suppress(TopicAlreadyExistsError):
            states = topics.plan(admin, specs)
            brokers = len(known_brokers(admin))  # as `linkwatch topics --create`
            created = topics.apply(admin, states, brokers)
        for spec in specs:
            wait_for_leaders(admin, spec.name)
        return created
    finally:
        admin.close()


def wait_for_leaders(admin, topic: str, partitions: int | None = None, timeout_s: float = 30.0) -> None:
    """Return once ``topic`` is in the metadata with a leader for each of its partitions (and has
    ``partitions`` of them, when given); TimeoutError after ``timeout_s``. The metadata of the
    broker the request reached: another applies the topic from the metadata log on its own time,
    so a request to it right after may not list it yet (clients retry on that; a test's
    describe right after waits for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        leaders = partition_leaders(admin, topic)
        if (
            leaders
            and (partitions is None or len(leaders) == partitions)
            and all(v >= 0 for v in leaders.values())
        ):
            return
        time.sleep(0.2)
    raise TimeoutError(f"topic {topic} has no leader for every partition after {timeout_s:g}s")


def _leaders(admin, topics: Sequence[str]) -> dict[str, dict[int, int]] | None:
    """topic -> {partition -> leader broker id (-1 when leaderless)} from one metadata request,
    for the topics the metadata answered without error; None when it could not be read."""
    try:
        described = admin.describe_topics(list(topics))
    except Exception:
        return None
    return {
        t["name"]: {p["partition_index"]: p["leader_id"] for p in t.get("partitions", [])}
        for t in described
        if t.get("name") in topics and not t.get("error_code", 0)
    }


def partition_leaders(admin, topic: str) -> dict[int, int]:
    """partition -> leader broker id (-1 when leaderless), from the cluster metadata."""
    return (_leaders(admin, [topic]) or {}).get(topic, {})


def brokers_leading(admin, topics: Sequence[str]) -> set[int] | None:
    """The brokers that lead at least one partition of ``topics``, from one metadata request;
    None when the metadata could not be read or a topic is missing from it."""
    by_topic = _leaders(admin, topics)
    if by_topic is None or not set(topics) <= set(by_topic):
        return None
    return {b for leaders in by_topic.values() for b in leaders.values() if b >= 0}
