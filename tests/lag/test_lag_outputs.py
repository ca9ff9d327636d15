"""Outputs: findings only on change, metrics over real HTTP, records on real topics, the lease."""

from __future__ import annotations

import time
import urllib.request

import pytest
from kafka import KafkaConsumer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from lag.collector import GroupLag, PassResult
from lag.lease import GroupLease
from lag.outputs import LagFindings, StatusChanges
from lag.rules import GroupVerdict, Status
from lag.runner import LagConfig, LagService
from linkwatch.records import ConsumerLag, Finding, decode
from tests.lag.lagkit import commit, make_topic


def pass_with(ts_s: float, statuses: dict[str, Status], errors: list[str] | None = None) -> PassResult:
    groups = {
        g: GroupLag(g, "Empty", False, [], GroupVerdict(s, f"{s.value} because", {}))
        for g, s in statuses.items()
    }
    return PassResult(ts_s=ts_s, groups=groups, errors=errors or [])


# Each row: a sequence of passes (statuses of group "a") and the findings expected after each
# pass as (status, active) pairs.
TRACKER_CASES = [
    ("OK all along: nothing", [Status.OK] * 4, [[], [], [], []]),
    (
        "one episode",
        [Status.OK, Status.STOP, Status.STOP, Status.OK],
        [[], [("STOP", True)], [], [("STOP", False)]],
    ),
    (
        "status changes inside an episode",
        [Status.WARN, Status.STOP, Status.STOP],
        [[("WARN", True)], [("WARN", False), ("STOP", True)], []],
    ),
    ("ERR is an episode too", [Status.ERR, Status.ERR], [[("ERR", True)], []]),
]


@pytest.mark.parametrize(("name", "statuses", "expected"), TRACKER_CASES, ids=[c[0] for c in TRACKER_CASES])
def test_findings_only_on_change(name: str, statuses: list[Status], expected: list) -> None:
    tracker = LagFindings("c1", "i1", refresh_s=1000)
    for i, (st, want) in enumerate(zip(statuses, expected, strict=True)):
        got = tracker.update(pass_with(100.0 + i, {"a": st}))
        assert [(f.evidence["status"], f.active) for f in got] == want, f"pass {i}"


def test_active_episode_is_repeated_with_the_same_key_after_refresh() -> None:
    tracker = LagFindings("c1", "i1", refresh_s=60)
    first = tracker.update(pass_with(100.0, {"a": Status.STOP}))
    assert tracker.update(pass_with(130.0, {"a": Status.STOP})) == []
    again = tracker.update(pass_with(161.0, {"a": Status.STOP}))
    assert len(first) == len(again) == 1
    assert again[0].dedup_key() == first[0].dedup_key()
    assert again[0].evidence["decided_ms"] == 161_000


def test_vanished_group_closes_its_episode_but_a_failed_pass_does_not() -> None:
    tracker = LagFindings("c1", "i1")
    tracker.update(pass_with(100.0, {"a": Status.STALL}))
    assert tracker.update(pass_with(110.0, {}, errors=["cannot list groups: timeout"])) == []
    closed = tracker.update(pass_with(120.0, {}))
    assert [(f.subject, f.active, f.evidence["reason"]) for f in closed] == [
        ("group:a", False, "group no longer listed")
    ]


@pytest.mark.cluster
def test_service_publishes_metrics_samples_and_findings(
    cluster3, admin, topic_name, producer, group_name
) -> None:
    make_topic(admin, topic_name)
    samples, findings = (
        make_topic(admin, topic_name + "-samples"),
        make_topic(admin, topic_name + "-findings"),
    )
    tp = TopicPartition(topic_name, 0)
    for _ in range(30):
        producer.send(topic_name, b"v", partition=0)
    producer.flush()
    commit(admin, group_name, {tp: 10})
    cfg = LagConfig.model_validate(
        {
            "bootstrap_servers": cluster3.bootstrap,
            "cluster": "test",
            "instance": "one",
            "interval_s": 0.5,
            "collector": {"include": [f"^{group_name}$"], "window_s": 2.0, "min_evaluations": 3},
            "metrics": {"port": 0},
            "publish": {"samples_topic": samples, "findings_topic": findings},
            "cold_read": {"windows_from": "static"},
        }
    )
    service = LagService(cfg)
    try:
        port = service.serve_metrics()
        sent: list[Finding] = []
        for _ in range(8):
            sent += service.step()[1]
            time.sleep(0.5)
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        service.close()
    assert [(f.evidence["status"], f.active) for f in sent if f.rule == "consumer_lag"] == [("STOP", True)]
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(body)
        for s in fam.samples
    }
    base = (("cluster", "test"), ("group", group_name))
    part = (("partition", "0"), ("topic", topic_name))
    assert values[("linkwatch_consumer_lag_messages", tuple(sorted(base + part)))] == 20
    assert values[("linkwatch_consumer_group_lag_messages", tuple(sorted((*base, ("agg", "sum")))))] == 20
    assert values[("linkwatch_consumer_group_status", tuple(sorted((*base, ("status", "STOP")))))] == 1
    assert values[("linkwatch_consumer_group_status", tuple(sorted((*base, ("status", "OK")))))] == 0
    secs = [v for (n, labels), v in values.items() if n == "linkwatch_consumer_lag_seconds"]
    assert len(secs) == 1 and secs[0] > 0
    recs = read_all(cluster3.bootstrap, samples)
    assert len(recs) == 8 and all(isinstance(r, ConsumerLag) for r in recs)
    assert recs[-1].status == "STOP" and recs[-1].lag_messages == 20
    published = read_all(cluster3.bootstrap, findings)
    assert [f.summary for f in published] == [f.summary for f in sent]


def read_all(bootstrap: str, topic: str) -> list:
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None)
    out = []
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            polled = c.poll(timeout_ms=500)
            if not polled and out:
                break
            out += [decode(r.value) for rs in polled.values() for r in rs]
    finally:
        c.close()
    return out


@pytest.mark.cluster
@pytest.mark.timing
def test_two_instances_publish_each_finding_once(cluster3, admin, topic_name, producer, group_name) -> None:
    make_topic(admin, topic_name)
    lease_topic = make_topic(admin, topic_name + "-lease")
    findings = make_topic(admin, topic_name + "-findings")
    tp = TopicPartition(topic_name, 0)
    for _ in range(30):
        producer.send(topic_name, b"v", partition=0)
    producer.flush()
    commit(admin, group_name, {tp: 10})

    def config(instance: str) -> LagConfig:
        return LagConfig.model_validate(
            {
                "bootstrap_servers": cluster3.bootstrap,
                "cluster": "test",
                "instance": instance,
                "collector": {"include": [f"^{group_name}$"], "window_s": 2.0, "min_evaluations": 3},
                "metrics": {"enabled": False},
                "publish": {"samples": False, "findings_topic": findings},
                "ha": {
                    "enabled": True,
                    "lease_topic": lease_topic,
                    "lease_group": group_name + "-lease",
                    "session_timeout_ms": 6000,
                },
                "cold_read": {"windows_from": "static"},
                "rack": {"enabled": False},
            }
        )

    a, b = LagService(config("a")), LagService(config("b"))
    try:
        # Both join; wait until exactly one holds the lease and it stays put for 3 s.
        deadline, stable_since = time.monotonic() + 90, None
        while time.monotonic() < deadline:
            one = a.lease.held() != b.lease.held()
            stable_since = (stable_since or time.monotonic()) if one else None
            if stable_since and time.monotonic() - stable_since > 3:
                break
            time.sleep(0.2)
        assert a.lease.held() != b.lease.held()
        for _ in range(8):
            a.step(), b.step()
            time.sleep(0.5)
        assert a.lag_findings.open_episodes == b.lag_findings.open_episodes == {group_name: Status.STOP}
        # Both saw the episode; it was published once, by whoever held the lease then.
        assert sorted((a.findings_sent, b.findings_sent)) == [0, 1]
        holder, other = (a, b) if a.lease.held() else (b, a)
        # The holder goes away: the other takes the lease over.
        holder.close()
        assert isinstance(other.lease, GroupLease)
        # Session timeout (6 s) plus a rebalance, on a possibly very busy machine.
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline and not other.lease.held():
            time.sleep(0.2)
        assert other.lease.held()
    finally:
        for s in (a, b):
            s.close()
    published = read_all(cluster3.bootstrap, findings)
    sender = a if a.findings_sent else b
    assert [(f.source, f.evidence["status"]) for f in published] == [(sender.config.instance, "STOP")]


# (statuses at each pass, the lines `lag run --print` shows for each pass): statuses first, then
# only changes; a steady pass shows nothing.
PRINTED = [
    (
        "first pass shows every group",
        [{"a": Status.OK, "b": Status.WARN}],
        [["a OK: lag max 3 (?); OK because", "b WARN: lag max 3 (?); WARN because"]],
    ),
    (
        "steady passes are quiet",
        [{"a": Status.OK}, {"a": Status.OK}, {"a": Status.OK}],
        [["a OK: lag max 3 (?); OK because"], [], []],
    ),
    (
        "a change names the status before",
        [
            {"a": Status.OK, "b": Status.OK},
            {"a": Status.STOP, "b": Status.OK},
            {"a": Status.OK, "b": Status.OK},
        ],
        [
            ["a OK: lag max 3 (?); OK because", "b OK: lag max 3 (?); OK because"],
            ["a OK -> STOP: lag max 3 (?); STOP because"],
            ["a STOP -> OK: lag max 3 (?); OK because"],
        ],
    ),
    (
        "new and gone groups",
        [{"a": Status.OK}, {"b": Status.STALL}],
        [["a OK: lag max 3 (?); OK because"], ["b STALL: lag max 3 (?); STALL because", "a gone (was OK)"]],
    ),
]


@pytest.mark.parametrize(("name", "passes", "shown"), PRINTED, ids=[p[0] for p in PRINTED])
def test_lag_run_print_shows_statuses_then_changes(
    name: str, passes: list[dict[str, Status]], shown: list[list[str]]
) -> None:
    changes = StatusChanges()
    got = []
    for statuses in passes:
        result = PassResult(
            ts_s=0.0,
            groups={
                g: GroupLag(g, "Empty", False, [], GroupVerdict(s, f"{s.value} because", {}), lag_max=3)
                for g, s in statuses.items()
            },
        )
        got.append([line.removeprefix("12:00:00 ") for line in changes.lines(result, [], "12:00:00")])
    assert got == shown
