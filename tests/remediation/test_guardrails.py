"""Guardrail rules: tables, one row per scenario, including the rows that must let an action through."""

from __future__ import annotations

import pytest

from remediation import guardrails as g
from remediation.config import CapsConfig, CircuitBreakerConfig

CB = CircuitBreakerConfig()


@pytest.mark.parametrize(
    ("active", "brokers", "opens"),
    [
        ({}, 3, None),  # nothing bad
        ({"slow_broker|broker:2": 0.0}, 3, None),  # one slow broker out of three: act
        ({"slow_broker|broker:2": 0.0, "hot_disk|broker:1": 0.0}, 3, None),  # other rules do not count
        ({"slow_broker|broker:1": 0.0, "slow_broker|broker:2": 0.0}, 3, "2 of 3 brokers look bad"),
        ({f"slow_broker|broker:{b}": 0.0 for b in (1, 2, 3)}, 3, "3 of 3 brokers look bad"),
        ({"cluster_slow|cluster:c": 0.0}, 3, "cluster-wide finding active (cluster_slow)"),
        ({"slow_broker|broker:1": 0.0}, 2, "1 of 2 brokers look bad"),  # 50 % of a small cluster
        ({"slow_broker|broker:1": 0.0}, 10, None),
    ],
)
def test_circuit_breaker(active: dict[str, float], brokers: int, opens: str | None) -> None:
    reason = g.circuit_open(active, brokers, CB)
    if opens is None:
        assert reason is None
    else:
        assert reason is not None and opens in reason


@pytest.mark.parametrize(
    ("active", "back", "opens"),
    [
        # broker 1 was just restored and is catching up: its finding is the restore's wake, so the
        # real victim (3) is not held back by it
        ({"slow_broker|broker:1": 0.0, "slow_broker|broker:3": 0.0}, {1}, None),
        # no-false-positive rows: a returning broker does not hide a cluster-wide problem
        ({f"slow_broker|broker:{b}": 0.0 for b in (1, 2, 3)}, {1}, "2 of 3 brokers look bad ([2, 3])"),
        ({"cluster_slow|cluster:c": 0.0}, {1}, "cluster-wide finding active"),
        ({"slow_broker|broker:1": 0.0, "slow_broker|broker:3": 0.0}, set(), "2 of 3 brokers look bad"),
    ],
)
def test_a_returning_broker_does_not_count_as_bad(
    active: dict[str, float], back: set[int], opens: str | None
) -> None:
    reason = g.circuit_open(active, 3, CB, returning=back)
    assert reason is None if opens is None else (reason is not None and opens in reason), reason


@pytest.mark.parametrize(
    ("returned", "now", "back"),
    [
        ({"1": 1000.0}, 1060.0, {1: 60.0}),  # inside the grace
        ({"1": 1000.0}, 1120.0, {}),  # the grace (120 s) is over
        ({"1": 1000.0, "3": 1100.0}, 1110.0, {1: 110.0, 3: 10.0}),
        ({}, 1000.0, {}),
        ({"²": 1000.0, "1": "soon", "02": 1000.0}, 1010.0, {}),  # a state edited by hand: ignored
    ],
)
def test_returning_brokers(returned: dict[str, float], now: float, back: dict[int, float]) -> None:
    assert g.returning_brokers(_restores(returned), CB.returning_grace_s, now) == back


def _restores(returned: dict[str, object]) -> dict[str, dict]:
    """The execution state's actions for ``broker -> when its demotion's undo finished``: the
    demotion (``undone``) and its undo (``done``). A key that is not a broker id stays text, as
    a hand-edited state would have it."""
    actions: dict[str, dict] = {}
    for k, t in returned.items():
        try:
            b: object = int(k) if str(int(k)) == k else k
        except ValueError:
            b = k
        actions[f"a{k}"] = {"status": "undone", "plan": {"demotes": [b]}}
        actions[f"u{k}"] = {"undo_of": f"a{k}", "status": "done", "finished": t}
    return actions


def test_the_unwinding_of_a_failed_demotion_is_not_a_restore() -> None:
    actions = _restores({"1": 1000.0})
    actions["a1"]["status"] = "failed"  # its applied steps were undone when it failed
    assert g.returning_brokers(actions, CB.returning_grace_s, 1010.0) == {}


@pytest.mark.parametrize(
    ("last", "now", "refused"),
    [
        ({}, 100.0, False),
        ({"broker:2": 0.0}, 599.0, True),
        ({"broker:2": 0.0}, 600.0, False),
        ({"broker:3": 0.0}, 1.0, False),
    ],
)
def test_cooldown(last: dict[str, float], now: float, refused: bool) -> None:
    assert (g.cooling_down("broker:2", last, 600.0, now) is not None) is refused


@pytest.mark.parametrize(
    ("running", "demoted", "demotes", "brokers", "caps", "expected"),
    [
        (0, [], [2], 3, CapsConfig(), None),
        (1, [], [2], 3, CapsConfig(), "max_concurrent_actions 1"),
        (0, [1], [2], 3, CapsConfig(), "max_demoted_brokers 1"),
        (0, [2], [2], 3, CapsConfig(), None),  # already demoted: no new broker
        (0, [1], [2], 3, CapsConfig(max_demoted_brokers=5), "max_demoted_share 34%"),
        (0, [1], [2], 10, CapsConfig(max_demoted_brokers=5), None),
        (0, [], [], 3, CapsConfig(max_demoted_brokers=0), None),  # a plan that demotes nobody
        (5, [], [2], 3, CapsConfig(max_concurrent_actions=None, max_demoted_brokers=1), None),
    ],
)
def test_caps(running, demoted, demotes, brokers, caps, expected) -> None:
    reason = g.over_caps(running, demoted, demotes, brokers, caps)
    assert reason is None if expected is None else expected in reason


def test_duplicate() -> None:
    assert g.duplicate("c/slow_broker/broker:2/5", ["c/slow_broker/broker:2/5"]) is not None
    assert g.duplicate("c/slow_broker/broker:2/6", ["c/slow_broker/broker:2/5"]) is None


def test_seen_findings_active_cleared_and_lapsed() -> None:
    t = g.SeenFindings()
    t.observe("slow_broker", "broker:2", True, 100.0)
    assert t.healthy_since("broker:2", 150.0, 300.0) is None
    t.observe("slow_broker", "broker:2", False, 200.0)
    assert t.healthy_since("broker:2", 250.0, 300.0) == 200.0
    t.observe("slow_broker", "broker:3", True, 100.0)  # never cleared, stopped repeating
    assert t.healthy_since("broker:3", 500.0, 300.0) == 400.0
    assert t.current(500.0, 300.0) == {}
    assert t.healthy_since("broker:9", 500.0, 300.0) is None  # never seen: nothing to restore


@pytest.mark.parametrize(
    ("subject", "broker"),
    [
        ("broker:2", 2),
        ("broker:0", 0),
        ("broker:x", None),
        ("topic:b", None),
        ("broker:", None),
        ("broker:²", None),  # str.isdigit() is true, int() raises: refused here
        ("broker:02", None),
        ("broker:" + "9" * 5000, None),
        ("broker:1:/d", None),
    ],
)
def test_broker_of(subject: str, broker: int | None) -> None:
    assert g.broker_of(subject) == broker
