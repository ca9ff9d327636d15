"""Capture a real ``kafka-request.log`` excerpt as a test and bench fixture.

    .venv/bin/python scripts/capture_request_log.py [--out tests/agent/fixtures/kafka-request.log]

Starts a local 3-broker Kafka cluster (``testbed``), runs real client traffic on it
(kafka-python acks=all produce + a consumer group, so Produce, consumer and follower Fetch,
Metadata, group coordination, ...), and writes ``--lines`` consecutive request-log lines of one
broker, taken while the traffic ran, then stops the cluster. Nothing is edited in the lines.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaAdminClient

from agent.requestlog.follow import FileFollower
from testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port
from tests.agent.traffic import create_topic, run_traffic

API = re.compile(rb'"requestApiKeyName":"([A-Z_]+)"')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("tests/agent/fixtures/kafka-request.log"))
    ap.add_argument("--lines", type=int, default=400)
    ap.add_argument("--seconds", type=float, default=15)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = LocalCluster(
            ClusterSpec(brokers=3, root=Path(tmp), base_port=find_free_base_port(3, start=41000))
        )
        state = cluster.up()
        try:
            admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
            create_topic(admin, "capture", partitions=3, rf=3)
            admin.close()
            followers = {n.node_id: FileFollower(n.request_log, start_at_end=True) for n in state.nodes}
            for f in followers.values():
                f.read_lines()
            run_traffic(state.bootstrap, "capture", seconds=args.seconds, rate=100)
            time.sleep(1)
            logs = {
                b: [x for x in f.read_lines(max_bytes=1 << 30) if x.strip()] for b, f in followers.items()
            }
            for f in followers.values():
                f.close()
        finally:
            cluster.down()

    # The first lines of the traffic, kept whole, from the broker whose stretch has the most
    # request types (the group coordinator: Metadata, FindCoordinator, JoinGroup, ...).
    def kinds(lines: list[bytes]) -> Counter[str]:
        return Counter(m.group(1).decode() for x in lines if (m := API.search(x)))

    broker = max(logs, key=lambda b: len(kinds(logs[b][: args.lines])))
    chosen = logs[broker][: args.lines]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(b"\n".join(chosen) + b"\n")
    print(
        f"{args.out}: {len(chosen)} of {len(logs[broker])} lines from broker {broker}: {dict(kinds(chosen))}"
    )


if __name__ == "__main__":
    main()
