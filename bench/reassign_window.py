"""Reassignment with one slow mover: rebalance_disks' sliding window against fixed batches.

On a local 3-broker cluster: a topic with one replica per partition on broker 1 — one large
partition (the slow mover) and many small ones — moved off broker 1 (the large one to broker 3,
the small ones to broker 2) with the same replication throttle, the same concurrency and the
same polling, by

* ``window``: the product's executor (:meth:`RebalanceDisksRemediation.execute_plan`): a slot
  refills the moment one move completes;
* ``batches``: a baseline defined here with the product's own primitives (start, verify,
  throttle): ``window`` moves at a time, the next batch only when the whole batch is done —
  how a reassignment tool that submits batches behaves (KIP-236's complaint).

Rounds alternate between the two on fresh topics; the median total time of each is printed.

    python bench/reassign_window.py --rounds 3 --small 20 --big-mb 16 --throttle-mb 2 --window 2

Run it alone: ``../shared/bin/quiet -- .venv/bin/python bench/reassign_window.py``.
``--cluster-dir DIR`` uses a running 3-broker ``linkwatch cluster up`` cluster instead of
starting one; ``--smoke`` is a size that runs in seconds (one round, 2 small moves, a 1 MB mover).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from remediation.base import Context, Plan, Step
from remediation.config import load_remediation_config
from remediation.rebalance import RebalanceDisksRemediation
from remediation.remediator import Remediator
from remediation.view import read_view
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port


class BatchRebalance(RebalanceDisksRemediation):
    """The baseline: fixed batches of ``window`` moves (same start, verify and throttle)."""

    def execute_plan(self, plan: Plan, ctx: Context) -> str:
        steps = list(enumerate(plan.steps))
        size = self.config.window
        for at in range(0, len(steps), size):
            batch = steps[at : at + size]
            view = ctx.view()
            for n, (i, step) in enumerate(batch):
                self._start(plan, i, step, ctx, view, [j for j, _ in batch[:n]])
            pending = dict(batch)
            while pending:
                ctx.sleep(self.config.poll_s)
                view = ctx.view()
                for i, step in list(pending.items()):
                    if self.verify(step, view):
                        pending.pop(i)
                        ctx.step_status(i, "done")
        return "done"


def make_topic(
    admin: KafkaAdminClient, bootstrap: str, name: str, small: int, small_kb: int, big_mb: int
) -> None:
    admin.create_topics([NewTopic(name, -1, -1, replica_assignments={p: [1] for p in range(small + 1)})])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        meta = admin.describe_topics([name])
        if meta and len(meta[0].get("partitions") or []) == small + 1:
            break
        time.sleep(0.5)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    chunk = b"x" * 8192
    for p in range(small + 1):
        total = big_mb * 1024 * 1024 if p == 0 else small_kb * 1024
        for _ in range(total // len(chunk)):
            producer.send(name, chunk, partition=p)
    producer.flush()
    producer.close()


def plan_for(admin: KafkaAdminClient, topic: str, small: int, deadline_s: float) -> Plan:
    view = read_view(admin, [topic])
    dirs = {d.broker: d.path for d in view.log_dirs}
    src = dirs[1]
    steps = []
    for p in range(small + 1):
        dst = 3 if p == 0 else 2
        params: dict[str, Any] = {
            "topic": topic,
            "partition": p,
            "size_bytes": 0,
            "src": [1, src],
            "dst": [dst, dirs[dst]],
            "before": [1],
            "after": [dst],
        }
        steps.append(Step("move", f"topic-partition:{topic}-{p}", params, deadline_s))
    return Plan(RebalanceDisksRemediation.NAME, "log_dir:1", "bench: one slow mover first", tuple(steps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--small", type=int, default=20, help="small partitions moved beside the slow one")
    ap.add_argument("--small-kb", type=int, default=128)
    ap.add_argument("--big-mb", type=int, default=16)
    ap.add_argument("--throttle-mb", type=float, default=2.0, help="replication throttle, MB/s")
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--poll-s", type=float, default=0.2)
    ap.add_argument(
        "--cluster-dir", type=Path, help="a running 3-broker testbed cluster (else one is started)"
    )
    ap.add_argument("--smoke", action="store_true", help="a size that runs in seconds")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.small, args.small_kb, args.big_mb, args.throttle_mb = 1, 2, 16, 1, 8.0

    root = Path(tempfile.mkdtemp(prefix="linkwatch-bench-reassign-"))
    cluster = None
    if args.cluster_dir is None:
        cluster = LocalCluster(
            ClusterSpec(brokers=3, root=root / "cluster", base_port=find_free_base_port(3, start=19500))
        )
    times: dict[str, list[float]] = {"window": [], "batches": []}
    try:
        state = cluster.up() if cluster is not None else ClusterState.load(args.cluster_dir)
        if state is None:
            raise SystemExit(f"no cluster state under {args.cluster_dir}")
        admin = KafkaAdminClient(bootstrap_servers=state.bootstrap, client_id="bench-reassign")
        cfg_path = root / "remediation.yaml"
        cfg_path.write_text(
            yaml.safe_dump(
                {
                    "cluster": "bench",
                    "bootstrap_servers": state.bootstrap,
                    "execute": True,
                    "state_dir": str(root / "state"),
                    "lease": {"enabled": False},
                    "rules": {"hot_disk": "rebalance_disks"},
                    "remediations": {
                        "rebalance_disks": {
                            "window": args.window,
                            "throttle_bytes_per_s": int(args.throttle_mb * 1024 * 1024),
                            "poll_s": args.poll_s,
                            "allow_intra_broker": False,
                        }
                    },
                }
            )
        )
        rem = Remediator(load_remediation_config(cfg_path), admin)
        window = rem.remediations[RebalanceDisksRemediation.NAME]
        batches = BatchRebalance(window.config)
        for r in range(args.rounds):
            for mode, impl in (
                (("window", window), ("batches", batches))
                if r % 2 == 0
                else (
                    ("batches", batches),
                    ("window", window),
                )
            ):
                topic = f"moves-{r}-{mode}-{root.name[-6:]}"
                make_topic(admin, state.bootstrap, topic, args.small, args.small_kb, args.big_mb)
                plan = plan_for(admin, topic, args.small, deadline_s=600)
                t0 = time.monotonic()
                result = rem.run_plan(impl, plan, key=f"bench:{topic}")
                took = time.monotonic() - t0
                if result.get("status") != "done":
                    raise SystemExit(f"{mode} round {r + 1} ended {result}")
                times[mode].append(took)
                print(f"round {r + 1} {mode:>7}: {len(plan.steps)} moves in {took:.1f} s", flush=True)
                admin.delete_topics([topic])
        admin.close()
    finally:
        if cluster is not None:
            cluster.down()
        shutil.rmtree(root, ignore_errors=True)
    w, b = statistics.median(times["window"]), statistics.median(times["batches"])
    print(
        f"\n{args.small + 1} moves ({args.big_mb} MB slow mover first, {args.small} x {args.small_kb} KB), "
        f"concurrency {args.window}, throttle {args.throttle_mb:g} MB/s, median of {args.rounds}:"
    )
    print(f"  sliding window {w:.1f} s   fixed batches {b:.1f} s   speed-up {b / w:.2f}x")


if __name__ == "__main__":
    main()
