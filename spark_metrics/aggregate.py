"""Raw samples → every aggregate the analyzer needs, and collecting them into rows.

:func:`aggregate` is the one place that chains the transforms; the batch path
(:mod:`spark_metrics.batch`) and the streaming path (:mod:`spark_metrics.streaming`) both call
it, on a range read from Kafka / the Parquet archive, or on the archive the stream writes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from linkwatch import records as R
from linkwatch.aggregates import (
    Aggregates,
    BrokerStartWindow,
    ClientWindow,
    HotKey,
    ImbalanceWindow,
    LogDirWindow,
    PartitionWindow,
    ProbeBrokerWindow,
    StageWindow,
)
from spark_metrics import transforms as tf
from spark_metrics.sketch_merge import probe_windows, stage_windows


@dataclass(frozen=True)
class AggregateFrames:
    # StageWindow rows per broker and cluster-wide (``broker`` null), from one pass.
    stages: DataFrame
    partitions: DataFrame
    logdirs: DataFrame
    imbalances: DataFrame
    probes: DataFrame
    client_windows: DataFrame | None = None  # None: the caller reads no exemplars
    broker_starts: DataFrame | None = None  # None: the caller reads no JMX gauges

    @property
    def broker_stages(self) -> DataFrame:
        return self.stages.where(F.col("broker").isNotNull())

    @property
    def cluster_stages(self) -> DataFrame:
        return self.stages.where(F.col("broker").isNull())


def aggregate(
    raw: DataFrame, window_s: int, cluster: str | None = None, deduplicate: bool = True
) -> AggregateFrames:
    """``raw`` has a ``value`` column holding record JSON (Kafka's shape or the archive's)."""

    def kind(cls: type[R.Record]) -> DataFrame:
        recs = tf.records_of(raw, cls, cluster)
        return tf.dedup(recs) if deduplicate else recs

    sketches = kind(R.StageSketch)
    partitions = tf.partition_windows(kind(R.PartitionSize), window_s)
    logdirs = tf.logdir_windows(kind(R.LogDirUsage), window_s)
    return AggregateFrames(
        stages=stage_windows(sketches, window_s),
        partitions=partitions,
        logdirs=logdirs,
        imbalances=tf.all_imbalances(partitions, logdirs),
        client_windows=tf.client_windows(kind(R.SlowRequest), window_s),
        probes=probe_windows(kind(R.ProbeSample), window_s),
        broker_starts=tf.broker_starts(kind(R.BrokerGauges), window_s),
    )


def _rows(df: DataFrame, cls: type) -> list[Any]:
    names = [f.name for f in dataclasses.fields(cls)]
    return [cls(**{n: row[n] for n in names}) for row in df.select(*names).collect()]


def collect(
    frames: AggregateFrames, cluster: str, window_s: int, hot_keys: tuple[HotKey, ...] = ()
) -> Aggregates:
    """Bring the (small) aggregates to the driver as the analyzer's rows."""
    stages = _rows(frames.stages, StageWindow)
    # The imbalances are computed from the partition and log-dir frames: keep those cached
    # while collecting so their shuffles run once per evaluation, not twice.
    cached = [frames.partitions.cache(), frames.logdirs.cache()]
    try:
        partitions = _rows(frames.partitions, PartitionWindow)
        logdirs = _rows(frames.logdirs, LogDirWindow)
        imbalances = _rows(frames.imbalances, ImbalanceWindow)
        probes = _rows(frames.probes, ProbeBrokerWindow)
    finally:
        for df in cached:
            df.unpersist()
    return Aggregates(
        cluster=cluster,
        window_s=window_s,
        broker_stages=[r for r in stages if r.broker is not None],
        cluster_stages=[r for r in stages if r.broker is None],
        partitions=partitions,
        logdirs=logdirs,
        imbalances=imbalances,
        hot_keys=hot_keys,
        client_windows=_rows(frames.client_windows, ClientWindow)
        if frames.client_windows is not None
        else [],
        probes=probes,
        broker_starts=_rows(frames.broker_starts, BrokerStartWindow)
        if frames.broker_starts is not None
        else [],
    )
