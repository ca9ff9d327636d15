"""How long the remediator waits for the lease's lock while the lease thread keeps its membership.

The holder's main thread asks the lease for its commands and its command position on every state
write and every tick (``KafkaLease.commands`` / ``command_position``); the lease thread polls its
group consumer under the same lock (KafkaConsumer is not thread-safe). Per variant, a fresh lease
on the cluster is taken, then for ``--seconds`` the main thread calls both every 10 ms and each
call's wait is timed; the lease is sampled ``held`` throughout (the turn must keep the member in
the group).

* ``product``: the lease as shipped (``POLL_MS`` under the lock, then ``IDLE_S`` without it);
* ``baseline``: the lease before (a 200 ms poll under the lock, re-taken at once), the same code
  with those two settings.

    python bench/lease_lock.py [--bootstrap HOST:PORT] [--seconds 10] [--rounds 3]

Without ``--bootstrap`` it starts a 3-broker cluster of its own on loopback (and stops it).

Run it alone: ``../shared/bin/quiet -- .venv/bin/python bench/lease_lock.py``.
``--smoke``: one round of 2 s per variant (the suite's run; its figures are not a measurement).
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from _kit import bootstrap_or_own_cluster  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient

import remediation.lease as lease_mod
from remediation.config import LeaseConfig
from remediation.lease import KafkaLease, ensure_lease_topic

VARIANTS = {
    "product": (lease_mod.POLL_MS, lease_mod.IDLE_S),
    "baseline": (200, 0.0),
}


def one(bootstrap: str, admin: KafkaAdminClient, poll_ms: int, idle_s: float, seconds: float) -> dict:
    """One lease with the thread's turn set to (poll_ms, idle_s): the main thread's waits."""
    lease_mod.POLL_MS, lease_mod.IDLE_S = poll_ms, idle_s
    name = f"bench-lease-{uuid.uuid4().hex[:8]}"
    cfg = LeaseConfig(topic=name, group=f"{name}-g", state_topic=f"{name}-state")
    ensure_lease_topic(admin, cfg.topic)
    lease = KafkaLease(bootstrap, cfg, "bench")
    try:
        if not lease.wait(60):
            raise SystemExit(f"the lease was never held: {lease.describe()}")
        waits: list[float] = []
        held: list[bool] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.monotonic()
            lease.commands()
            lease.command_position()
            waits.append(time.monotonic() - started)
            held.append(lease.held())
            time.sleep(0.01)
    finally:
        lease.close()
        admin.delete_topics([cfg.topic])
    waits.sort()
    return {
        "calls_per_s": len(waits) / seconds,
        "median_ms": statistics.median(waits) * 1000,
        "p90_ms": waits[int(0.9 * (len(waits) - 1))] * 1000,
        "max_ms": waits[-1] * 1000,
        "held_share": sum(held) / len(held),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.seconds, args.rounds = 2.0, 1
    with bootstrap_or_own_cluster(args.bootstrap, "lease-bench-") as args.bootstrap:
        measure(args)


def measure(args: argparse.Namespace) -> None:
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    shipped = VARIANTS["product"]
    try:
        for r in range(args.rounds):
            # Alternate the order: neither variant always runs on the warmer cluster.
            order = list(VARIANTS) if r % 2 == 0 else list(reversed(VARIANTS))
            for v in order:
                got = one(args.bootstrap, admin, *VARIANTS[v], args.seconds)
                results[v].append(got)
                print(
                    f"round {r + 1} {v:8s}: {got['calls_per_s']:.0f} calls/s, wait median "
                    f"{got['median_ms']:.1f} ms, max {got['max_ms']:.1f} ms, held {got['held_share']:.0%}"
                )
    finally:
        lease_mod.POLL_MS, lease_mod.IDLE_S = shipped
        admin.close()
    print(f"\nmedian of {args.rounds} round(s) of {args.seconds:.0f} s, a call every 10 ms:")
    print(
        f"{'variant':40s} {'calls/s':>8s} {'wait median ms':>15s} {'p90 ms':>8s} {'max ms':>8s} {'held':>6s}"
    )
    for v, (poll_ms, idle_s) in VARIANTS.items():
        rows = results[v]
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        label = f"{v} (poll {poll_ms} ms, idle {idle_s * 1000:.0f} ms)"
        print(
            f"{label:40s} {med['calls_per_s']:8.0f} {med['median_ms']:15.1f} {med['p90_ms']:8.1f} "
            f"{med['max_ms']:8.1f} {med['held_share']:6.0%}"
        )
    base = statistics.median(row["median_ms"] for row in results["baseline"])
    prod = statistics.median(row["median_ms"] for row in results["product"])
    print(f"median wait, baseline / product: {base:.1f} ms / {prod:.1f} ms")


if __name__ == "__main__":
    main()
