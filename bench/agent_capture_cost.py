"""What each request-log capture policy costs the broker: broker CPU time over the same load.

    .venv/bin/python bench/agent_capture_cost.py [--seconds 20] [--rate 400]

Runs a real 1-node cluster and drives the same load in every phase (``--rate`` acks=1 produce
messages/s plus a consumer fetching back to back with fetch.max.wait 0), reading the broker JVM's
CPU time (utime+stime, /proc/<pid>/stat) and the request-log lines written:

* cluster A (plain request appender): ``off`` (logger WARN, the baseline), ``always`` (DEBUG),
  ``windows`` (WARN, switched to DEBUG through BROKER_LOGGER for 25 % of the time);
* cluster B (appender with the slow-only RegexFilter, threshold ``--slow-ms``): ``slow_only``
  (DEBUG + filter) and ``off`` again as that cluster's baseline.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from agent.capture import BrokerLoggerSwitch, slow_only_filter_yaml
from agent.jmx.collector import JMX_REQUESTS, JolokiaReader, stage_mbean
from linkwatch.testbed.cluster import ClusterSpec, LocalCluster, find_free_base_port


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def requests_served(jmx: JolokiaReader) -> float:
    """Produce + FetchConsumer + FetchFollower requests the broker completed so far (JMX Count)."""
    snap = jmx.read()
    return sum(snap.get((stage_mbean("TotalTimeMs", r), "Count"), 0.0) for r in JMX_REQUESTS)


def load(bootstrap: str, topic: str, seconds: float, rate: int) -> int:
    stop = threading.Event()

    def consume() -> None:
        # fetch.max.wait 0: the consumer fetches back to back, hundreds of requests/s
        c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{topic}", fetch_max_wait_ms=0)
        while not stop.is_set():
            c.poll(timeout_ms=100)
        c.close()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    p = KafkaProducer(
        bootstrap_servers=bootstrap, acks=1, linger_ms=0, max_in_flight_requests_per_connection=1
    )
    sent, t0 = 0, time.monotonic()
    while (elapsed := time.monotonic() - t0) < seconds:
        if sent < int(elapsed * rate):
            p.send(topic, value=b"x" * 200)
            sent += 1
        else:
            time.sleep(0.002)
    p.flush()
    p.close()
    stop.set()
    t.join(timeout=5)
    return sent


def phase(name: str, cluster_state, admin, topic: str, seconds: float, rate: int, during=None) -> dict:
    node = cluster_state.nodes[0]
    jmx = JolokiaReader(node.jolokia_url, timeout_s=30)
    r0 = requests_served(jmx)
    c0, l0 = cpu_s(node.pid), lines(node.request_log)
    worker = threading.Thread(target=during, daemon=True) if during else None
    if worker:
        worker.start()
    sent = load(cluster_state.bootstrap, topic, seconds, rate)
    if worker:
        worker.join()
    time.sleep(1)
    used, written = cpu_s(node.pid) - c0, lines(node.request_log) - l0
    served = requests_served(jmx) - r0
    row = {"policy": name, "sent": served, "broker_cpu_s": used, "lines": written}
    print(
        f"  {name:10s} requests served {served:7.0f} (produce msgs {sent})  broker CPU {used:6.2f} s  "
        f"request-log lines {written:7d}",
        flush=True,
    )
    return row


def run_cluster(root: Path, filter_yaml: str, phases, seconds: float, rate: int) -> list[dict]:
    spec = ClusterSpec(
        brokers=1, root=root, base_port=find_free_base_port(1, start=52000), request_filter_yaml=filter_yaml
    )
    cluster = LocalCluster(spec)
    state = cluster.up()
    try:
        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
        switch = BrokerLoggerSwitch(admin, [state.nodes[0].node_id], idle_level="WARN")
        topic = "capture-bench"
        load(state.bootstrap, topic, 3, rate)  # warm-up: topic, JIT, group
        rows = []
        for name, level, windows in phases:
            switch.set_level(level)
            during = None
            if windows:

                def during(switch=switch) -> None:
                    for _ in range(int(seconds // 10)):
                        time.sleep(7.5)
                        with switch.window(level="DEBUG"):
                            time.sleep(2.5)

            rows.append(phase(name, state, admin, topic, seconds, rate, during))
        admin.close()
        return rows
    finally:
        cluster.down()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rate", type=int, default=400)
    ap.add_argument("--slow-ms", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print("cluster A: plain request appender", flush=True)
        a = run_cluster(
            Path(tmp) / "a",
            "",
            [("off", "WARN", False), ("always", "DEBUG", False), ("windows", "WARN", True)],
            args.seconds,
            args.rate,
        )
        print(f"cluster B: slow-only RegexFilter (totalTimeMs >= {args.slow_ms})", flush=True)
        b = run_cluster(
            Path(tmp) / "b",
            slow_only_filter_yaml(args.slow_ms),
            [("off", "WARN", False), ("slow_only", "DEBUG", False)],
            args.seconds,
            args.rate,
        )
    for rows in (a, b):
        base = rows[0]["broker_cpu_s"]
        for r in rows[1:]:
            print(
                f"  {r['policy']:10s} costs {r['broker_cpu_s'] - base:+.2f} CPU-s ({(r['broker_cpu_s'] / base - 1) * 100:+.0f} %) vs off in the same cluster"
            )


if __name__ == "__main__":
    main()
