"""``rebalance_load`` on the real 3-broker cluster: every leader of a loaded topic on broker 1.

The finding is built here in the shape the ``skewed_partitions`` detector emits (per-partition
``bytes_in`` loads of the data this test produced, three skewed windows): running the Spark
analyzer for it would add minutes and prove nothing about the planner.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from linkwatch.imbalance import imbalance
from remediation.audit import read_audit
from remediation.remediator import Remediator
from remediation.view import read_view
from testbed.cluster import ClusterState
from tests.remediation.kit import config, create_topic, finding, leaders, produce, replicas
from tests.waiting import wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.timing]

# Six partitions, RF 3, broker 1 preferred (and leader) of all of them.
ALL_ON_1 = {p: [1, 2 + p % 2, 3 - p % 2] for p in range(6)}
PER_PARTITION = 256 * 1024
WINDOW_S = 60
HOLD_S = 3


def _factor(admin, topic: str, loads: dict[int, float]) -> float:
    by_broker = dict.fromkeys((1, 2, 3), 0.0)
    for p, b in leaders(admin, topic).items():
        by_broker[b] += loads[p]
    return imbalance(by_broker)[0]


def test_h1_leadership_plan_executed_then_reverted_by_h3(
    cluster3: ClusterState, admin, topic_name: str, tmp_path: Path
) -> None:
    create_topic(admin, topic_name, ALL_ON_1)
    produce(cluster3.bootstrap, topic_name, dict.fromkeys(range(6), PER_PARTITION))
    loads = dict.fromkeys(range(6), PER_PARTITION / WINDOW_S)
    evidence = {
        "topic": topic_name,
        "hot_partitions": [],
        "hot_keys": [],
        "values": {"bytes_in": {"ratio": [2.0, 2.0, 2.0], "loads": {str(p): v for p, v in loads.items()}}},
        "baseline": {"bytes_in": {"avg": PER_PARTITION / WINDOW_S, "max_imbalance": 1.0}},
    }
    settings = {"max_factor": 0.25, "min_total": 1024, "hold_s": HOLD_S}
    rules = {"skewed_partitions": "rebalance_load"}
    subject = f"topic:{topic_name}"
    assert _factor(admin, topic_name, loads) == pytest.approx(2.0)

    # Dry run (the default): the plan is audited, nothing changes.
    dry_cfg, _ = config(
        tmp_path / "dry",
        cluster3.bootstrap,
        execute=False,
        rules=rules,
        remediations={"rebalance_load": settings},
    )
    before = read_view(admin, [topic_name]).summary()
    dry = Remediator(dry_cfg, admin).handle(finding("skewed_partitions", subject, **evidence))
    time.sleep(2)
    assert dry["event"] == "dry_run", dry
    assert read_view(admin, [topic_name]).summary() == before
    plans = [e for e in read_audit(dry_cfg.audit_path)[0] if e["event"] == "plan"]
    steps = plans[0]["plan"]["steps"]
    assert steps and {s["kind"] for s in steps} == {"lead"}
    assert steps[-1]["params"]["factor_after"] <= 0.25
    assert "factor_after" in plans[0]["text"]  # the printed plan shows the factor after each step

    # Executed: leadership spreads, no replica set changes, the factor drops under the threshold.
    cfg, _ = config(
        tmp_path / "run", cluster3.bootstrap, rules=rules, remediations={"rebalance_load": settings}
    )
    rem = Remediator(cfg, admin)
    t0 = time.monotonic()
    result = rem.handle(finding("skewed_partitions", subject, **evidence))
    assert result["status"] == "done", result
    took_s = time.monotonic() - t0
    wait_until(lambda: _factor(admin, topic_name, loads) <= 0.25, 30, "broker factor under 0.25")
    assert {p: sorted(r) for p, r in replicas(admin, topic_name).items()} == {
        p: sorted(r) for p, r in ALL_ON_1.items()
    }

    # H3 by itself (the remediator's tick): nothing while the topic is still skewed, nor before the
    # hold time after the finding cleared; then the H1 steps are reverted, once.
    assert rem.tick() == []
    rem.handle(finding("skewed_partitions", subject, active=False, **evidence))
    assert rem.tick() == []
    time.sleep(HOLD_S + 0.5)
    back = rem.tick()
    assert [b["status"] for b in back] == ["done"], back
    assert rem.state.action(result["plan"])["status"] == "undone"
    assert rem.tick() == []
    assert replicas(admin, topic_name) == ALL_ON_1
    wait_until(lambda: set(leaders(admin, topic_name).values()) == {1}, 30, "leaders back on broker 1")
    print(f"H1 plan of {len(steps)} leadership steps executed in {took_s:.1f} s")
