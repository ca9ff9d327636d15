"""Findings are untrusted input: one table of malformed findings (each with its drop reason), the
issue's poison cases, and a property: arbitrary bad findings interleaved with good ones never
change how the good ones are judged, never crash, never reach the persisted state."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linkwatch.records import Finding
from remediation import intake
from remediation.audit import read_audit
from remediation.config import IntakeConfig
from remediation.remediator import Remediator
from tests.remediation.fake_cluster import FakeCluster
from tests.remediation.kit import config

NOW = 1_800_000_000.0
BROKERS = {1, 2, 3}


class Clock:
    def __init__(self, t: float = NOW) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def good(
    rule: str = "slow_broker", subject: str = "broker:2", *, at: float = NOW, active: bool = True
) -> dict:
    return Finding(
        cluster="test",
        source="analyzer",
        ts_ms=int(at * 1000),
        rule=rule,
        subject=subject,
        severity="warning",
        summary=f"{rule} on {subject}",
        evidence={"stage": "local"},
        action="",
        active=active,
    ).to_dict()


def with_(**fields: Any) -> dict:
    d = good()
    d.update(fields)
    return d


def without(field: str) -> dict:
    d = good()
    del d[field]
    return d


def remediator(tmp: Path, fake: FakeCluster, clock: Clock, **overrides: Any) -> Remediator:
    settings_: dict[str, Any] = {
        "bootstrap_servers": "fake:9092",
        "rules": {"slow_broker": "demote_leadership", "hot_disk": "noop"},
        "remediations": {"demote_leadership": None, "noop": None},
        "restore_hold_s": 30,
        "impact": {"settle_s": 0},
    }
    settings_.update(overrides)
    cfg, _ = config(tmp, "fake:9092", **settings_)
    return Remediator(cfg, fake, reader=fake, clock=clock)


# -- one table of malformed findings ----------------------------------------------------------

MALFORMED = [
    ("broker:²", with_(subject="broker:²"), "bad_subject"),  # str.isdigit() says yes, int() says no
    ("5,000 digits", with_(subject="broker:" + "9" * 5000), "bad_subject"),
    ("phantom broker", with_(subject="broker:99"), "unknown_broker"),
    ("negative broker", with_(subject="broker:-1"), "bad_subject"),
    ("arabic-indic digit", with_(subject="broker:٣"), "bad_subject"),
    ("empty broker id", with_(subject="broker:"), "bad_subject"),
    ("leading zero", with_(subject="broker:02"), "bad_subject"),  # broker 2 under another name
    ("unknown kind", with_(subject="rack:a"), "bad_subject"),
    ("no kind", with_(subject="2"), "bad_subject"),
    ("phantom log dir broker", with_(subject="log_dir:7:/d"), "unknown_broker"),
    ("control character", with_(subject="group:a\x00b"), "bad_subject"),
    ("topic with a space", with_(subject="topic:a b"), "bad_subject"),
    ("other cluster", with_(cluster="prod-eu"), "other_cluster"),
    ("unknown severity", with_(severity="apocalyptic"), "bad_severity"),
    ("severity not text", with_(severity=3), "bad_type"),
    ("rule with a newline", with_(rule="slow_broker\n"), "bad_rule"),
    ("stale", with_(ts_ms=int((NOW - 3600) * 1000)), "stale"),
    ("from the future", with_(ts_ms=int((NOW + 3600) * 1000)), "from_future"),
    ("ts_ms of 5,000 digits", with_(ts_ms=10**5000), "bad_value"),
    ("ts_ms negative", with_(ts_ms=-5), "bad_value"),
    ("ts_ms a string", with_(ts_ms="now"), "bad_type"),
    ("active a string", with_(active="false"), "bad_type"),
    ("evidence a list", with_(evidence=[1]), "bad_type"),
    ("evidence too large", with_(evidence={"x": "y" * 70_000}), "bad_evidence"),
    ("summary too long", with_(summary="s" * 5000), "too_long"),
    ("missing subject", without("subject"), "missing_field"),
    ("future version", with_(v=99), "future_version"),
    ("another kind", with_(kind="probe"), "missing_field"),
    ("not an object", [1, 2], "not_a_finding"),
    ("nothing", None, "not_a_finding"),
]


@pytest.mark.parametrize(
    ("raw", "reason"), [(r, why) for _, r, why in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_malformed_findings_are_dropped_with_their_reason(raw: Any, reason: str) -> None:
    got = intake.admit(raw, cluster="test", brokers=BROKERS, now_s=NOW, cfg=IntakeConfig())
    assert isinstance(got, intake.Dropped) and got.reason == reason, got
    assert len(got.preview) < 200  # never the whole input in a log line or the audit


@pytest.mark.parametrize(
    "subject",
    [
        "broker:2",
        "log_dir:1:/var/kafka-1",
        "topic:orders",
        "topic-partition:orders-3",
        "group:billing",
        "cluster",
        "cluster:test",
        "client:etl-7",
    ],
)
def test_well_formed_subjects_are_admitted(subject: str) -> None:
    got = intake.admit(with_(subject=subject), cluster="test", brokers=BROKERS, now_s=NOW, cfg=IntakeConfig())
    assert isinstance(got, Finding) and got.subject == subject


def test_a_finding_built_in_code_is_checked_too() -> None:
    f = Finding(
        cluster="test",
        source="s",
        ts_ms=10**30,
        rule="slow_broker",
        subject=2,  # type: ignore[arg-type]
        severity="warning",
        summary="",
        evidence={},
        action="",
    )
    got = intake.admit(f, cluster="test", brokers=BROKERS, now_s=NOW, cfg=IntakeConfig())
    assert isinstance(got, intake.Dropped) and got.reason == "bad_type"


# -- the poison cases on a remediator -------------------------------------------------


@pytest.mark.parametrize("poison", ["broker:²", "broker:" + "7" * 5000])
def test_one_bad_subject_never_disables_remediation(tmp_path: Path, poison: str) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock)
    assert rem.handle(with_(subject=poison))["event"] == "dropped"
    clock.t += 1
    result = rem.handle(good(at=clock.t))
    assert result["event"] == "result" and result["status"] == "done", result
    assert 2 not in fake.leaders().values()
    # Nothing of it in the state, and a restart reads the state back and acts again.
    text = rem.state.path.read_text()
    assert "²" not in text and "7" * 100 not in text
    again = remediator(tmp_path, fake, clock)
    assert again.handle(good("slow_broker", "broker:2", at=clock.t, active=False))["event"] == "cleared"
    events, _ = read_audit(rem.cfg.audit_path)
    assert [e["reason"] for e in events if e["event"] == "dropped"] == ["bad_subject"]


def test_a_phantom_broker_never_counts_toward_the_circuit_breaker(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock)
    assert [rem.handle(with_(subject=f"broker:{b}"))["reason"] for b in (99, 98)] == ["unknown_broker"] * 2
    result = rem.handle(good(at=clock.t))
    assert result["event"] == "result" and result["status"] == "done", result
    assert rem.state.data["dropped"] == {"unknown_broker": 2}


def test_a_poisoned_state_from_before_is_cleaned_on_load(tmp_path: Path) -> None:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp_path, fake, clock)
    rem.state.save()
    state = orjson.loads(rem.state.path.read_bytes())
    state["tracker"]["active"] = {
        "slow_broker|broker:²": NOW,
        "slow_broker|broker:" + "9" * 5000: NOW,
        "x": "y",
    }
    rem.state.path.write_bytes(orjson.dumps(state))
    rem = remediator(tmp_path, fake, clock)
    result = rem.handle(good(at=clock.t))
    assert result["event"] == "result" and result["status"] == "done", result


# -- the property -------------------------------------------------------------------------------

# What the good findings are, in order, with the seconds that pass before each: they walk the
# guardrails (act, cooldown, circuit breaker, cap, clear, restore, act again).
SCRIPT: list[tuple[float, str, str, bool]] = [
    (0, "slow_broker", "broker:2", True),  # demote 2
    (5, "slow_broker", "broker:2", True),  # cooldown
    (5, "slow_broker", "broker:3", True),  # two bad brokers: circuit breaker
    (5, "slow_broker", "broker:3", False),
    (5, "hot_disk", "log_dir:1:/d1", True),  # noop acts
    (5, "slow_broker", "broker:2", False),  # 2 clears: restored after 30 s (ticks)
    (40, "tick", "", True),
    (70, "slow_broker", "broker:1", True),  # 1 demoted (2 is back)
    (5, "slow_broker", "broker:3", True),  # circuit breaker again
    (400, "tick", "", True),
]

BAD_SUBJECTS = st.one_of(
    st.sampled_from(
        [
            "broker:²",
            "broker:" + "9" * 5000,
            "broker:99",
            "broker:-1",
            "broker:",
            "broker:1.0",
            "broker: 1",
            "broker:٣",
            "",
            "log_dir:9:/d",
            "log_dir:x:/d",
            "topic:",
            "topic:a b",
            "\x00",
            "broker:2\n",
            "broker:02x",
            "rack:a",
            "broker:4",
        ]
    ),
    st.text(max_size=40).map(lambda t: "broker:" + t).filter(lambda s: intake.broker_of(s) not in BROKERS),
    st.text(max_size=40).filter(lambda s: intake._subject_problem(s, BROKERS) is not None),
    st.integers(),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
CORRUPTIONS = st.one_of(
    st.tuples(st.just("subject"), BAD_SUBJECTS),
    st.tuples(
        st.just("severity"), JSON.filter(lambda v: not (isinstance(v, str) and v in intake.SEVERITIES))
    ),
    st.tuples(
        st.just("ts_ms"),
        st.one_of(
            st.integers(max_value=int((NOW - 1000) * 1000)),
            st.integers(min_value=int((NOW + 100) * 1000)),
            st.floats(),
            st.text(max_size=5),
            st.booleans(),
            st.just(10**400),
        ),
    ),
    st.tuples(st.just("cluster"), JSON.filter(lambda v: v != "test")),
    st.tuples(
        st.just("rule"), JSON.filter(lambda v: not (isinstance(v, str) and intake.RULE_RE.fullmatch(v)))
    ),
    st.tuples(st.just("active"), JSON.filter(lambda v: not isinstance(v, bool))),
    st.tuples(st.just("evidence"), JSON.filter(lambda v: not isinstance(v, dict))),
    st.tuples(st.just("v"), JSON.filter(lambda v: v != 1)),
    st.tuples(st.just("kind"), JSON.filter(lambda v: v != "finding")),
    st.tuples(st.just("summary"), st.integers() | st.just("s" * 5000)),
)


def corrupted(rule: str, subject: str, at: float) -> st.SearchStrategy[Any]:
    def apply(change: tuple[str, Any]) -> dict:
        d = good(rule, subject, at=at)
        d[change[0]] = change[1]
        return d

    return st.one_of(
        CORRUPTIONS.map(apply),
        st.sampled_from(["subject", "rule", "ts_ms", "cluster", "severity", "kind"]).map(
            lambda k: {f: v for f, v in good(rule, subject, at=at).items() if f != k}
        ),
        JSON,  # anything at all
    )


BAD = st.sampled_from(["slow_broker", "hot_disk", "cluster_slow"]).flatmap(
    lambda rule: st.sampled_from(["broker:1", "broker:2", "broker:3", "log_dir:1:/d1"]).flatmap(
        lambda subject: corrupted(rule, subject, NOW)
    )
)
GENERATED: list[int] = []
EXPECTED: list[tuple[list[dict], dict]] = []  # the script judged without bad findings, once


def _judged(event: dict) -> dict:
    """What a decision was, without what differs between two runs by construction (ids, times)."""
    out = {k: v for k, v in event.items() if k not in ("ts", "plan", "remediator", "key", "after", "undo")}
    if isinstance(event.get("plan"), dict):
        out["plan"] = {k: v for k, v in event["plan"].items() if k != "id"}
    return out


def _run(tmp: Path, bad: list[list[Any]]) -> tuple[list[dict], dict]:
    return _run_script(tmp, bad)  # the real state file, fsync included


def _run_script(tmp: Path, bad: list[list[Any]]) -> tuple[list[dict], dict]:
    fake, clock = FakeCluster(), Clock()
    rem = remediator(tmp, fake, clock)
    decisions = []
    for i, (dt, rule, subject, active) in enumerate(SCRIPT):
        clock.t += dt
        for b in bad[i] if bad else []:
            event = rem.handle(_at(b, clock.t))
            assert event["event"] == "dropped", event
        if rule == "tick":
            decisions.append([_judged(e) for e in rem.tick()])
        else:
            decisions.append(_judged(rem.handle(good(rule, subject, at=clock.t, active=active))))
    s = rem.state.data
    orjson.dumps(s)  # the state always serialises
    final = {
        "demoted": sorted(s["demoted"]),
        "last_action": s["last_action"],
        "acted": sorted(s["acted"]),
        "tracker": s["tracker"],
        "pending": s["pending"],
        "breaker": s["breaker"],
        "actions": sorted((a["remediation"], a["subject"], a["status"]) for a in s["actions"].values()),
        "leaders": fake.leaders(),
        "replicas": fake.replicas(),
    }
    return decisions, final


def _at(raw: Any, t: float) -> Any:
    """A generated finding stamped at the run's clock (one built ``stale`` or ``from_future`` keeps its skew)."""
    if isinstance(raw, dict) and raw.get("ts_ms") == int(NOW * 1000):
        return {**raw, "ts_ms": int(t * 1000)}
    if isinstance(raw, dict) and isinstance(raw.get("ts_ms"), int) and not isinstance(raw["ts_ms"], bool):
        return {**raw, "ts_ms": raw["ts_ms"] + int((t - NOW) * 1000)}
    return copy.deepcopy(raw)


@settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(bad=st.lists(st.lists(BAD, min_size=2, max_size=4), min_size=len(SCRIPT), max_size=len(SCRIPT)))
def test_bad_findings_never_change_how_good_ones_are_judged(
    tmp_path_factory: pytest.TempPathFactory, bad
) -> None:
    if not EXPECTED:
        EXPECTED.append(_run(tmp_path_factory.mktemp("without"), []))
    expected = EXPECTED[0]
    got = _run(tmp_path_factory.mktemp("with"), bad)
    assert got == expected
    GENERATED.append(sum(map(len, bad)))


def test_the_property_saw_at_least_a_thousand_bad_findings() -> None:
    if not GENERATED:
        pytest.skip("the property test did not run in this session")
    assert sum(GENERATED) >= 1000, sum(GENERATED)
