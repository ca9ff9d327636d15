"""What each request-log capture policy costs the broker: broker JVM CPU per 1,000 requests.

    .venv/bin/python bench/agent_capture_cost.py [--rounds 6] [--slice-seconds 10] [--rate 400]

Two real 1-node Kafka clusters: A with the stock request appender, B with the slow-only log4j2
``RegexFilter`` on it (``--slow-ms``; a log4j2 filter is part of the broker's logging config, so
it needs its own broker). On each, a Java client (bench/java/RequestLoad.java, compiled on the
fly against the broker's own kafka-clients jar) drives one steady load for the whole
measurement — ``--producers`` connections sending acks=1 Produce requests at ``--rate``
records/s in all, and a consumer on the same partitions whose fetches are answered as data
arrives — while the policy is switched slice by slice (``--slice-seconds`` each) through the
``BROKER_LOGGER`` dynamic config, in rounds, the order rotated every round. Per slice: the
broker JVM's CPU time (utime+stime of /proc/<pid>/stat), the requests it served (JMX
RequestMetrics counts: Produce, FetchConsumer, FetchFollower) and the bytes the request log grew
by. Policies:

* ``off``        kafka.request.logger at WARN (request logging off): the baseline, on A and on B;
* ``always``     A, logger at DEBUG (every request logged);
* ``windows``    A, DEBUG for the first quarter of the slice (a bounded capture window switched
                 on and off through BROKER_LOGGER by agent.capture.BrokerLoggerSwitch), WARN after;
* ``slow_only``  B, logger at DEBUG, the RegexFilter writing only requests >= ``--slow-ms``.

Slices of one round are seconds apart under the same load, so a policy is compared with the
``off`` slice of its own round (paired difference); the table gives medians over the rounds.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _kit import process_cpu_s  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from agent.capture import BrokerLoggerSwitch, slow_only_filter_yaml
from agent.jmx.collector import JMX_REQUESTS, JolokiaReader, stage_mbean
from linkwatch.errors import SetupError
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
    c0, t0 = process_cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return (process_cpu_s(pid) - c0) / (time.monotonic() - t0)


def counters(target: Target) -> tuple[float, float, int, float]:
    return (
        requests_served(target.jmx),
        process_cpu_s(target.state.nodes[0].pid),
        log_bytes(target.state),
        time.monotonic(),
    )


def run_slice(target: Target, policy: str, seconds: float, idle: float, round_no: int) -> dict:
    if policy == "windows":
        with target.switch.window(level="DEBUG"):
            r0, c0, b0, t0 = counters(target)
            time.sleep(seconds / 4)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
    else:
        target.switch.set_level("DEBUG" if policy in ("always", "slow_only") else "WARN")
        r0, c0, b0, t0 = counters(target)
        time.sleep(seconds)
    r1, c1, b1, t1 = counters(target)
    served, used = max(r1 - r0, 1.0), c1 - c0
    row = {
        "round": round_no,
        "policy": policy,
        "cluster": target.name,
        "req_per_s": served / (t1 - t0),
        "cpu_ms_per_1k": 1e6 * used / served,
        # minus the background CPU the broker used with no load
        "net_ms_per_1k": 1e6 * (used - idle * (t1 - t0)) / served,
        "log_mb": (b1 - b0) / 1e6,
    }
    print(
        f"  {target.name}:{policy:9s} {row['req_per_s']:6.0f} req/s  broker CPU {used:5.2f} s = "
        f"{row['cpu_ms_per_1k']:5.1f} CPU-ms/1k requests ({row['net_ms_per_1k']:5.1f} net of idle)  "
        f"request log +{row['log_mb']:5.2f} MB",
        flush=True,
    )
    return row


def measure(target: Target, policies: list[str], args: argparse.Namespace, classpath: str) -> list[dict]:
    idle = idle_cpu_per_s(target, args.idle_seconds)
    print(f"cluster {target.name}: idle broker CPU {idle * 1000:.0f} ms/s", flush=True)
    # generous: JVM start-up on a loaded machine is slow; stopped as soon as the slices are done
    seconds = args.warmup_seconds + args.rounds * len(policies) * args.slice_seconds + 300
    load = subprocess.Popen(
        [
            "java",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-cp",
            classpath,
            "RequestLoad",
            target.state.bootstrap,
            TOPIC,
            str(seconds),
            str(args.rate),
            str(args.producers),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    rows: list[dict] = []
    try:
        ready, _, _ = select.select([load.stdout], [], [], 180)
        if not ready or load.stdout.readline().strip() != "ready":
            sys.exit("the load generator did not get a produce acknowledged within 180 s")
        target.switch.set_level("DEBUG")  # warm the broker's logging path too (JIT)
        time.sleep(args.warmup_seconds)
        for k in range(args.rounds):
            order = policies[k % len(policies) :] + policies[: k % len(policies)]
            for policy in order:
                rows.append(run_slice(target, policy, args.slice_seconds, idle, k))
    finally:
        if load.poll() is None:
            load.kill()
            load.wait()
    return rows


def summary(rows: list[dict], cluster: str, policies: list[str]) -> None:
    mine = [r for r in rows if r["cluster"] == cluster]
    off = {r["round"]: r for r in mine if r["policy"] == "off"}
    for policy in policies:
        got = [r for r in mine if r["policy"] == policy]
        med = {
            k: statistics.median(r[k] for r in got)
            for k in ("req_per_s", "cpu_ms_per_1k", "net_ms_per_1k", "log_mb")
        }
        line = (
            f"  {policy:9s} ({cluster}) {med['req_per_s']:5.0f} req/s  {med['cpu_ms_per_1k']:5.1f} CPU-ms/1k requests "
            f"(net of idle {med['net_ms_per_1k']:5.1f})  request log {med['log_mb'] / 1:5.2f} MB/slice"
        )
        if policy != "off":
            diffs = [r["cpu_ms_per_1k"] - off[r["round"]]["cpu_ms_per_1k"] for r in got]
            rel = [100 * d / off[r["round"]]["cpu_ms_per_1k"] for d, r in zip(diffs, got, strict=True)]
            line += (
                f"  vs off, paired by round: {statistics.median(diffs):+5.1f} CPU-ms/1k "
                f"({statistics.median(rel):+4.1f} %; rounds {min(rel):+.0f}..{max(rel):+.0f} %)"
            )
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--slice-seconds", type=float, default=10)
    ap.add_argument("--rate", type=int, default=400, help="produce records/s (fetches follow)")
    ap.add_argument(
        "--producers", type=int, default=8, help="producer connections, one request in flight each"
    )
    ap.add_argument("--slow-ms", type=int, default=50)
    ap.add_argument("--idle-seconds", type=float, default=8)
    ap.add_argument("--warmup-seconds", type=float, default=60, help="unmeasured load first (JIT)")
    ap.add_argument("--clusters", default="AB", help="A (off/always/windows), B (off/slow_only) or AB")
    args = ap.parse_args()
    # A TERM (e.g. timeout) unwinds like Ctrl-C, so the brokers are always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    plan = {"A": ["off", "always", "windows"], "B": ["off", "slow_only"]}
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        classpath = compile_load(Path(tmp) / "classes")
        for name, filter_yaml, port in (("A", "", 52000), ("B", slow_only_filter_yaml(args.slow_ms), 53000)):
            if name not in args.clusters:
                continue
            try:
                target = start(name, Path(tmp) / name, filter_yaml, port, args.producers)
            except SetupError as e:  # e.g. a port taken meanwhile on the shared machine: once more
                print(f"cluster {name} did not start ({e}); retrying on other ports", flush=True)
                target = start(name, Path(tmp) / f"{name}2", filter_yaml, port + 500, args.producers)
            try:
                rows += measure(target, plan[name], args, classpath)
            finally:
                target.admin.close()
                target.cluster.down()
            print(
                f"cluster {name}: medians of {args.rounds} rounds of {args.slice_seconds:.0f} s slices, {args.rate} "
                f"produce records/s from {args.producers} producers (slow-only threshold {args.slow_ms} ms):",
                flush=True,
            )
            summary(rows, name, plan[name])


if __name__ == "__main__":
    main()
