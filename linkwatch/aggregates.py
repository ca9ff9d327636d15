"""Aggregated rows: what ``spark_metrics`` produces and the analyzer's detectors read.

Stdlib only, so both sides import it without importing each other (and a detector plugin
without pyspark). Field names equal the column names of the matching ``spark_metrics``
transform (a test checks it); :func:`spark_metrics.aggregate.collect` builds the rows, and so
does the analyzer's incremental :class:`aggregation.window_state.WindowState`. The sketch
arithmetic behind :class:`StageWindow` and :class:`ProbeBrokerWindow` is
:mod:`aggregation.sketch_math`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class StageWindow:
    """Merged latency quantiles of one stage of one request type in one window.

    ``broker`` is ``None`` for the cluster-wide merge (all brokers' sketches summed per bucket).
    Quantiles are ``None`` when the window saw no request.

    ``count`` estimates the requests served; ``logged`` is how many of them the broker logged,
    the sample the quantiles rest on. They are equal under a full capture; under sampled capture
    (:mod:`agent.capture`) ``logged`` is ``count × capture_ratio`` summed over the merged
    sketches. A guard on how many requests a quantile needs reads ``logged``.
    """

    broker: int | None
    request: str
    stage: str
    window_start_ms: int
    count: int
    logged: int
    p50_ms: float | None
    p99_ms: float | None
    p999_ms: float | None
    # The p99 of the values above the zero bucket alone: for ``remote``, of the requests that
    # waited at all. A Produce with acks 0 or 1 never waits (remote 0), one with acks=all waits
    # for its followers, so this is the acks=all requests' wait, which a mixed p99 hides when
    # most Produce requests are acks=1 (fault matrix run 8: the leaders' 361-400 ms against a
    # mixed p99 of 4-67 ms). None when no value was above zero. Defaulted so rows built by hand may omit it.
    nonzero_p99_ms: float | None = None
    mean_ms: float | None
    # The ``total`` stage's rows only (0 on the others, and from agents that do not say): the
    # client connections served requests of this type in the window, and how many of them were
    # served back to back (``StageSketch.saturated_connections``); summed over the brokers in
    # the cluster-wide row.
    connections: int = 0
    saturated_connections: int = 0


@dataclass(frozen=True, kw_only=True)
class PartitionWindow:
    """One topic-partition in one window: its size and its traffic (``None`` = not measurable,
    e.g. the first window of a partition has no previous size to difference against)."""

    topic: str
    partition: int
    window_start_ms: int
    size_bytes: int
    bytes_in_per_s: float | None
    messages_in_per_s: float | None


@dataclass(frozen=True, kw_only=True)
class LogDirWindow:
    """Usage of one log dir of one broker in one window (the last reading in it)."""

    broker: int
    log_dir: str
    window_start_ms: int
    capacity_bytes: int
    used_bytes: int
    usage_ratio: float
    io_util: float | None


@dataclass(frozen=True, kw_only=True)
class ImbalanceWindow:
    """``ratio = max/avg − 1`` of ``measure`` over the members of a scope in one window.

    ``scope`` is ``topic`` (members: partitions of ``group`` = topic name), ``broker`` or
    ``log_dir`` (``group`` empty); ``max_member`` names the member carrying the maximum.
    """

    scope: str
    measure: str
    group: str
    window_start_ms: int
    members: int
    max_value: float
    avg_value: float
    ratio: float
    max_member: str


@dataclass(frozen=True, kw_only=True)
class HotKey:
    """A key reported by lossy counting over ``n`` sampled records of a topic."""

    topic: str
    key: str
    count: int
    n: int
    support: float
    epsilon: float
    partitions: tuple[int, ...] = ()

    @property
    def share(self) -> float:
        return self.count / self.n if self.n else 0.0


@dataclass(frozen=True, kw_only=True)
class ClientWindow:
    """Slow-request exemplars of one client on one broker in one window (``client_id`` as the
    request log gives it, ``""`` when the client sent none): how many were kept, and the largest
    ``send`` and ``throttle`` stage times among them. The exemplars are the agent's slowest
    requests of each window (bounded per window), so ``count`` is a lower bound."""

    broker: int
    request: str
    client_id: str
    window_start_ms: int
    count: int
    send_ms_max: float
    throttle_ms_max: float


@dataclass(frozen=True, kw_only=True)
class ProbeBrokerWindow:
    """The probe's view of one leader broker in one window (``ProbeSample`` records merged over
    probe instances): quantiles from the merged sketches, availability from the summed counts.

    ``availability`` is ``ok / decided`` and ``None`` when no probe was decided in the window;
    quantiles are ``None`` when no probe was acked (produce) or read back (end to end).
    ``commit_p99_ms`` is the p99 of the probe group's successful offset commits coordinated by
    this broker (``ProbeSample.commit_latency``); ``None`` when it coordinated none in the window
    or the samples predate the field.
    """

    broker: int
    window_start_ms: int
    sent: int
    ok: int
    decided: int
    availability: float | None
    produce_p50_ms: float | None
    produce_p99_ms: float | None
    end_to_end_p50_ms: float | None
    end_to_end_p99_ms: float | None
    commit_p99_ms: float | None = None
    # Several probes, not one: a p99 of a window's few dozen probes is its slowest one or two.
    produce_p90_ms: float | None = None
    end_to_end_p90_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class BrokerStartWindow:
    """When a broker's JVM started, as its agent read it (``BrokerGauges`` value
    ``jvm_start_time_ms``) in one window; the newest when it read several. A start
    time that changes from one window to a later one is a restart, however short its downtime."""

    broker: int
    window_start_ms: int
    started_ms: int


@dataclass(frozen=True, kw_only=True)
class Aggregates:
    """Everything a detector may look at for one evaluation. Rows are in no particular order."""

    cluster: str
    window_s: int
    broker_stages: Sequence[StageWindow] = ()
    cluster_stages: Sequence[StageWindow] = ()
    partitions: Sequence[PartitionWindow] = ()
    logdirs: Sequence[LogDirWindow] = ()
    imbalances: Sequence[ImbalanceWindow] = ()
    hot_keys: Sequence[HotKey] = ()
    client_windows: Sequence[ClientWindow] = ()
    probes: Sequence[ProbeBrokerWindow] = ()
    broker_starts: Sequence[BrokerStartWindow] = ()  # only where the agents read JMX
