"""Two remediators as separate processes (``linkwatch remediate run``) sharing one lease on the
real 3-broker cluster. The holder stops itself at a named point of an action
(:mod:`remediation.failpoints`, SIGSTOP as a long GC pause would) and is then either kept frozen
for twice the lease's session timeout and resumed, or SIGKILLed there (a crash mid-action). The
standby takes the lease and carries on from the shared state; the old holder, resumed, changes
nothing on the cluster (its next write or change is refused and audited ``fenced``); the finding
is not lost; the demotion is done exactly once; and the cap still holds after the failover (a
demotion of a second broker is refused by the new holder).

A free-disk reassignment (``rebalance_disks``, throttled moves run as a sliding window) is
stopped the same way while a move is in flight: the standby finishes the moves in flight
(``on_restart: finish``), runs the ones never started, clears the throttles, and the old holder,
resumed, sends no move.

The default run takes three cases (frozen with a step written ``intent``; frozen inside a
change, before the fencing check; killed while a step is being verified);
``LINKWATCH_ALL_FAILPOINTS=1`` runs both ways at every point but ``before_call`` (the documented
gap: a pause between the check and the request leaving the process can still send one call; see
:mod:`remediation.fencing`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaProducer
from kafka.admin import NewTopic

from remediation.audit import read_audit
from testbed.cluster import ClusterState
from tests.remediation.kit import config, create_topic, demoting, finding, leaders, replicas, throttles
from tests.waiting import wait_until

pytestmark = [pytest.mark.minutes(4), pytest.mark.cluster, pytest.mark.timing]

RF3 = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(6)}
SESSION_MS = 6000
SETTLE_S = 6  # the in_settle point is reached while an action settles
EVERY_POINT = ("after_plan", "after_intent", "before_fence", "in_verify", "in_settle")
# (point, what happens to the holder stopped there): "frozen" resumes after twice the session,
# "killed" is SIGKILLed there (a crash mid-action; the standby recovers the action it left).
CASES = (
    [(p, how) for p in EVERY_POINT for how in ("frozen", "killed")]
    if os.environ.get("LINKWATCH_ALL_FAILPOINTS")
    else [("after_intent", "frozen"), ("before_fence", "frozen"), ("in_verify", "killed")]
)


class Member:
    """One ``linkwatch remediate run`` process with its own config, audit and failpoint dir."""

    def __init__(self, name: str, tmp: Path, bootstrap: str, settings: dict[str, Any]) -> None:
        self.name = name
        self.points = tmp / name / "failpoints"
        self.points.mkdir(parents=True)
        _, path = config(tmp / name, bootstrap, **settings)
        self.audit_path = tmp / name / "state" / "audit.jsonl"
        self.log_path = tmp / name / "out.log"
        self.log = self.log_path.open("w")
        env = {**os.environ, "LINKWATCH_FAILPOINTS": str(self.points)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "remediate", "run", "-c", str(path), "--member", name],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

    def events(self, event: str | None = None, since: float = 0.0) -> list[dict[str, Any]]:
        got, _ = read_audit(self.audit_path)
        return [e for e in got if (event is None or e["event"] == event) and e["ts"] >= since]

    def frozen(self) -> bool:
        stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        return stat[stat.rindex(")") + 2] == "T"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def _explain(members: list[Member | None]) -> str:
    """What each member did (its audit, its log's last lines): why a wait timed out."""
    out = []
    for m in members:
        if m is None:
            continue
        events = [
            f"{e['ts']:.1f} {e['event']} "
            + " ".join(f"{k}={e[k]}" for k in ("status", "step", "reason", "subject") if k in e)
            for e in m.events()
        ]
        log_tail = m.log_path.read_text(errors="replace").splitlines()[-15:]
        out.append(f"member {m.name} (exit {m.proc.poll()}) audit: " + "; ".join(events[-20:]))
        out.append(f"member {m.name} log:\n  " + "\n  ".join(line[:300] for line in log_tail))
    return "\n".join(out)


def _lease(topic_name: str) -> dict[str, Any]:
    """The members' shared lease (and state topic), named after the test's topic."""
    return {
        "enabled": True,
        "topic": f"{topic_name}-lease",
        "state_topic": f"{topic_name}-state",
        "group": f"{topic_name}-g",
        "session_timeout_ms": SESSION_MS,
    }


def _publish(bootstrap: str, topic: str, subject: str, rule: str = "slow_broker") -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    f = finding(rule, subject, stage="local")
    producer.send(topic, f.to_json()).get(30)
    producer.close()


def _completed(members: list[Member], subject: str) -> list[dict[str, Any]]:
    """The completions (``result`` done, or ``recover`` of an action left running, done) of the
    actions planned for ``subject``, across every member's audit."""
    plans = {
        e["plan"]["id"] for m in members for e in m.events("plan") if e["plan"].get("subject") == subject
    }
    return [
        e
        for m in members
        for e in m.events()
        if (e["event"] == "result" and e.get("status") == "done" and e.get("plan") in plans)
        or (e["event"] == "recover" and e.get("status") == "recovered" and e.get("action") in plans)
    ]


def _over(members: list[Member], subject: str) -> bool:
    """The action planned for ``subject`` is over: its evidence written (after its settle
    period), or recovered by a new holder."""
    plans = {
        e["plan"]["id"] for m in members for e in m.events("plan") if e["plan"].get("subject") == subject
    }
    return any(
        (e["event"] == "evidence" and e.get("action", e.get("id")) in plans)
        # a recovered action may settle again under its new holder: give it that time
        or (e["event"] == "recover" and e.get("action") in plans and time.time() > e["ts"] + SETTLE_S + 1)
        for m in members
        for e in m.events()
    )


@pytest.mark.parametrize(("point", "how"), CASES, ids=[f"{how} at {p}" for p, how in CASES])
def test_a_holder_stopped_mid_action_changes_nothing_after_and_the_cap_holds(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, point: str, how: str
) -> None:
    create_topic(admin, topic_name, RF3)
    findings_topic = f"{topic_name}-findings"
    admin.create_topics([NewTopic(findings_topic, 1, 3)])
    settings = {
        "findings_topic": findings_topic,
        "lease": _lease(topic_name),
        **demoting(topic_name),
        "caps": {"max_demoted_brokers": 1, "max_demoted_share": None},
        # Two brokers with findings must reach the cap, not the breaker on bad brokers.
        "circuit_breaker": {"max_bad_brokers": 3, "max_bad_share": 1.0},
        "impact": {"settle_s": SETTLE_S},
        "restore_hold_s": 600,
    }
    a = Member("a", tmp_path, cluster3.bootstrap, settings)
    b: Member | None = None

    def until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
        return wait_until(check, timeout_s, what, explain=lambda: _explain([a, b]))

    try:
        until(lambda: a.events("lease_acquired"), 60, "a holding the lease")
        b = Member("b", tmp_path, cluster3.bootstrap, settings)
        until(lambda: b.events("started"), 60, "b started (standby)")
        (a.points / point).touch()
        _publish(cluster3.bootstrap, findings_topic, "broker:2")
        until(a.frozen, 60, f"a frozen at {point}")
        frozen_at = time.time()
        if how == "killed":
            a.proc.kill()
            a.proc.wait(10)
        until(lambda: b.events("lease_acquired"), 4 * SESSION_MS / 1000, "b taking the lease")
        until(lambda: 2 not in leaders(admin, topic_name).values(), 60, "broker 2 leading nothing")
        remaining = frozen_at + 2 * SESSION_MS / 1000 - time.time()
        if remaining > 0 and how == "frozen":
            time.sleep(remaining)
        resumed_at = time.time()
        if how == "frozen":
            os.kill(a.proc.pid, signal.SIGCONT)
        if (
            point != "in_settle" and how == "frozen"
        ):  # resumed inside the action: its next write or change is refused
            until(lambda: a.events("fenced", since=resumed_at), 30, "a's stale step refused (fenced)")
        after_resume = leaders(admin, topic_name)

        # A second broker's finding, after the failover and once the first action is over (its
        # settle period too: a running action is refused by max_concurrent_actions first): the
        # new holder refuses it by the cap on demoted brokers, which it knows from the state.
        until(lambda: _over([a, b], "broker:2"), 60, "the broker:2 action over")
        _publish(cluster3.bootstrap, findings_topic, "broker:3")
        refused = until(
            lambda: [e for e in b.events("refused") if "broker:3" in str(e.get("subject"))],
            60,
            "b judging broker:3",
        )
        assert "max_demoted_brokers" in refused[0]["reason"], refused
        time.sleep(2)

        # The old holder changed nothing after it resumed, and acted on nothing new.
        assert leaders(admin, topic_name) == after_resume
        steps_after = [
            e
            for e in a.events("step", since=resumed_at)
            if e.get("status") not in ("intent", "cancelled", "failed")
        ]
        assert not steps_after, steps_after
        assert not [e for e in a.events("plan", since=resumed_at) if "broker:3" in str(e.get("key"))]
        # The demotion was completed exactly once: by the new holder, or by the old one before it
        # stopped (in_settle: the action was done, its impact being watched).
        completed = _completed([a, b], "broker:2")
        assert len(completed) == 1, completed
        assert completed[0]["remediator"] == ("a" if point == "in_settle" else "b"), completed
        # The old holder never took the lease back on its stale assignment.
        assert not a.events("lease_acquired", since=frozen_at), a.events(since=frozen_at)
        assert sorted(after_resume.values()).count(2) == 0
    finally:
        a.stop()
        if b is not None:
            b.stop()


# Moves of 3 MB at 300 kB/s: the first 1 MiB fetch is not held by the throttle, the rest takes
# ~7 s a move, so a move is still in flight when the holder stops at its next change.
MOVE_SIZES = [3_000_000, 2_800_000, 2_600_000, 2_400_000]
MOVE_THROTTLE_BYTES_PER_S = 300_000
REASSIGN_CASES = ["frozen", "killed"] if os.environ.get("LINKWATCH_ALL_FAILPOINTS") else ["frozen"]


def _moving(admin, topic: str) -> list[int]:
    return sorted(tp.partition for tp in admin.list_partition_reassignments() if tp.topic == topic)


@pytest.mark.parametrize("how", REASSIGN_CASES)
def test_a_holder_stopped_mid_reassignment_sends_nothing_after_and_the_standby_finishes_it(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, fill_broker1_dir, how: str
) -> None:
    filled = fill_broker1_dir(MOVE_SIZES)
    findings_topic = f"{topic_name}-findings"
    admin.create_topics([NewTopic(findings_topic, 1, 3)])
    settings = {
        "findings_topic": findings_topic,
        "lease": _lease(topic_name),
        **filled.rebalance_disks(
            target_ratio=0.4, window=2, throttle_bytes_per_s=MOVE_THROTTLE_BYTES_PER_S, poll_s=0.2
        ),
        "on_restart": "finish",
    }
    before = replicas(admin, topic_name)
    subject = f"log_dir:1:{filled.path}"
    a = Member("a", tmp_path, cluster3.bootstrap, settings)
    b: Member | None = None

    def until(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
        return wait_until(check, timeout_s, what, explain=lambda: _explain([a, b]))

    try:
        until(lambda: a.events("lease_acquired"), 60, "a holding the lease")
        b = Member("b", tmp_path, cluster3.bootstrap, settings)
        until(lambda: b.events("started"), 60, "b started (standby)")
        _publish(cluster3.bootstrap, findings_topic, subject, rule="hot_disk")
        until(lambda: _moving(admin, topic_name), 60, "a's first move in flight")
        # Its next change to the cluster (the next move, or a throttle) stops it: a move is
        # still in flight then, a slot's move at most intended.
        (a.points / "before_fence").touch()
        until(a.frozen, 60, "a stopped at its next change")
        frozen_at = time.time()
        in_flight = _moving(admin, topic_name)
        assert in_flight, "no move in flight when a stopped: the case under test did not happen"
        if how == "killed":
            a.proc.kill()
            a.proc.wait(10)
        until(lambda: b.events("lease_acquired"), 4 * SESSION_MS / 1000, "b taking the lease")
        recovered = until(lambda: b.events("recover"), 120, "b recovering a's action")
        assert recovered[0]["status"] == "recovered", recovered
        print(f"in flight when a stopped: {in_flight}; b recovered: {recovered[0]['note']}")
        remaining = frozen_at + 2 * SESSION_MS / 1000 - time.time()
        if how == "frozen":
            time.sleep(max(0.0, remaining))
            resumed_at = time.time()
            os.kill(a.proc.pid, signal.SIGCONT)
            until(lambda: a.events("fenced", since=resumed_at), 30, "a's stale change refused (fenced)")
        until(
            lambda: not _moving(admin, topic_name) and throttles(admin, topic_name) == {},
            120,
            "no move in flight and no throttle left",
        )
        time.sleep(2)  # a resumed holder's late change would show by now

        events = [e for m in (a, b) for e in m.events()]
        plan = next(e["plan"] for e in events if e["event"] == "plan" and e["plan"].get("subject") == subject)
        moves = {m["params"]["partition"]: m["params"] for m in plan["steps"]}
        now = replicas(admin, topic_name)
        # Every move happened at most once: a partition holds its replicas from before the plan or
        # after its move, never a third set; the moves in flight when a stopped were finished.
        for partition, move in moves.items():
            assert now[partition] in (move["before"], move["after"]), (partition, move, now[partition])
        for partition in in_flight:
            assert now[partition] == moves[partition]["after"], (partition, in_flight, now)
        assert now != before, "nothing moved"
        assert not throttles(admin, topic_name)
        # The old holder sent no move after it stopped, and never took the lease back.
        sent_after = [
            e
            for e in a.events("step", since=frozen_at)
            if e.get("status") not in ("intent", "cancelled", "failed")
        ]
        assert not sent_after, sent_after
        assert not a.events("lease_acquired", since=frozen_at), a.events(since=frozen_at)
        assert [e["action"] for e in recovered] == [plan["id"]]
    finally:
        a.stop()
        if b is not None:
            b.stop()
