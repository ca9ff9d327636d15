"""``bench/fault_matrix.py``'s judging and ``--explain``, without a cluster: the explanation on the
smoke's made-up run (broker 2 stalled 40-100 s of 150: its leaders' acks=all wait at 900 ms)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import fault_matrix  # a script's module: bench/ on the path, as when it runs

LINE = re.compile(r"^\s*([+-]\d+)s (b1:\S+) (b2:\S+) (b3:\S+) cluster:")


def _walk() -> dict[int, tuple[str, str, str, str]]:
    lines = fault_matrix.explain_draw(fault_matrix.smoke_run("leader_pause_400"), "leader_pause_400")
    assert lines[0].startswith("leader_pause_400: fault 60 s")
    out = {}
    for line in lines[1:]:
        m = LINE.match(line)
        assert m, line
        out[int(m[1])] = (m[2], m[3], m[4], line)
    return out


def test_the_walk_blames_the_stalled_follower_only_while_its_peers_wait_on_it() -> None:
    walk = _walk()
    assert sorted(walk) == list(range(-30, 111, 10))  # one line per window end, none twice
    for t, (b1, b2, b3, line) in walk.items():
        assert b1 == "b1:h0" and b3 == "b3:h0", line  # the waiting leaders are never blamed
        if t <= 0:
            assert b2 == "b2:h0" and "blamed={}" in line, line
        elif t <= 60:
            assert b2.startswith("b2:b") and "peers wait on it:remote!" in line, line
    assert walk[20][1] == "b2:b2AS"  # fire_score 2: active (and slow) at the second window
    assert walk[70][1] == "b2:h4AS"  # healthy again, still active: clear_windows 3
    assert walk[90][1] == "b2:h0"  # cleared at the third healthy window


def test_an_unknown_scenario_names_the_ones_the_run_holds() -> None:
    with pytest.raises(SystemExit, match="no scenario 'd99' in the run; it holds leader_pause_400"):
        fault_matrix.explain_draw(fault_matrix.smoke_run("leader_pause_400"), "d99")


def test_a_saved_run_keeps_its_cluster_so_the_walk_reads_its_records(tmp_path: Path) -> None:
    """bench/remediation_recover.py's draws save runs whose agents name the cluster "demo": the
    walk over them must read those records, not look for the fault matrix's own cluster."""
    import dataclasses

    from linkwatch import records as R

    run = fault_matrix.smoke_run("leader_pause_400")
    demo = dataclasses.replace(
        run,
        records=[dataclasses.replace(r, cluster="demo") for r in run.records],
        cluster="demo",
    )
    assert {r.cluster for r in demo.records if isinstance(r, R.StageSketch)} == {"demo"}
    fault_matrix.save_run(demo, tmp_path / "run.json")
    loaded = fault_matrix.load_run(tmp_path / "run.json")
    assert loaded.cluster == "demo"
    assert fault_matrix.explain_draw(loaded, "leader_pause_400") == fault_matrix.explain_draw(
        run, "leader_pause_400"
    )
    # Without the cluster (as saved before it was kept), the same records say nothing.
    assert len(fault_matrix.explain_draw(dataclasses.replace(loaded, cluster="fm"), "leader_pause_400")) == 1


# --- judging: flaps --------------------------------------------------------------------------

TWO_SLOW = fault_matrix.Scenario("d15-two_slow-b13", "two_slow", (1, 3), {}, {"mix": "both"}, 60.0)
SPAN = {"before": (960.0, 1000.0), "fault": (1000.0, 1062.0), "after": (1062.0, 1130.0)}
CLUSTER = f"cluster:{fault_matrix.CLUSTER}"


def _iv(rule: str, subject: str, start: float, end: float | None) -> fault_matrix.Interval:
    return fault_matrix.Interval(rule, subject, start, end, ["remote"])


@pytest.mark.parametrize(
    ("name", "intervals", "flaps"),
    [
        (
            # broker 3 found first, degraded then escalated to slow: one finding going on. The
            # cluster's finding of an earlier draw (the run's earliest) does not make this
            # draw's subject the cluster, found 20 s after the first fire.
            "escalation on the first subject, the cluster found in an earlier draw too",
            [
                _iv("cluster_slow", CLUSTER, 100.0, 160.0),
                _iv("degraded_broker", "broker:3", 1015.0, 1045.0),
                _iv("cluster_slow", CLUSTER, 1035.0, 1080.0),
                _iv("slow_broker", "broker:3", 1045.0, 1105.0),
                _iv("slow_broker", "broker:1", 1045.0, 1100.0),
            ],
            0,
        ),
        (
            "the first subject cleared mid-fault and fired again",
            [
                _iv("degraded_broker", "broker:3", 1015.0, 1030.0),
                _iv("slow_broker", "broker:3", 1045.0, 1105.0),
                _iv("slow_broker", "broker:1", 1020.0, 1100.0),
            ],
            1,
        ),
        (
            "the first subject cleared mid-fault and never fired again",
            [_iv("slow_broker", "broker:3", 1015.0, 1040.0), _iv("slow_broker", "broker:1", 1020.0, 1100.0)],
            1,
        ),
        ("one finding from fire to past the fault's end", [_iv("slow_broker", "broker:1", 1020.0, None)], 0),
    ],
)
def test_a_flap_is_the_first_subject_of_the_draw_clearing_while_its_fault_is_on(
    name: str, intervals: list[fault_matrix.Interval], flaps: int
) -> None:
    result = fault_matrix.judge("analyzer", TWO_SLOW, intervals, SPAN)
    assert result.verdict == "right", name
    assert result.flaps == flaps, name


def _alert(ts: float, status: str, stage: str, fingerprint: str) -> dict:
    labels = {"alertname": "LinkwatchSlowBrokerFinding", "cluster": "fm", "broker": "3", "stage": stage}
    return {
        "ts": ts,
        "status": status,
        "alertname": labels["alertname"],
        "labels": labels,
        "fingerprint": fingerprint,
    }


def test_alerts_of_one_finding_make_one_interval_until_the_last_resolves() -> None:
    """The notifications of a leader pause on broker 3 (run 2, d26), as the receiver got them:
    the finding changed stage three times; Alertmanager sent each old stage's resolution beside
    the new stage's firing, the resolution first. One finding from +22.3 s to +107.4 s."""
    alerts = [
        _alert(22.3, "firing", "requestQueue", "a"),
        _alert(27.3, "resolved", "requestQueue", "a"),
        _alert(27.3, "firing", "responseQueue", "b"),
        _alert(47.3, "firing", "requestQueue", "a"),
        _alert(47.3, "resolved", "responseQueue", "b"),
        _alert(67.3, "resolved", "requestQueue", "a"),
        _alert(67.3, "firing", "remote", "c"),
        _alert(107.4, "resolved", "remote", "c"),
    ]
    (interval,) = fault_matrix.alert_intervals(alerts)
    assert (interval.subject, interval.start, interval.end) == ("broker:3", 22.3, 107.4)
    assert interval.stages == ["requestQueue", "responseQueue", "remote"]
