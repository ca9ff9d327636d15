"""Whether a standby joining the remediation lease's group leaves the live holder holding it.

Per handover: a fresh lease topic and group on the cluster, member ``a`` takes the lease, member
``b`` (the standby) joins; for ``--watch-s`` seconds both are sampled every 50 ms, then ``a``
closes and the time until ``b`` holds is measured. Figures per variant:

* ``never``: handovers in which the first member did not hold the lease within
  ``HOLD_WITHIN_S`` of joining (the baseline's join races can leave it so for good; the product
  must not). Such a handover has no watch and is left out of the other figures;
* ``taken``: handovers after which the standby held the lease while the holder was alive (the
  holder lost it to a rebalance it should have kept by the sticky assignment);
* ``holder without``: seconds, within the watch, the live holder did not hold the lease;
* ``generation``: the group's generation at the end of the watch (1 for the holder's join, one
  more per rebalance: 2 is the standby's join alone);
* ``both``: samples in which both members held it (must be 0 in every variant: the fencing);
* ``handover``: seconds from the holder's close to the standby holding.

Variants:

* ``product``: the lease as shipped;
* ``baseline``: the same lease with kafka-python 3.0.12's group join as it is, without
  :func:`consumer.kafka_compat.steady_group_join` (its three join races left alone).

    python bench/lease_handover.py [--bootstrap HOST:PORT] [--handovers 12] [--watch-s 8]

Without ``--bootstrap`` it starts a 3-broker cluster of its own on loopback (and stops it).

Run it alone: ``../shared/bin/quiet -- .venv/bin/python bench/lease_handover.py``.
``--smoke``: one handover of 3 s per variant (the suite's run; its figures are not a measurement).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import uuid
from collections.abc import Iterator

from _kit import bootstrap_or_own_cluster  # bench/ is on sys.path (run as a script)
from kafka import KafkaAdminClient

from consumer import kafka_compat
from remediation.config import LeaseConfig
from remediation.lease import KafkaLease, ensure_lease_topic

VARIANTS = ("product", "baseline")
SAMPLE_S = 0.05
HOLD_WITHIN_S = 60.0  # ten sessions: a join that has not ended by then will not end by itself


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """The baseline runs with the join workaround switched off, in this process only."""
    shipped = kafka_compat.steady_group_join
    if name == "baseline":
        kafka_compat.steady_group_join = lambda consumer, join_wait_ms: None
    try:
        yield
    finally:
        kafka_compat.steady_group_join = shipped


def handover(bootstrap: str, admin: KafkaAdminClient, watch_s: float) -> dict:
    name = f"bench-handover-{uuid.uuid4().hex[:8]}"
    cfg = LeaseConfig(topic=name, group=f"{name}-g", state_topic=f"{name}-state", session_timeout_ms=6000)
    ensure_lease_topic(admin, cfg.topic)
    holder = KafkaLease(bootstrap, cfg, "a")
    standby: KafkaLease | None = None
    try:
        if not holder.wait(HOLD_WITHIN_S):
            return {"never": holder.describe()}
        standby = KafkaLease(bootstrap, cfg, "b")
        without = both = 0
        deadline = time.monotonic() + watch_s
        while time.monotonic() < deadline:
            a, b = holder.held(), standby.held()
            without += not a
            both += a and b
            time.sleep(SAMPLE_S)
        taken = standby.held() and not holder.held()
        generation = holder.group_metadata().generation_id
        closed = time.monotonic()
        holder.close()
        while time.monotonic() - closed < 30 and not standby.held():
            time.sleep(SAMPLE_S)
        return {
            "taken": taken,
            "without_s": without * SAMPLE_S,
            "generation": generation,
            "both": both,
            "handover_s": time.monotonic() - closed if standby.held() else float("inf"),
        }
    finally:
        holder.close()
        if standby is not None:
            standby.close()
        with contextlib.suppress(Exception):
            admin.delete_topics([cfg.topic])


def measure(args: argparse.Namespace) -> None:
    admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    results: dict[str, list[dict]] = {v: [] for v in VARIANTS}
    try:
        for i in range(args.handovers):
            # Alternate the order: neither variant always runs on the warmer cluster.
            for v in VARIANTS if i % 2 == 0 else tuple(reversed(VARIANTS)):
                with variant(v):
                    got = handover(args.bootstrap, admin, args.watch_s)
                results[v].append(got)
                if "never" in got:
                    print(
                        f"handover {i + 1} {v:8s}: never held within {HOLD_WITHIN_S:.0f} s: {got['never']}",
                        flush=True,
                    )
                    continue
                print(
                    f"handover {i + 1} {v:8s}: taken={got['taken']} holder without {got['without_s']:.2f} s, "
                    f"generation {got['generation']}, both {got['both']}, handover {got['handover_s']:.1f} s",
                    flush=True,
                )
    finally:
        admin.close()
    print(f"\n{args.handovers} handover(s) per variant, each watched {args.watch_s:.0f} s:")
    print(
        f"{'variant':10s} {'taken':>7s} {'never':>5s} {'without median s':>17s} {'max s':>7s} "
        f"{'generation median':>18s} {'max':>5s} {'both':>5s} {'handover median s':>18s}"
    )
    never = {v: sum("never" in r for r in results[v]) for v in VARIANTS}
    for v in VARIANTS:
        rows = [r for r in results[v] if "never" not in r]
        if not rows:
            print(
                f"{v:10s} {0:3d}/{0:<3d} {never[v]:5d} {'-':>17s} {'-':>7s} {'-':>18s} {'-':>5s} {'-':>5s} {'-':>18s}"
            )
            continue
        without = [r["without_s"] for r in rows]
        gens = [r["generation"] for r in rows]
        print(
            f"{v:10s} {sum(r['taken'] for r in rows):3d}/{len(rows):<3d} {never[v]:5d} {statistics.median(without):17.2f} "
            f"{max(without):7.2f} {statistics.median(gens):18.0f} {max(gens):5d} "
            f"{sum(r['both'] for r in rows):5d} {statistics.median(r['handover_s'] for r in rows):18.1f}"
        )
    taken = {v: sum(r.get("taken", False) for r in results[v]) for v in VARIANTS}
    print(
        f"standby took the lease from a live holder, baseline / product: {taken['baseline']} / {taken['product']}"
    )
    print(
        f"first member never held the lease within {HOLD_WITHIN_S:.0f} s, baseline / product: "
        f"{never['baseline']} / {never['product']}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap")
    ap.add_argument("--handovers", type=int, default=12)
    ap.add_argument("--watch-s", type=float, default=8.0)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        args.handovers, args.watch_s = 1, 3.0
    with bootstrap_or_own_cluster(args.bootstrap, "lease-handover-") as args.bootstrap:
        measure(args)


if __name__ == "__main__":
    main()
