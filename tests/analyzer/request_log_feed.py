"""A small stand-in for the broker agents (``bench/spark_detection_delay.py`` feeds the
analyzer with it): tails each broker's real ``kafka-request.log`` and publishes StageSketch
records per window, plus PartitionSize records from the real log dirs, on ``linkwatch.samples``.

It is deliberately small: windows are assigned by read time (tailing every 100 ms), sizes are
the sum of ``*.log`` segment files. The real agents (``testbed.agents``) are what the demo, the
recovery bench and the fault matrix run.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

from linkwatch import records as R
from linkwatch.sketch import LatencySketch
from testbed.cluster import ClusterState
from testbed.load import ensure_own_topics

MARKER = "Completed request:"
STAGE_KEYS = {s: f"{s}TimeMs" for s in R.STAGES}


def classify(entry: dict) -> str | None:
    name = entry.get("requestHeader", {}).get("requestApiKeyName")
    if name == "PRODUCE":
        return R.PRODUCE
    if name == "FETCH":
        req = entry.get("request") or {}
        rid = req.get("replicaId", (req.get("replicaState") or {}).get("replicaId", -1))
        return R.FETCH_FOLLOWER if rid is not None and rid >= 0 else R.FETCH_CONSUMER
    return None


class RequestLogFeed:
    def __init__(
        self, cluster: ClusterState, cluster_name: str, window_s: int = 2, size_topics: tuple[str, ...] = ()
    ) -> None:
        self.cluster = cluster
        self.name = cluster_name
        self.window_s = window_s
        self.size_topics = set(size_topics)
        self._offsets = {n.node_id: _size(n.request_log) for n in cluster.nodes}  # start at the end
        self._sketches: dict[tuple[int, int, str, str], LatencySketch] = defaultdict(LatencySketch)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.published = 0

    def start(self) -> RequestLogFeed:
        from kafka import KafkaProducer

        ensure_own_topics(self.cluster.bootstrap)  # the samples topic: the cluster creates none on use
        self._producer = KafkaProducer(
            bootstrap_servers=self.cluster.bootstrap, linger_ms=20, acks=1, client_id="linkwatch-feed"
        )
        self._thread = threading.Thread(target=self._run, name="request-log-feed", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(10)
        self._producer.flush(10)
        self._producer.close(10)

    def _run(self) -> None:
        current = self._window(time.time())
        while not self._stop.wait(0.1):
            now = self._window(time.time())
            for node in self.cluster.nodes:
                self._read(node, current)
            if now != current:
                self._publish(current)
                current = now

    def _window(self, t: float) -> int:
        return int(t // self.window_s) * self.window_s * 1000

    def _read(self, node, window: int) -> None:
        path = node.request_log
        size = _size(path)
        start = self._offsets[node.node_id]
        if size < start:  # rolled over
            start = 0
        if size == start:
            return
        with open(path, "rb") as f:
            f.seek(start)
            chunk = f.read(size - start)
        end = chunk.rfind(b"\n") + 1  # keep a partial last line for the next read
        self._offsets[node.node_id] = start + end
        for line in chunk[:end].decode("utf-8", "replace").splitlines():
            i = line.find(MARKER)
            if i < 0:
                continue
            try:
                entry = json.loads(line[i + len(MARKER) : line.rfind("} (") + 1])
            except ValueError:
                continue
            request = classify(entry)
            if request is None:
                continue
            for stage, key in STAGE_KEYS.items():
                if key in entry:
                    self._sketches[(window, node.node_id, request, stage)].add(float(entry[key]))

    def _publish(self, window: int) -> None:
        for w, broker, request, stage in [k for k in self._sketches if k[0] <= window]:
            sk = self._sketches.pop((w, broker, request, stage))
            rec = R.StageSketch(
                cluster=self.name,
                source=f"broker-{broker}",
                ts_ms=w,
                broker=broker,
                request=request,
                stage=stage,
                window_s=self.window_s,
                sketch=sk.to_dict(),
            )
            self._send(rec)
        for node in self.cluster.nodes:
            for log_dir in node.log_dirs:
                for part in Path(log_dir).iterdir():
                    topic, _, p = part.name.rpartition("-")
                    if topic not in self.size_topics or not p.isdigit():
                        continue
                    segs = list(part.glob("*.log"))
                    rec = R.PartitionSize(
                        cluster=self.name,
                        source=f"broker-{node.node_id}",
                        ts_ms=window,
                        broker=node.node_id,
                        log_dir=log_dir,
                        topic=topic,
                        partition=int(p),
                        size_bytes=sum(_size(s) for s in segs),
                        segments=len(segs),
                        oldest_segment_ms=0,
                        newest_segment_ms=window,
                    )
                    self._send(rec)

    def _send(self, rec: R.Record) -> None:
        self._producer.send(R.SAMPLES_TOPIC, key=rec.dedup_key().encode(), value=rec.to_json())
        self.published += 1


def _size(path: Path | str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0
