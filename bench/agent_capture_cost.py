"""What each request-log capture policy costs the broker: broker JVM CPU per 1,000 requests.

    .venv/bin/python bench/agent_capture_cost.py [--rounds 3] [--seconds 20] [--rate 400]

Two real 1-node Kafka clusters run side by side for the whole run: A with the stock request
appender, B with the slow-only log4j2 ``RegexFilter`` on it (``--slow-ms``; a log4j2 filter is
part of the broker's logging config, so it needs its own broker). Each phase drives the same
fixed request rate at one of them — a Java client (bench/java/RequestLoad.java, compiled on the
fly against the broker's own kafka-clients jar) sending one acks=1 Produce request per record at
``--rate`` records/s, and a consumer on the same partition whose fetches are answered as data
arrives — and reads the broker JVM's CPU time (utime+stime of /proc/<pid>/stat), the requests it
served (JMX RequestMetrics counts: Produce, FetchConsumer, FetchFollower) and the bytes the
request log grew by. Policies:

* ``off``        kafka.request.logger at WARN (request logging off): the baseline, on A and on B;
* ``always``     A, logger at DEBUG (every request logged);
* ``windows``    A, logger at WARN, switched to DEBUG for 2.5 s of every 10 s through the
                 ``BROKER_LOGGER`` dynamic config (agent.capture.BrokerLoggerSwitch);
* ``slow_only``  B, logger at DEBUG, the RegexFilter writing only requests >= ``--slow-ms``.

Phases are interleaved round by round (order rotated each round) so load drift on the shared
machine hits every policy alike; the table gives medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from agent.capture import BrokerLoggerSwitch, slow_only_filter_yaml
from agent.jmx.collector import JMX_REQUESTS, JolokiaReader, stage_mbean
from linkwatch.testbed import jars
from linkwatch.testbed.cluster import (
    ClusterSpec,
    ClusterState,
    LocalCluster,
    find_free_base_port,
    iter_request_log_files,
)

LOAD_SRC = Path(__file__).resolve().parent / "java" / "RequestLoad.java"
TOPIC = "capture-bench"
WARMUP_S = 4.0  # load JVM start, connections, metadata: not measured


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log_bytes(state: ClusterState) -> int:
    return sum(p.stat().st_size for p in iter_request_log_files(state.nodes[0]))


def requests_served(jmx: JolokiaReader) -> float:
    snap = jmx.read()
    return sum(snap.get((stage_mbean("TotalTimeMs", r), "Count"), 0.0) for r in JMX_REQUESTS)


@dataclass
class Target:
    name: str
    cluster: LocalCluster
    state: ClusterState
    admin: KafkaAdminClient
    switch: BrokerLoggerSwitch
    jmx: JolokiaReader


def start(name: str, root: Path, filter_yaml: str, start_port: int, partitions: int) -> Target:
    spec = ClusterSpec(
        brokers=1,
        root=root,
        base_port=find_free_base_port(1, start=start_port),
        request_filter_yaml=filter_yaml,
        request_log_level="WARN",
    )
    cluster = LocalCluster(spec)
    state = cluster.up()
    admin = KafkaAdminClient(bootstrap_servers=state.bootstrap)
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])
    switch = BrokerLoggerSwitch(admin, [state.nodes[0].node_id], idle_level="WARN")
    return Target(
        name, cluster, state, admin, switch, JolokiaReader(state.nodes[0].jolokia_url, timeout_s=30)
    )


def compile_load(out: Path) -> str:
    """Compile RequestLoad.java against the broker's kafka-clients; returns the classpath."""
    classpath = jars.resolve().classpath
    javac = shutil.which("javac")
    if javac is None:
        sys.exit("javac (a JDK) is needed to build the load generator")
    subprocess.run([javac, "-d", str(out), "-cp", classpath, str(LOAD_SRC)], check=True)
    return f"{out}{os.pathsep}{classpath}"


def idle_cpu_per_s(target: Target, seconds: float) -> float:
    """The broker's background CPU (KRaft, heartbeats, ...) per second, with no client load."""
    target.switch.set_level("WARN")
    pid = target.state.nodes[0].pid
    c0, t0 = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.monotonic() - t0)


def run_phase(
    target: Target, policy: str, seconds: float, rate: int, producers: int, classpath: str, idle: float
) -> dict:
    target.switch.set_level("DEBUG" if policy in ("always", "slow_only") else "WARN")
    load = subprocess.Popen(
        [
            "java",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            classpath,
            "RequestLoad",
            target.state.bootstrap,
            TOPIC,
            str(WARMUP_S + seconds + 1),
            str(rate),
            str(producers),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        time.sleep(WARMUP_S)
        pid = target.state.nodes[0].pid
        r0, c0, b0, t0 = requests_served(target.jmx), cpu_s(pid), log_bytes(target.state), time.monotonic()
        stop = threading.Event()
        switcher = None
        if policy == "windows":

            def windows() -> None:
                while not stop.is_set():
                    with target.switch.window(level="DEBUG"):
                        stop.wait(2.5)
                    stop.wait(7.5)

            switcher = threading.Thread(target=windows, daemon=True)
            switcher.start()
        time.sleep(seconds)
        stop.set()
        if switcher is not None:
            switcher.join()
        r1, c1, b1, t1 = requests_served(target.jmx), cpu_s(pid), log_bytes(target.state), time.monotonic()
        out, _ = load.communicate(timeout=60)
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
    served, used = max(r1 - r0, 1.0), c1 - c0
    row = {
        "policy": policy,
        "cluster": target.name,
        "req_per_s": served / (t1 - t0),
        "cpu_s": used,
        "cpu_ms_per_1k": 1e6 * used / served,
        # minus the background CPU the broker used with no load, measured in the same round
        "net_ms_per_1k": 1e6 * (used - idle * (t1 - t0)) / served,
        "log_mb": (b1 - b0) / 1e6,
        "load": out.strip(),
    }
    print(
        f"  {target.name}:{policy:9s} {row['req_per_s']:6.0f} req/s  broker CPU {used:5.2f} s = "
        f"{row['cpu_ms_per_1k']:5.1f} CPU-ms/1k requests ({row['net_ms_per_1k']:5.1f} net of idle "
        f"{idle * 1000:.0f} ms/s)  request log +{row['log_mb']:6.2f} MB  [{row['load']}]",
        flush=True,
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rate", type=int, default=400, help="produce records/s (fetches follow)")
    ap.add_argument(
        "--producers", type=int, default=8, help="producer connections, one request in flight each"
    )
    ap.add_argument("--idle-seconds", type=float, default=8)
    ap.add_argument("--warmup-seconds", type=float, default=20, help="unmeasured load first (JIT)")
    ap.add_argument("--slow-ms", type=int, default=50)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        classpath = compile_load(Path(tmp) / "classes")
        targets: dict[str, Target] = {}
        try:
            targets["A"] = start("A", Path(tmp) / "a", "", 52000, args.producers)
            targets["B"] = start(
                "B", Path(tmp) / "b", slow_only_filter_yaml(args.slow_ms), 53000, args.producers
            )
            phases = [("A", "off"), ("A", "always"), ("A", "windows"), ("B", "off"), ("B", "slow_only")]
            print(
                f"warm-up: {args.warmup_seconds:.0f} s of load at DEBUG on each broker (not counted)",
                flush=True,
            )
            for t in targets.values():
                run_phase(t, "always", args.warmup_seconds, args.rate, args.producers, classpath, 0.0)
            rows: list[dict] = []
            for k in range(args.rounds):
                print(f"round {k + 1} of {args.rounds}", flush=True)
                idle = {name: idle_cpu_per_s(t, args.idle_seconds) for name, t in targets.items()}
                order = phases[k % len(phases) :] + phases[: k % len(phases)]
                for cluster, policy in order:
                    rows.append(
                        run_phase(
                            targets[cluster],
                            policy,
                            args.seconds,
                            args.rate,
                            args.producers,
                            classpath,
                            idle[cluster],
                        )
                    )
        finally:
            for t in targets.values():
                t.admin.close()
                t.cluster.down()
    print(
        f"\nmedians of {args.rounds} rounds, {args.seconds:.0f} s each, {args.rate} produce records/s from "
        f"{args.producers} producers (slow-only threshold {args.slow_ms} ms):"
    )
    keys = ("req_per_s", "cpu_ms_per_1k", "net_ms_per_1k", "log_mb")
    med = {
        (c, p): {
            k: statistics.median(r[k] for r in rows if (r["cluster"], r["policy"]) == (c, p)) for k in keys
        }
        for c, p in phases
    }
    for (cluster, policy), m in med.items():
        base = med[(cluster, "off")]
        extra = ""
        if policy != "off":
            d, dn = m["cpu_ms_per_1k"] - base["cpu_ms_per_1k"], m["net_ms_per_1k"] - base["net_ms_per_1k"]
            extra = (
                f"  vs off on {cluster}: {d:+5.1f} CPU-ms/1k ({100 * d / base['cpu_ms_per_1k']:+3.0f} %), "
                f"net {dn:+5.1f} ({100 * dn / base['net_ms_per_1k']:+3.0f} %)"
            )
        print(
            f"  {policy:9s} ({cluster}) {m['req_per_s']:5.0f} req/s  {m['cpu_ms_per_1k']:5.1f} CPU-ms/1k requests, "
            f"net of idle {m['net_ms_per_1k']:5.1f}  log +{m['log_mb']:5.2f} MB/phase{extra}"
        )


if __name__ == "__main__":
    main()
