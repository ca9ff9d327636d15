"""Remediations on the real 3-broker cluster: dry run, demotion and restore, circuit breaker,
pause/resume and dedup, the pipelined disk rebalance with throttles, long-tail cancel."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from kafka import KafkaProducer

from remediation.audit import read_audit
from remediation.remediator import Remediator
from remediation.view import read_view
from testbed import faults
from testbed.cluster import ClusterState
from tests.remediation.kit import (
    config,
    create_topic,
    demoting,
    finding,
    leaders,
    produce,
    replica_dirs,
    replicas,
    throttles,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.minutes(2), pytest.mark.cluster, pytest.mark.timing]

RF3 = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(6)}  # broker 2 prefers 1 and 4


def _snapshot(admin, topic: str) -> dict:
    v = read_view(admin, [topic])
    return {"summary": v.summary(), "dirs": replica_dirs(admin, topic)}


def _settled_snapshot(admin, topic: str, timeout_s: float = 30.0) -> dict:
    """The snapshot once two reads 0.5 s apart agree: a topic created a moment ago on a fresh
    cluster still has replicas being placed on log dirs, which is not the remediator's doing."""
    deadline, last = time.monotonic() + timeout_s, _snapshot(admin, topic)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = _snapshot(admin, topic)
        if now == last:
            return now
        last = now
    return last


def test_dry_run_changes_nothing(cluster3: ClusterState, admin, topic_name: str, tmp_path: Path) -> None:
    create_topic(admin, topic_name, RF3)
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        execute=False,
        rules={"slow_broker": "demote_leadership", "hot_disk": "rebalance_disks"},
        remediations={
            "demote_leadership": {"topics": [topic_name]},
            "rebalance_disks": {"capacity_bytes": 1024, "high_ratio": 0.5, "target_ratio": 0.4},
        },
    )
    rem = Remediator(cfg, admin)
    before = _settled_snapshot(admin, topic_name)
    a = rem.handle(finding("slow_broker", "broker:2"))
    b = rem.handle(finding("hot_disk", "broker:1"))
    time.sleep(2)
    assert (a["event"], b["event"]) == ("dry_run", "dry_run")
    assert _snapshot(admin, topic_name) == before  # metadata, log dirs, configs, throttles
    events, dropped = read_audit(cfg.audit_path)
    plans = [e for e in events if e["event"] == "plan"]
    assert dropped == 0 and len(plans) == 2
    assert plans[0]["plan"]["steps"] and plans[0]["before"]["leaders"]  # the plan is audited with the state
    assert not rem.state.data["demoted"] and not rem.state.running()


def test_demote_then_restore_after_hold(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, RF3)
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        restore_hold_s=4,
        cooldown_s=60,
        **demoting(topic_name),
    )
    rem = Remediator(cfg, admin)
    t0 = time.monotonic()
    result = rem.handle(finding("slow_broker", "broker:2"))
    assert result["status"] == "done", result
    wait_until(lambda: 2 not in leaders(admin, topic_name).values(), 30, "broker 2 leads nothing")
    demote_s = time.monotonic() - t0
    assert demote_s < 30
    assert all(r[-1] == 2 for p, r in replicas(admin, topic_name).items() if RF3[p][0] == 2)
    assert rem.demoted() == {2: result["plan"]}

    # Still active: no restore. Cleared: restore only after the hold time.
    assert rem.tick() == []
    rem.handle(finding("slow_broker", "broker:2", active=False))
    assert rem.tick() == []
    time.sleep(4.5)
    restored = rem.tick()
    assert [r["status"] for r in restored] == ["done"]
    assert replicas(admin, topic_name) == RF3
    wait_until(
        lambda: leaders(admin, topic_name) == {p: r[0] for p, r in RF3.items()}, 30, "preferred leaders back"
    )
    assert rem.demoted() == {}

    # No demote/promote loop: the broker just restored is in its cooldown.
    again = rem.handle(finding("slow_broker", "broker:2"))
    assert again["event"] == "refused" and "cooldown" in again["reason"]
    print(f"demotion took {demote_s:.1f} s")


def test_a_slow_follower_is_dropped_from_its_replica_sets_and_put_back_exactly(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    """``followers: drop``: demoting leadership leaves acks=all producers waiting on the slow
    broker as a follower; dropping it from the replica sets ends that wait, and the restore puts
    every list back as it was, the broker caught up before its leadership returns."""
    create_topic(admin, topic_name, RF3)
    try:
        produce(cluster3.bootstrap, topic_name, {p: 256 * 1024 for p in RF3})  # data the rejoin copies back
        cfg, _ = config(
            tmp_path,
            cluster3.bootstrap,
            restore_hold_s=2,
            rules={"slow_broker": "demote_leadership"},
            remediations={"demote_leadership": {"topics": [topic_name], "followers": "drop"}},
        )
        rem = Remediator(cfg, admin)
        result = rem.handle(finding("slow_broker", "broker:2"))
        assert result["status"] == "done", result
        dropped = {p: [b for b in r if b != 2] for p, r in RF3.items()}
        assert replicas(admin, topic_name) == dropped
        assert 2 not in leaders(admin, topic_name).values()
        producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all")
        acked = [producer.send(topic_name, b"x", partition=p) for p in RF3]
        assert all(f.get(timeout=30) for f in acked)  # acks=all: min.insync.replicas still met
        producer.close()

        rem.handle(finding("slow_broker", "broker:2", active=False))
        time.sleep(2.5)
        restored = rem.tick()
        assert [r["status"] for r in restored] == ["done"], restored
        assert replicas(admin, topic_name) == RF3
        wait_until(
            lambda: leaders(admin, topic_name) == {p: r[0] for p, r in RF3.items()},
            30,
            "preferred leaders back",
        )
        assert rem.demoted() == {}
        events, _ = read_audit(cfg.audit_path)
        plans = [e["plan"]["reason"] for e in events if e["event"] == "plan"]
        assert "drop it from 6 replica sets" in plans[0], plans
        assert "6 of them with the broker back in the replica set" in plans[-1], plans
    finally:
        # Its bytes on the log dirs would skew the free-disk scenarios that follow on this cluster
        # (their planner sees every byte on a dir), as the disk fixtures' own topics would.
        admin.delete_topics([topic_name])


def test_circuit_breaker_all_brokers_paused(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, RF3)
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        **demoting(topic_name),
    )
    rem = Remediator(cfg, admin)
    before = replicas(admin, topic_name)
    pauses = [faults.PauseDutyCycle(n.pid, pause_ms=200, period_ms=1000).start() for n in cluster3.nodes]
    try:
        events = [rem.handle(finding("cluster_slow", "cluster:test"))]
        events += [rem.handle(finding("slow_broker", f"broker:{b}")) for b in (1, 2, 3)]
    finally:
        for p in pauses:
            p.stop()
    assert events[0]["event"] == "ignored"
    assert [e["event"] for e in events[1:]] == ["refused"] * 3
    assert all("circuit breaker" in e["reason"] and "cluster_slow" in e["reason"] for e in events[1:])
    assert replicas(admin, topic_name) == before and rem.demoted() == {}

    # Without the cluster-wide finding, two bad brokers are already too many (max_bad_brokers 1).
    rem2 = Remediator(
        config(
            tmp_path / "b",
            cluster3.bootstrap,
            **demoting(topic_name),
        )[0],
        admin,
    )
    rem2.pause()  # observe both findings first, then decide
    rem2.handle(finding("slow_broker", "broker:1"))
    rem2.handle(finding("slow_broker", "broker:3"))
    decided = rem2.resume()
    assert [e["event"] for e in decided] == ["refused", "refused"]
    assert "2 of 3 brokers look bad" in decided[0]["reason"]
    audited = [e for e in read_audit(cfg.audit_path)[0] if e["event"] == "refused"]
    assert len(audited) == 3 and all(e["reason"] for e in audited)


def test_paused_findings_kept_and_never_acted_twice(cluster3: ClusterState, admin, tmp_path: Path) -> None:
    cfg, _ = config(
        tmp_path, cluster3.bootstrap, rules={"slow_broker": "noop"}, remediations={"noop": None}, cooldown_s=0
    )
    rem = Remediator(cfg, admin)
    f = finding("slow_broker", "broker:3")
    rem.pause()
    assert rem.handle(f)["event"] == "queued"
    # A restart while paused keeps the finding (it is in the persisted state).
    rem = Remediator(cfg, admin)
    assert rem.state.data["paused"] and len(rem.state.data["pending"]) == 1
    [done] = rem.resume()
    assert done["event"] == "result" and done["status"] == "done"
    again = rem.handle(f)  # the same finding delivered again (a re-read, a duplicate send)
    assert again["event"] == "refused" and "already acted on" in again["reason"]


def _poll_reassignments(
    admin, topic: str, stop: threading.Event, seen: list[int], thr: list[dict], log: list | None = None
) -> None:
    while not stop.is_set():
        moving = [tp for tp in admin.list_partition_reassignments() if tp.topic == topic]
        seen.append(len(moving))
        if log is not None:
            log.append((round(time.time(), 3), sorted(tp.partition for tp in moving)))
        if moving:
            thr.append(throttles(admin, topic))
        time.sleep(0.2)


def _timeline(events: list[dict], moves: list[dict], polled: list[tuple[float, list[int]]]) -> str:
    """The pipeline's audit and what the poller saw, in seconds from the first audit event: the
    message of an assertion on the window (a move that ran alone shows here as a lone partition)."""
    t0 = events[0]["ts"]
    lines = [
        f"moves (partition, bytes, to broker): {[(m['partition'], m['size_bytes'], m['dst'][0]) for m in moves]}"
    ]
    lines += [
        f"{e['ts'] - t0:6.2f} s {e['event']} "
        + " ".join(f"{k}={e[k]}" for k in ("size", "started", "inflight", "step") if k in e)
        for e in events
        if e["event"] in ("window", "move_done", "move_cancelled", "throttle_cleared", "result")
    ]
    lines.append(f"polled (s, partitions moving): {[(round(t - t0, 2), ps) for t, ps in polled]}")
    return "\n".join(lines)


# Replicas larger than one replica fetch (replica.fetch.max.bytes, 1 MiB by default), so the throttle
# holds both moves of the first window: the leader checks its quota before a fetch, so one fetch of
# up to 1 MiB per partition is never held back. With smaller replicas (96-416 kB at 100 kB/s) the
# first move was done within ~0.4 s, before the poller ever saw it beside the second; two at once
# was seen only if the second was still throttled when the refilled slot's move began, which
# hung on the quota and the machine's timing.
PIPELINE_SIZES = [384_000, 640_000, 896_000, 1_152_000, 1_408_000, 1_664_000]


def test_full_log_dir_pipeline_window_and_throttles(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, fill_broker1_dir
) -> None:
    filled = fill_broker1_dir(PIPELINE_SIZES)
    d1 = filled.path
    others = max(d.used_bytes for d in read_view(admin).log_dirs if d.broker != 1)
    assert others < 0.1 * filled.capacity_bytes, "the other dirs must be nearly empty for this scenario"
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        # 500 kB/s on broker 1's 1 MiB first fetch: the first move is held ~2 s past it, and the
        # second (sent ~0.3 s after the first) waits in the same quota.
        **filled.rebalance_disks(target_ratio=0.4, window=2, throttle_bytes_per_s=500_000, poll_s=0.2),
    )
    rem = Remediator(cfg, admin)
    stop, seen, thr, polled = threading.Event(), [], [], []
    poller = threading.Thread(
        target=_poll_reassignments, args=(admin, topic_name, stop, seen, thr, polled), daemon=True
    )
    poller.start()
    result = rem.handle(finding("hot_disk", f"log_dir:1:{d1}"))
    stop.set()
    poller.join()
    events = read_audit(cfg.audit_path)[0]
    plan = next(e for e in events if e["event"] == "plan")["plan"]
    moves = [s["params"] for s in plan["steps"]]
    timeline = _timeline(events, moves, polled)
    print(timeline)
    assert result["status"] == "done", result
    assert len(moves) >= 3
    assert all(m["src"] == [1, d1] and m["dst"][0] in (2, 3) for m in moves)
    # Fewest bytes: the largest replicas go first, never a small one before a larger one that fits.
    assert moves[0]["size_bytes"] == max(m["size_bytes"] for m in moves)
    assert moves[1]["size_bytes"] > 1 << 20, timeline  # both first moves outlast one fetch
    windows = [e for e in events if e["event"] == "window"]
    assert windows[0]["started"] == [0, 1], timeline  # the pipeline sent two at once
    assert max(seen) <= 2, timeline  # the window is never exceeded
    assert 2 in seen, timeline  # and it is used: two moves were in flight at once on the cluster
    assert thr and all(
        set(t.get(f"topic:{topic_name}", {}))
        == {"leader.replication.throttled.replicas", "follower.replication.throttled.replicas"}
        and "*" not in str(t)
        for t in thr
    )
    for m in moves:  # the dir may also hold an earlier test's replicas: index by topic
        assert replicas(admin, m["topic"])[m["partition"]] == m["after"]
    assert throttles(admin, topic_name) == {}  # cleared at the end
    assert len(windows) >= 2, timeline  # a slot refilled as a move completed, not one batch


def test_pipeline_backs_off_while_latency_is_high(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, fill_broker1_dir
) -> None:
    filled = fill_broker1_dir([150_000, 160_000, 170_000, 180_000])
    d1 = filled.path
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        **filled.rebalance_disks(
            target_ratio=0.3,
            window=3,
            throttle_bytes_per_s=200_000,
            poll_s=0.2,
            backoff_p99_ms=500,
            recover_s=600,
        ),
    )
    readings: list[float] = []

    def p99() -> float:  # the brokers' Produce p99, driven by the test: high throughout
        readings.append(900.0)
        return 900.0

    rem = Remediator(cfg, admin, latency_ms=p99)
    stop, seen, thr = threading.Event(), [], []
    poller = threading.Thread(
        target=_poll_reassignments, args=(admin, topic_name, stop, seen, thr), daemon=True
    )
    poller.start()
    try:
        result = rem.handle(finding("hot_disk", f"log_dir:1:{d1}"))
    finally:
        stop.set()
        poller.join()
    windows = [e for e in read_audit(cfg.audit_path)[0] if e["event"] == "window"]
    assert result["status"] == "done", result
    assert len(windows) >= 2 and readings
    assert {w["size"] for w in windows} == {1}  # halved from 3 at once, never grown back
    assert max(seen) <= 1, seen
    assert throttles(admin, topic_name) == {}


def test_long_tail_move_cancelled_keeps_replicas(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, fill_broker1_dir
) -> None:
    # The mover is larger than one replica fetch (1 MB), which no throttle holds back.
    filled = fill_broker1_dir([6_000_000, 2_000_000])
    d1 = filled.path
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        **filled.rebalance_disks(
            target_ratio=0.7, window=1, throttle_bytes_per_s=1024, poll_s=0.3, move_deadline_s=6
        ),
    )
    rem = Remediator(cfg, admin)
    before = replicas(admin, topic_name)
    result = rem.handle(finding("hot_disk", f"log_dir:1:{d1}"))
    assert result["status"] == "partial", result
    events = read_audit(cfg.audit_path)[0]
    assert [e["reason"] for e in events if e["event"] == "move_cancelled"] == ["past move_deadline_s"]
    wait_until(
        lambda: not [tp for tp in admin.list_partition_reassignments() if tp.topic == topic_name],
        30,
        "no reassignment",
    )
    assert replicas(admin, topic_name) == before
    assert throttles(admin, topic_name) == {}


def test_cli_plan_status_undo(cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, capsys) -> None:
    from cli.main import main

    create_topic(admin, topic_name, RF3)
    cfg, path = config(
        tmp_path,
        cluster3.bootstrap,
        **demoting(topic_name),
    )
    before = replicas(admin, topic_name)
    assert main(["remediate", "plan", "-c", str(path), "--rule", "slow_broker", "--subject", "broker:2"]) == 0
    out = capsys.readouterr().out
    for p in (1, 4):  # exactly what would change: broker 2's partitions, old and new order
        assert f"'partition': {p}, 'from': [2, 3, 1], 'to': [3, 1, 2]" in out
    assert "guardrails: would go ahead" in out
    assert replicas(admin, topic_name) == before  # plan never changes anything, even with execute: true

    action = Remediator(cfg, admin).handle(finding("slow_broker", "broker:2"))["plan"]
    assert main(["remediate", "status", "-c", str(path)]) == 0
    out = capsys.readouterr().out
    assert action in out and "demote_leadership" in out and "'2':" in out
    assert main(["remediate", "undo", "-c", str(path), action]) == 0
    assert "done" in capsys.readouterr().out
    assert replicas(admin, topic_name) == before
    assert main(["remediate", "undo", "-c", str(path), "nope"]) == 2  # unknown action: one-line error


class _RefusingElections:
    """The real admin client, except that elections fail (a controller refusing them): the one
    failure the test injects; every other call reaches the real cluster."""

    def __init__(self, admin) -> None:
        self._admin = admin
        self.refuse = True

    def elect_leaders(self, *args, **kwargs):
        if self.refuse:
            raise RuntimeError("election refused by the controller")
        return self._admin.elect_leaders(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._admin, name)


def test_a_failed_step_undoes_the_applied_reorder_and_frees_its_cap(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, RF3)
    cfg, _ = config(
        tmp_path,
        cluster3.bootstrap,
        cooldown_s=0,
        failures={"max_failures": 3, "window_s": 600},
        **demoting(topic_name),
    )
    flaky = _RefusingElections(admin)
    rem = Remediator(cfg, flaky)
    result = rem.handle(finding("slow_broker", "broker:2"))
    # The reorder reached the cluster, the election failed: the reorder is put back, no cap held.
    assert (result["event"], result["status"]) == ("result", "failed"), result
    assert result["undo"] and result["undo"]["plan"], result
    assert replicas(admin, topic_name) == RF3
    assert rem.demoted() == {} and result["breaker"] is None
    # Each failed action counts, and so does its undo (whose election fails too): the third
    # failure, the second finding's undo, opens the breaker.
    rem.handle(finding("slow_broker", "broker:2", active=False))
    second = rem.handle(finding("slow_broker", "broker:3"))
    assert second["status"] == "failed" and rem.state.data["breaker"]["by"] == "failures", second
    assert replicas(admin, topic_name) == RF3
    flaky.refuse = False
    rem.handle(finding("slow_broker", "broker:3", active=False))
    refused = rem.handle(finding("slow_broker", "broker:1"))
    assert refused["event"] == "refused" and "breaker open" in refused["reason"], refused
    rem.reset()
    done = rem.handle(finding("slow_broker", "broker:1"))
    assert done["status"] == "done" and rem.demoted() == {1: done["plan"]}, done
