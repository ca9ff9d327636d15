"""The impact guard on the real 3-broker cluster with the real probe: a demotion of broker 1 moves
its partitions' leadership to broker 2, and broker 2 turns slow as the demotion completes (its JVM
paused 800 ms of every second — a stand-in for a broker the moved clients overload). The probe's
produce p99 for leader 2 rises; the guard stops the action within 30 s of the harm: the demotion
is undone (replica order and preferred leaders back), the remediator paused, the breaker open
until reset, and the evidence bundle (before, after, verdict) audited and shown by ``status``.

The harm must stand clear of the probe's p99 before it, which a saturated machine raises (the
suite's other worker, the brokers' own load): the pauses are long (800 ms, the probe's p99 for
leader 2 at least that) and on time (``own_process``: a pause cycle in this busy interpreter
runs late and skips seconds). A failure shows the watch's readings."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from cli.main import main
from linkwatch.records import ProbeSample
from probe.service import ProbeService
from remediation.audit import read_audit
from remediation.impact import TopicTail
from remediation.remediator import Remediator
from testbed import faults
from testbed.cluster import ClusterState
from tests.probe.cluster_config import probe_config
from tests.remediation.kit import config, create_topic, demoting, finding, leaders, replicas
from tests.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timing, pytest.mark.timeout(300)]

RF3 = {p: [p % 3 + 1, (p + 1) % 3 + 1, (p + 2) % 3 + 1] for p in range(6)}  # broker 1 prefers 0 and 3
STOP_WITHIN_S = 30.0


def _probed_leaders(bootstrap: str, topic: str) -> set[int]:
    tail = TopicTail(bootstrap, topic)
    try:
        return {r.broker for r in tail.read(6.0, time.time()) if isinstance(r, ProbeSample)}
    finally:
        tail.close()


def test_the_impact_guard_stops_an_action_that_hurts(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path, capsys
) -> None:
    create_topic(admin, topic_name, RF3)
    samples = f"{topic_name}-probe"
    create_topic(admin, samples, {p: RF3[p] for p in range(3)})  # the probe's; none made on use
    probe = ProbeService(probe_config(cluster3.bootstrap, 2, samples_topic=samples))
    stop = threading.Event()
    runner = threading.Thread(target=probe.run, args=(stop,), daemon=True)
    runner.start()
    pause = None
    try:
        wait_until(
            lambda: _probed_leaders(cluster3.bootstrap, samples) == {1, 2, 3},
            90,
            "probe windows for every leader",
            every_s=2,
        )
        cfg, path = config(
            tmp_path,
            cluster3.bootstrap,
            **demoting(topic_name),
            impact={
                "settle_s": 90,
                "check_every_s": 2,
                "breach_checks": 2,
                "probe": {"topic": samples, "window_s": 6, "max_increase_ms": 150, "floor_ms": 100},
            },
        )
        rem = Remediator(cfg, admin)
        result = rem.handle(finding("slow_broker", "broker:1"))
        assert result["status"] == "done", result
        aid = result["plan"]
        assert rem.state.action(aid)["status"] == "settling"
        assert 1 not in leaders(admin, topic_name).values()

        pause = faults.PauseDutyCycle(
            cluster3.node(2).pid, pause_ms=800, period_ms=1000, own_process=True
        ).start()
        harm_at = time.monotonic()
        stopped: list[dict] = []
        while not stopped and time.monotonic() - harm_at < 90:
            stopped = [e for e in rem.tick() if e.get("status") == "stopped"]
            time.sleep(0.5)
        took_s = time.monotonic() - harm_at
        pause.stop()
        pause = None
        watch = rem.state.action(aid).get("watch") or {}
        assert stopped, (
            f"the guard did not stop the action in {took_s:.0f} s; before {watch.get('before')}, "
            f"last readings {watch.get('readings', [])[-4:]}"
        )
        print(f"\nthe guard stopped the action {took_s:.1f} s after the harm began: {stopped[0]['harm']}")
        assert "probe p99 of leader 2" in stopped[0]["harm"]
        assert took_s < STOP_WITHIN_S

        # Undone exactly, paused, breaker open until a person resets it.
        assert replicas(admin, topic_name) == RF3
        wait_until(
            lambda: leaders(admin, topic_name) == {p: r[0] for p, r in RF3.items()}, 30, "leaders back"
        )
        assert rem.state.data["paused"] and rem.state.data["breaker"]["by"] == "impact"
        assert rem.handle(finding("slow_broker", "broker:3"))["event"] == "queued"

        (bundle,) = [e for e in read_audit(cfg.audit_path)[0] if e["event"] == "evidence"]
        assert bundle["action"] == aid and bundle["finding"]["subject"] == "broker:1"
        assert set(bundle["before"]["probe_p99_ms"]) == {"1", "2", "3"} and bundle["after"]
        assert bundle["verdict"].startswith("harm: ")
        assert main(["remediate", "status", "-c", str(path)]) == 0
        out = capsys.readouterr().out
        assert "breaker: OPEN — impact of action" in out and f"{aid}  stopped" in out
        assert main(["remediate", "status", "-c", str(path), "--action", aid]) == 0
        shown = json.loads(capsys.readouterr().out)
        assert shown["verdict"] == bundle["verdict"] and shown["before"] == bundle["before"]
        assert main(["remediate", "reset", "-c", str(path)]) == 0
        assert rem.state.__class__(cfg.state_dir / "state.json").data["breaker"] is None
    finally:
        if pause is not None:
            pause.stop()
        stop.set()
        runner.join(30)
        probe.close()
