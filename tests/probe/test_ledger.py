"""The probe's bookkeeping as tables of events: per-broker sketches, availability with the
deadline, late read-backs measured without a clamp, bounded pending state."""

from __future__ import annotations

import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from probe.ledger import ProbeLedger
from probe.service import next_gap_s

DEADLINE_S = 2.0
FORGET_S = 10.0

# (id, events, expected per broker: (sent, acked, ok, unavailable, produce count, e2e count))
# An event is (time_s, op, seq, broker) with op in sent/acked/failed/read/expire.
CASES = [
    (
        "acked and read back in time",
        [(0, "sent", 1, 1), (0.01, "acked", 1, None), (0.05, "read", 1, None)],
        {1: (1, 1, 1, {}, 1, 1)},
    ),
    (
        "read back after the deadline: unavailable, latency still measured",
        [(0, "sent", 1, 2), (0.5, "acked", 1, None), (3.0, "read", 1, None)],
        {2: (1, 1, 0, {"deadline": 1}, 1, 1)},
    ),
    (
        "deadline passes first, read back later: decided once, latency kept",
        [(0, "sent", 1, 2), (2.5, "expire", None, None), (4.0, "read", 1, None)],
        {2: (1, 0, 0, {"deadline": 1}, 0, 1)},
    ),
    (
        "never read back: unavailable at the deadline, forgotten later",
        [
            (0, "sent", 1, 3),
            (1.0, "expire", None, None),
            (2.5, "expire", None, None),
            (11, "expire", None, None),
        ],
        {3: (1, 0, 0, {"deadline": 1}, 0, 0)},
    ),
    (
        "send error",
        [(0, "sent", 1, 1), (0.2, "failed", 1, None)],
        {1: (1, 0, 0, {"send_error": 1}, 0, 0)},
    ),
    (
        "read back before its ack arrives: available (it was written)",
        [(0, "sent", 1, 1), (0.05, "read", 1, None), (0.06, "acked", 1, None)],
        {1: (1, 0, 1, {}, 0, 1)},
    ),
    (
        "two brokers, one slow: only its window is hurt",
        [
            (0, "sent", 1, 1),
            (0, "sent", 2, 2),
            (0.01, "acked", 1, None),
            (0.02, "read", 1, None),
            (1.5, "acked", 2, None),
            (2.6, "read", 2, None),
        ],
        {1: (1, 1, 1, {}, 1, 1), 2: (1, 1, 0, {"deadline": 1}, 1, 1)},
    ),
    (
        "duplicate ack is ignored",
        [(0, "sent", 1, 1), (0.1, "acked", 1, None), (0.2, "acked", 1, None)],
        {1: (1, 1, 0, {}, 1, 0)},
    ),
]


def run(events: list[tuple], ledger: ProbeLedger) -> None:
    for t, op, seq, broker in events:
        if op == "sent":
            ledger.sent(seq, broker, t)
        elif op == "acked":
            ledger.acked(seq, t)
        elif op == "failed":
            ledger.failed(seq, t)
        elif op == "read":
            ledger.read_back(seq, t)
        else:
            ledger.expire(t)


@pytest.mark.parametrize(("events", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_ledger_table(events: list[tuple], expected: dict) -> None:
    ledger = ProbeLedger(DEADLINE_S, FORGET_S, max_pending=100)
    run(events, ledger)
    windows = ledger.take_windows()
    got = {
        b: (w.sent, w.acked, w.ok, dict(w.unavailable), w.produce.count, w.end_to_end.count)
        for b, w in windows.items()
    }
    assert got == expected
    assert ledger.take_windows() == {}  # a new window starts empty


def test_latencies_are_not_clamped() -> None:
    ledger = ProbeLedger(DEADLINE_S, 3600.0, max_pending=10)
    ledger.sent(1, 1, 0.0)
    ledger.acked(1, 100.0)
    ledger.read_back(1, 1800.0)  # half an hour late: still its real latency
    w = ledger.take_windows()[1]
    assert w.produce.quantile(1.0) == pytest.approx(100_000, rel=0.01)
    assert w.end_to_end.quantile(1.0) == pytest.approx(1_800_000, rel=0.01)
    assert w.availability == 0.0


def test_pending_is_bounded_and_the_overflow_counted() -> None:
    ledger = ProbeLedger(DEADLINE_S, FORGET_S, max_pending=3)
    assert [ledger.sent(i, 1, 0.0) for i in range(5)] == [True, True, True, False, False]
    assert ledger.dropped["pending_full"] == 2
    assert ledger.pending == 3
    ledger.expire(FORGET_S + 1)
    assert ledger.pending == 0
    assert ledger.take_windows()[1].unavailable["deadline"] == 3


def test_unknown_read_back_is_counted() -> None:
    ledger = ProbeLedger(DEADLINE_S, FORGET_S, max_pending=3)
    ledger.read_back(42, 1.0)
    assert ledger.dropped["unknown_probe"] == 1
    assert ledger.take_windows() == {}


@pytest.mark.parametrize(
    ("deadline", "forget", "pending"),
    [(0, 1, 1), (2, 1, 1), (1, 1, 0)],
    ids=["zero deadline", "forget < deadline", "no pending"],
)
def test_bad_arguments(deadline: float, forget: float, pending: int) -> None:
    with pytest.raises(ValueError):
        ProbeLedger(deadline, forget, pending)


_event = st.tuples(
    st.sampled_from(["acked", "failed", "read", "expire"]), st.integers(0, 9), st.floats(0, 20)
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(_event, max_size=40))
def test_every_probe_is_decided_at_most_once(ops: list[tuple[str, int, float]]) -> None:
    """Whatever order acks, failures, read-backs and expiries come in: decided ≤ sent, and after
    the forget horizon every probe is decided and nothing is pending."""
    ledger = ProbeLedger(DEADLINE_S, FORGET_S, max_pending=100)
    for seq in range(10):
        ledger.sent(seq, seq % 3, 0.0)
    t = 0.0
    for op, seq, dt in ops:
        t += dt / 10
        run([(t, op, seq, None)], ledger)
    ledger.expire(t + FORGET_S + 1)
    windows = ledger.take_windows()
    assert sum(w.sent for w in windows.values()) == 10
    assert sum(w.decided for w in windows.values()) == 10
    assert ledger.pending == 0


@pytest.mark.parametrize("period_s", [1.0, 1.3, 0.5])
def test_poisson_probes_land_at_every_phase_of_a_periodic_stall(period_s: float) -> None:
    """A broker paused in a duty cycle (e.g. 900 of every 1000 ms) is missed by probes sent in
    step with it: fixed gaps of the period's length land at one phase every time. Exponential
    gaps land uniformly over the phase: the share of probes inside a stall of 90 % of the period
    is 0.9, and inside 10 % of it 0.1, whatever the period."""
    rng = random.Random(7)
    t, phases = 0.0, []
    for _ in range(4000):
        t += next_gap_s("poisson", 0.25, rng)
        phases.append((t % period_s) / period_s)
    assert abs(sum(p < 0.9 for p in phases) / len(phases) - 0.9) < 0.02
    assert abs(sum(p < 0.1 for p in phases) / len(phases) - 0.1) < 0.02
    gaps = [next_gap_s("poisson", 0.25, rng) for _ in range(4000)]
    assert abs(statistics.fmean(gaps) - 0.25) < 0.02 and next_gap_s("fixed", 0.25, rng) == 0.25
