"""On the real 3-broker cluster, with real Spark: a restart without double counting.

The stream archives samples (some re-sent with the same key, as the agent's spool does), stops,
and restarts from its checkpoint with new samples and more re-sends; the archive holds every
record once and the aggregates count every window once.

The live run that was here (request logs → samples topic → stream → archive → detectors: a
quiet phase with no slow broker, broker 2 paused → a slow-broker finding naming the stage, then
cleared) is the fault matrix's (``bench/fault_matrix.py``: quiet phases, leader pauses and
more, both detection paths, judged for false alarms). In the suite the same chain runs live in
``bench/remediation_recover.py``'s smoke (the demo's agents and streaming analyzer on the session
cluster: broker 2 paused → ``slow_broker`` → demoted → the finding clears) and in
``tests/alerts/test_alerts_integration.py`` (the paused broker's finding through Prometheus and
Alertmanager; the Zipf topic's skew and hot keys on the dashboards).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from linkwatch import records as R
from linkwatch.sketch import LatencySketch
from testbed.load import ensure_topic

pytestmark = pytest.mark.cluster

WINDOW_S = 2


def _session_extra() -> dict[str, str]:
    return {"spark.scheduler.mode": "FAIR"}  # as AnalysisService.start asks for


def _sketch_records(brokers: tuple[int, ...], windows: list[int], seed: int) -> list[R.StageSketch]:
    out = []
    for w in windows:
        for b in brokers:
            sk = LatencySketch()
            for i in range(20 + 10 * b + seed):
                sk.add(float(1 + (i * 7 + b + seed) % 50))
            out.append(
                R.StageSketch(
                    cluster="restart",
                    source=f"broker-{b}",
                    ts_ms=w,
                    broker=b,
                    request=R.PRODUCE,
                    stage="total",
                    window_s=WINDOW_S,
                    sketch=sk.to_dict(),
                )
            )
    return out


def _send(bootstrap: str, topic: str, recs: list[R.StageSketch]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for rec in recs:
        producer.send(topic, key=rec.dedup_key().encode(), value=rec.to_json())
    producer.flush(30)
    producer.close(10)


def _run_until_caught_up(spark, opts) -> tuple[int, int]:
    """Start the stream from its checkpoint, process what is in the topic, stop.
    Returns (rows read from Kafka by this run, first batch id of this run)."""
    from spark_metrics.streaming import start_archive_stream

    query = start_archive_stream(spark, opts)
    try:
        query.processAllAvailable()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        return sum(p["numInputRows"] for p in progress), min(p["batchId"] for p in progress)
    finally:
        query.stop()


@pytest.mark.timeout(900)
def test_restart_from_checkpoint_counts_each_window_once(cluster3, admin, tmp_path: Path) -> None:
    from spark_metrics.aggregate import aggregate, collect
    from spark_metrics.batch import read_archive
    from spark_metrics.session import spark_session
    from spark_metrics.streaming import StreamOptions

    topic = f"samples-restart-{tmp_path.name[-8:]}"
    ensure_topic(admin, topic, 2, 1)
    spark = spark_session(kafka=True, shuffle_partitions=2, extra=_session_extra())
    opts = StreamOptions(
        kafka=cluster3.bootstrap,
        archive_dir=tmp_path / "archive",
        checkpoint_dir=tmp_path / "checkpoint",
        topic=topic,
        trigger_s=1.0,
    )
    t0 = (int(time.time()) // WINDOW_S) * WINDOW_S * 1000 - 20_000
    w = [t0 + i * WINDOW_S * 1000 for i in range(4)]
    first = _sketch_records((1, 2, 3), w[:2], seed=0)
    second = _sketch_records((1, 2, 3), w[2:], seed=1)

    # Run 1: windows 0–1, with three records sent twice in the same run.
    _send(cluster3.bootstrap, topic, first + first[:3])
    read1, batch1 = _run_until_caught_up(spark, opts)
    # Run 2 from the checkpoint: windows 2–3, plus a spool re-send of all of run 1's records.
    _send(cluster3.bootstrap, topic, second + first)
    read2, batch2 = _run_until_caught_up(spark, opts)

    assert read1 == len(first) + 3
    assert read2 == len(second) + len(first), "the restart re-read offsets committed by run 1"
    assert batch2 > batch1, "the restart did not resume from the checkpoint"
    archived = spark.read.parquet(str(opts.archive_dir))
    keys = {r.dedup_key() for r in first + second}
    assert archived.count() == len(keys), "a record reached the archive twice"
    assert {r["key"] for r in archived.select("key").collect()} == keys

    raw = read_archive(spark, opts.archive_dir, w[0], w[-1] + WINDOW_S * 1000)
    data = collect(aggregate(raw, WINDOW_S, cluster="restart", deduplicate=False), "restart", WINDOW_S)
    got = {(r.broker, r.window_start_ms): r.count for r in data.broker_stages}
    want = {(r.broker, r.ts_ms): int(r.sketch["count"]) for r in first + second}
    assert got == want
    cluster_got = {r.window_start_ms: r.count for r in data.cluster_stages}
    assert cluster_got == {x: sum(c for (_, wx), c in want.items() if wx == x) for x in w}
