"""Failing actions and harmful actions, on the in-memory cluster (``fake_cluster``): a failed
step undoes what was applied and frees its cap, failures open the breaker until a person resets
it, an action whose health signals get worse is stopped, undone, and leaves the remediator
paused with the breaker open; operator commands reach the remediator through its inbox.

The in-memory cluster is here because these are the unit tests (``-m "not cluster"`` starts no
broker) and because a harm reading on demand cannot be made on real brokers; the same cases on
the real cluster: ``test_actions_cluster.py::test_a_failed_step_undoes_the_applied_reorder_and_frees_its_cap``
and ``test_impact_cluster.py``."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from remediation import control
from remediation.audit import read_audit
from remediation.config import ImpactConfig
from remediation.control import FileInbox, StateLock
from remediation.impact import Reading, harm
from remediation.lease import LocalLease
from remediation.remediator import Remediator
from remediation.status import render
from tests.remediation.fake_cluster import RF3, FakeCluster
from tests.remediation.test_intake import Clock, good, remediator

CFG = ImpactConfig()


@pytest.mark.parametrize(
    ("before", "now", "expected"),
    [
        (Reading(0, 0, {1: 5, 2: 5}, {}), Reading(1, 0, {1: 6, 2: 8}, {}), None),  # noise
        (Reading(0, 0, {}, {}), Reading(1, 2, {}, {}), "under-replicated partitions 0 -> 2"),
        (Reading(0, 0, {3: 5}, {}), Reading(1, 0, {3: 450}, {}), "probe p99 of leader 3 5 -> 450 ms"),
        (Reading(0, 0, {3: 5}, {}), Reading(1, 0, {3: 90}, {}), None),  # under the floor (100 ms)
        (Reading(0, 0, {3: 400}, {}), Reading(1, 0, {3: 500}, {}), None),  # slow before, +100 only
        (Reading(0, 0, {}, {}), Reading(1, 0, {3: 900}, {}), None),  # no before figure: no verdict
        (Reading(0, None, {}, {}), Reading(1, 5, {}, {}), None),  # URP unknown before
        (
            Reading(0, 0, {}, {"billing": 2}),
            Reading(1, 0, {}, {"billing": 40}),
            "lag of group billing 2 -> 40 s",
        ),
        (Reading(0, 0, {}, {"billing": 2}), Reading(1, 0, {}, {"billing": 20}), None),
    ],
)
def test_harm_rule(before: Reading, now: Reading, expected: str | None) -> None:
    got = harm(before, now, CFG)
    assert got is None if expected is None else (got is not None and expected in got), got


def test_a_failed_step_undoes_what_was_applied_and_frees_its_cap(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock, cooldown_s=0, failures={"max_failures": 5, "window_s": 600})
    fake.fail_elections = True  # the reorder goes through, the election is refused
    result = rem.handle(good(at=clock.t))
    assert (result["event"], result["status"]) == ("result", "failed"), result
    assert fake.replicas() == RF3  # the reorder was put back
    assert rem.demoted() == {}  # the failed demotion holds no cap
    assert result["undo"]["plan"] and result["breaker"] is None
    fake.fail_elections = False
    clock.t += 10
    rem.handle(good("slow_broker", "broker:2", at=clock.t, active=False))
    ok = rem.handle(good("slow_broker", "broker:3", at=clock.t))
    assert (ok["event"], ok["status"]) == ("result", "done"), ok  # not refused by a stale cap
    assert rem.demoted() == {3: ok["plan"]}


def test_failures_open_the_breaker_until_a_person_resets_it(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock, cooldown_s=0, failures={"max_failures": 3, "window_s": 600})
    fake.fail_elections = True
    outcomes = []
    for _ in range(4):
        clock.t += 10
        e = rem.handle(good(at=clock.t))
        outcomes.append(e.get("status") or e["event"])
    # Each failed demotion and its failed undo (its election is refused too) count: the breaker
    # opens at the third failure, and the next finding is refused.
    assert outcomes[:2] == ["failed", "failed"] and outcomes[2:] == ["refused", "refused"], outcomes
    assert rem.state.data["breaker"]["by"] == "failures"
    refused = [e for e in read_audit(rem.cfg.audit_path)[0] if e["event"] == "refused"]
    assert "breaker open" in refused[-1]["reason"] and "remediate reset" in refused[-1]["reason"]
    assert fake.replicas() == RF3
    fake.fail_elections = False
    assert rem.reset()["event"] == "breaker_reset"
    clock.t += 10
    assert rem.handle(good(at=clock.t))["status"] == "done"


class ScriptedSignals:
    """A fake signal source (the real one reads the probe's records: test_impact_cluster.py):
    the readings the test scripts, in order; the last one repeats."""

    def __init__(self, clock: Clock, readings: list[dict[int, float]]) -> None:
        self.clock, self.readings = clock, readings

    def read(self) -> Reading:
        probe = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        return Reading(at=self.clock(), under_replicated=0, probe_p99_ms=probe)


def test_an_action_that_hurts_is_stopped_undone_and_leaves_the_breaker_open(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(
        tmp_path, fake, clock, impact={"settle_s": 60, "check_every_s": 5, "breach_checks": 2}, cooldown_s=0
    )
    rem.signals = ScriptedSignals(clock, [{1: 5, 2: 6, 3: 5}, {1: 5, 3: 8}, {1: 5, 3: 450}])
    result = rem.handle(good(at=clock.t))
    assert result["status"] == "done"
    aid = result["plan"]
    assert rem.state.action(aid)["status"] == "settling"
    assert 2 not in fake.leaders().values()
    stopped = []
    for _ in range(6):
        clock.t += 5
        stopped += rem.tick()
    assert [e["status"] for e in stopped] == ["stopped"], stopped
    assert "probe p99 of leader 3 5 -> 450 ms" in stopped[0]["harm"]
    assert fake.replicas() == RF3 and fake.leaders() == {p: r[0] for p, r in RF3.items()}  # undone
    a = rem.state.action(aid)
    assert (
        a["status"] == "stopped" and rem.state.data["paused"] and rem.state.data["breaker"]["by"] == "impact"
    )
    # The evidence bundle: the finding, the plan, before and after figures, the verdict.
    (bundle,) = [e for e in read_audit(rem.cfg.audit_path)[0] if e["event"] == "evidence"]
    assert bundle["finding"]["subject"] == "broker:2" and bundle["before"]["probe_p99_ms"] == {
        "1": 5,
        "2": 6,
        "3": 5,
    }
    assert [r["probe_p99_ms"].get("3") for r in bundle["during"]] == [8]
    assert [r["probe_p99_ms"].get("3") for r in bundle["after"]] == [450, 450]
    assert bundle["verdict"].startswith("harm: probe p99 of leader 3")
    assert "OPEN — impact of action" in render(rem.state.data) and "harm:" in render(rem.state.data)
    # Paused: findings are kept; after a reset and a resume they are judged.
    rem.handle(good("slow_broker", "broker:2", at=clock.t, active=False))
    assert rem.handle(good("slow_broker", "broker:1", at=clock.t))["event"] == "queued"
    rem.reset()
    rem.signals = ScriptedSignals(clock, [{1: 5, 2: 6, 3: 5}])
    assert [e.get("status") for e in rem.resume()] == ["done"]


def test_no_harm_within_the_settle_period_is_a_verdict_too(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock, impact={"settle_s": 20, "check_every_s": 5})
    rem.signals = ScriptedSignals(clock, [{1: 5, 2: 6, 3: 5}])
    aid = rem.handle(good(at=clock.t))["plan"]
    # The settling action holds the one action slot (max_concurrent_actions 1).
    refused = rem.handle(good("hot_disk", "log_dir:1:/d1", at=clock.t))
    assert refused["event"] == "refused" and "max_concurrent_actions" in refused["reason"]
    for _ in range(5):
        clock.t += 5
        rem.tick()
    a = rem.state.action(aid)
    assert a["status"] == "done" and a["evidence"]["verdict"] == "no harm within 20 s"
    assert len(a["evidence"]["after"]) >= 3


def test_commands_go_through_the_remediator_holding_the_state(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    base = remediator(tmp_path, fake, clock)
    lock = StateLock(base.cfg.state_dir)
    assert lock.acquire()
    rem = Remediator(
        base.cfg, fake, reader=fake, clock=clock, lease=LocalLease(FileInbox(base.cfg.state_dir), lock)
    )
    replies: list[dict] = []
    sender = threading.Thread(
        target=lambda: replies.append(control.send(base.cfg, control.command("pause", "test"), timeout_s=20))
    )
    sender.start()
    while sender.is_alive():
        rem.tick()  # the running remediator answers its inbox between findings
        sender.join(0.1)
    assert replies and replies[0]["ok"] and rem.state.data["paused"]
    # No remediator running: the command is run here, under the lock.
    rem.close()
    reply = control.send(
        base.cfg,
        control.command("resume", "test"),
        timeout_s=5,
        build=lambda cfg, **_: Remediator(cfg, fake, reader=fake, clock=clock),
    )
    assert reply["ok"] and not Remediator(base.cfg, fake, reader=fake, clock=clock).state.data["paused"]


def test_a_restored_broker_catching_up_does_not_hold_the_breaker_against_the_next_victim(
    tmp_path: Path,
) -> None:
    """Broker 1's demotion is undone; while it catches up it is found slow again. It does not
    count as a bad broker, so broker 3's finding is acted on; broker 1's own finding is the
    cooldown's (here 300 s: refused); after the grace, broker 1 counts again."""
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock, cooldown_s=300, circuit_breaker={"returning_grace_s": 120})
    first = rem.handle(good("slow_broker", "broker:1", at=clock.t))
    assert (first["event"], first["status"]) == ("result", "done"), first
    rem.handle(good("slow_broker", "broker:1", at=clock.t, active=False))
    clock.t += 40
    restored = rem.tick()  # healthy for restore_hold_s (30 s): restored
    assert [r["status"] for r in restored] == ["done"] and rem.demoted() == {}, restored
    clock.t += 5
    wake = rem.handle(good("slow_broker", "broker:1", at=clock.t))
    assert wake["event"] == "refused" and wake["reason"].startswith("cooldown: broker:1"), wake
    victim = rem.handle(good("slow_broker", "broker:3", at=clock.t))
    assert (victim["event"], victim["status"]) == ("result", "done"), victim
    assert rem.demoted() == {3: victim["plan"]}
    clock.t += 120  # the grace is over: broker 1 (still active) and broker 3 are two bad brokers
    rem.handle(good("slow_broker", "broker:3", at=clock.t))
    again = rem.handle(good("slow_broker", "broker:1", at=clock.t))
    assert again["event"] == "refused" and "2 of 3 brokers look bad ([1, 3])" in again["reason"], again


def test_without_a_restore_two_slow_brokers_still_stand_the_remediator_down(tmp_path: Path) -> None:
    """The no-false-positive row: the grace is only a restore's; two brokers found slow with no
    restore before are a cluster-wide problem as ever."""
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock, cooldown_s=300)
    rem.handle(good("slow_broker", "broker:1", at=clock.t))
    second = rem.handle(good("slow_broker", "broker:3", at=clock.t))
    assert second["event"] == "refused" and "2 of 3 brokers look bad ([1, 3])" in second["reason"], second
