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
* ``slow_only``  B, logger at DEBUG, the RegexFilter writing only requests >= ``--slow-ms``;
* ``sampled``    A, the agent's sampled capture (agent.capture.CaptureScheduler with the config
                 defaults: one slice of 10 s / stride per 10 s window at a random offset); the
                 slice is aligned to the window boundaries so it covers whole windows.

And the sampled policy's accuracy on the same traffic: the ``always`` slices' request lines are
kept, and the p99 per (request type, stage) of all of them (the agent's sketch) is compared with
the p99 of only those the sampled policy would have logged, the slices drawn by the scheduler's
own planner (``--draws`` draws of the offsets).

Slices of one round are seconds apart under the same load, so a policy is compared with the
``off`` slice of its own round (paired difference); the table gives medians over the rounds.
"""

from __future__ import annotations

import argparse
import gzip
import os
import random
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

import orjson
from _kit import process_cpu_s  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from agent.capture import BrokerLoggerSwitch, CaptureScheduler, slow_only_filter_yaml
from agent.config import CaptureConfig, RequestLogConfig
from agent.jmx.collector import JMX_REQUESTS, JolokiaReader, stage_mbean
from agent.requestlog.follow import FileFollower
from agent.requestlog.parse import Drop, LineParser
from linkwatch.errors import SetupError
from linkwatch.records import STAGES
from linkwatch.sketch import LatencySketch
from testbed import jars
from testbed.cluster import (
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


def sampled_scheduler(target: Target | None, slices_per_window: int | None = None) -> CaptureScheduler:
    """The agent's sampled capture exactly as ``capture.policy: sampled`` runs it with the
    defaults of agent.config (window 10 s, stride from the 5 % budget and the 30 % cost estimate,
    up to 4 slices per window); ``target`` None: for planning only."""
    cap, window_s = CaptureConfig(policy="sampled", bootstrap_servers="-"), RequestLogConfig().window_s
    if slices_per_window is not None:
        cap = cap.model_copy(update={"slices_per_window": slices_per_window})
    return CaptureScheduler(
        target.switch if target is not None else None,
        window_s=window_s,
        cpu_budget_pct=cap.cpu_budget_pct,
        full_capture_cost_pct=cap.full_capture_cost_pct,
        max_lines_per_s=cap.max_lines_per_s,
        min_slice_s=cap.min_slice_s,
        slices_per_window=cap.slices_per_window,
    )


def read_stage_rows(follower: FileFollower) -> list[tuple[int, str, tuple[float, ...]]]:
    """(stamp ms, request type, stage times) of every request line written since the last read."""
    parser, rows = LineParser(), []
    for line in follower.read_lines(max_bytes=1 << 32):
        try:
            req = parser.parse(line)
        except Drop:
            continue
        rows.append((req.ts_ms, req.request, req.stages))
    return rows


def run_slice(
    target: Target, policy: str, seconds: float, idle: float, round_no: int, keep: list | None = None
) -> dict:
    """One measured slice; ``keep`` (``always`` slices): the slice's request lines go there."""
    follower = None
    if keep is not None:
        follower = FileFollower(target.state.nodes[0].request_log, start_at_end=True)
        follower.read_lines()
    if policy == "sampled":
        # The scheduler plans from the next window boundary: the slice starts there and covers
        # whole windows, so the realised duty cycle is the planned one.
        sched = sampled_scheduler(target).start()
        while not sched.captured():  # the first window it plans (the next one at least 100 ms away)
            time.sleep(0.01)
        time.sleep(max(0.0, sched.captured()[0].window_start_ms / 1000 - time.time()))
        r0, c0, b0, t0 = counters(target)
        time.sleep(seconds)
        r1, c1, b1, t1 = counters(target)
        sched.stop()
        stride = sched.stride
    elif policy == "windows":
        with target.switch.window(level="DEBUG"):
            r0, c0, b0, t0 = counters(target)
            time.sleep(seconds / 4)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
    else:
        target.switch.set_level("DEBUG" if policy in ("always", "slow_only") else "WARN")
        r0, c0, b0, t0 = counters(target)
        time.sleep(seconds)
    if policy != "sampled":
        r1, c1, b1, t1 = counters(target)
    if follower is not None:
        keep.append(read_stage_rows(follower))
        follower.close()
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
    if policy == "sampled":
        row["stride"] = stride
    print(
        f"  {target.name}:{policy:9s} {row['req_per_s']:6.0f} req/s  broker CPU {used:5.2f} s = "
        f"{row['cpu_ms_per_1k']:5.1f} CPU-ms/1k requests ({row['net_ms_per_1k']:5.1f} net of idle)  "
        f"request log +{row['log_mb']:5.2f} MB",
        flush=True,
    )
    return row


def measure(
    target: Target, policies: list[str], args: argparse.Namespace, classpath: str, full: list | None = None
) -> list[dict]:
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
                keep = full if policy == "always" else None
                rows.append(run_slice(target, policy, args.slice_seconds, idle, k, keep))
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


P99_REQUESTS = ("Produce", "FetchConsumer", "FetchFollower")
P99_STAGES = ("requestQueue", "local", "remote", "responseQueue", "send", "total")


def p99_by_stage(rows: list[tuple[int, str, tuple[float, ...]]]) -> dict[tuple[str, str], tuple[float, int]]:
    """(request, stage) -> (p99 from the agent's sketch, requests)."""
    sketches: dict[tuple[str, str], LatencySketch] = {}
    for _, request, stages in rows:
        for i, stage in enumerate(STAGES):
            if stage in P99_STAGES:
                sketches.setdefault((request, stage), LatencySketch()).add(stages[i])
    return {k: (sk.quantile(0.99) or 0.0, sk.count) for k, sk in sketches.items()}


def sampled_subset(slices: list[list], stride: int, seed: int, slices_per_window: int | None = None) -> list:
    """The lines the sampled policy would have logged out of full captures: per window, only
    those stamped inside the slices the scheduler's own planner draws (CaptureScheduler.plan)."""
    sched = sampled_scheduler(None, slices_per_window)
    sched.rng = random.Random(seed)
    window_ms, out = sched.window_s * 1000, []
    for rows in slices:
        plans: dict[int, list] = {}
        for row in rows:
            start = row[0] - row[0] % window_ms
            plan = plans.get(start) or plans.setdefault(start, sched.plan(start, stride))
            if any(sl.on_ms <= row[0] < sl.off_ms for sl in plan):
                out.append(row)
    return out


def p99_comparison(
    full: list[list], stride: int, draws: int, min_requests: int, slices_per_window: int | None = None
) -> None:
    """The sampled policy's p99 per stage against the full capture's, on the same traffic."""
    rows = [r for rs in full for r in rs]
    want = p99_by_stage(rows)
    keys = [k for k in sorted(want) if k[0] in P99_REQUESTS and want[k][1] >= min_requests and want[k][0] > 0]
    sched = sampled_scheduler(None, slices_per_window)
    window_s, n = sched.window_s, len(sched.plan(0, stride))
    rel: dict[tuple[str, str], list[float]] = {k: [] for k in keys}
    for seed in range(draws):
        got = p99_by_stage(sampled_subset(full, stride, seed, slices_per_window))
        for k in keys:
            rel[k].append(100 * (got.get(k, (0.0, 0))[0] - want[k][0]) / want[k][0])
    print(
        f"p99 per stage, sampled (stride {stride}: {n} slices of {window_s / stride / n:.2f} s per {window_s} s window) "
        f"against the full capture of the same traffic ({len(full)} always slices, {len(rows)} requests; "
        f"{draws} draws of the slice offsets):",
        flush=True,
    )
    worst = []
    for k in keys:
        med = statistics.median(abs(x) for x in rel[k])
        worst.append(med)
        print(
            f"  {k[0]:13s} {k[1]:13s} full p99 {want[k][0]:8.2f} ms ({want[k][1]:6d} req)  sampled: median |diff| "
            f"{med:4.1f} %, draws {min(rel[k]):+5.1f}..{max(rel[k]):+5.1f} %",
            flush=True,
        )
    if worst:
        print(f"  largest median |diff| over the stages: {max(worst):.1f} % (target 5 %)", flush=True)


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
    ap.add_argument("--clusters", default="A", help="A (--policies-a), B (off/slow_only) or AB")
    ap.add_argument(
        "--policies-a",
        default="off,always,sampled",
        help="cluster A's policies, comma-separated, from off, always, windows, sampled",
    )
    ap.add_argument("--draws", type=int, default=20, help="slice-offset draws for the p99 comparison")
    ap.add_argument("--min-requests", type=int, default=2000, help="stages with fewer are not compared")
    ap.add_argument("--save-full", type=Path, help="write the always slices' request rows here (.json.gz)")
    ap.add_argument(
        "--p99-from",
        type=Path,
        help="no brokers: only the p99 comparison, on rows saved by --save-full (at --stride, "
        "for each of --slices-per-window)",
    )
    ap.add_argument("--stride", type=int, default=4)
    ap.add_argument("--slices-per-window", default="", help="comma-separated, with --p99-from")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a size that runs in about a minute (cluster A, off and always, 1 round of 2 s slices)",
    )
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.slice_seconds, args.idle_seconds, args.warmup_seconds = 1, 2.0, 1.0, 2.0
        args.rate, args.producers, args.clusters, args.policies_a = 100, 2, "A", "off,always"
        args.draws, args.min_requests = 2, 10
    if args.p99_from:
        full = orjson.loads(gzip.decompress(args.p99_from.read_bytes()))
        for n in [int(x) for x in args.slices_per_window.split(",") if x] or [None]:
            p99_comparison(full, args.stride, args.draws, args.min_requests, n)
        return
    # A TERM (e.g. timeout) unwinds like Ctrl-C, so the brokers are always stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)
    plan = {"A": args.policies_a.split(","), "B": ["off", "slow_only"]}
    rows: list[dict] = []
    full: list[list] = []
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
                rows += measure(target, plan[name], args, classpath, full if name == "A" else None)
            finally:
                target.admin.close()
                target.cluster.down()
            print(
                f"cluster {name}: medians of {args.rounds} rounds of {args.slice_seconds:.0f} s slices, {args.rate} "
                f"produce records/s from {args.producers} producers (slow-only threshold {args.slow_ms} ms):",
                flush=True,
            )
            summary(rows, name, plan[name])
            strides = [r["stride"] for r in rows if r.get("stride")]
            if name == "A" and full and args.save_full:
                args.save_full.write_bytes(gzip.compress(orjson.dumps(full)))
            if name == "A" and full and strides:
                p99_comparison(full, statistics.median_low(strides), args.draws, args.min_requests)


if __name__ == "__main__":
    main()
