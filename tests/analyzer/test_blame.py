"""The blame model's properties over generated clusters and faults (not over the table's rows):
what it must do for a fault class whatever the cluster's size, the broker ids, the intensities
and the healthy noise around it."""

from __future__ import annotations

import statistics

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.blame import Rows, peer_medians, read_windows
from analyzer.slow_broker import SlowBrokerConfig, SlowBrokerDetector
from linkwatch.aggregates import Aggregates
from tests.analyzer.test_slow_broker import BUSY_STAGES, WINDOW_S, now_after, scenario

CFG = SlowBrokerConfig()
OWN = ("requestQueue", "local", "responseQueue")


def healthy(seed: int, b: int, i: int) -> dict:
    """A healthy broker: stage p99s wander a few ms (under the excess floor), total 20-60 ms."""
    k = (seed * 31 + 7 * b + 3 * i) % 11
    stages = {"requestQueue": 0.5 + k / 3, "local": 1.0 + (k * 5 % 11) / 3, "remote": 2.0 + k}
    return {"p99": 20.0 + 4 * k, "stage_p99": {**BUSY_STAGES, **stages}}


def findings(special: dict[int, dict[int, dict]], brokers: int, windows: int) -> set[tuple[str, str, str]]:
    found = SlowBrokerDetector().detect(scenario(windows, brokers, special), now_after(windows))
    return {(f.rule, f.subject, f.evidence.get("stage")) for f in found if not f.evidence.get("provisional")}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 8),
    victim=st.integers(0, 7),
    stage=st.sampled_from(OWN),
    stage_ms=st.floats(400.0, 3000.0),
    onset=st.integers(4, 8),
    seed=st.integers(0, 1000),
)
def test_one_broker_slow_in_its_own_stage_is_that_broker_and_that_stage(
    brokers, victim, stage, stage_ms, onset, seed
) -> None:
    victim %= brokers
    windows = onset + 4
    special = {b: {i: healthy(seed, b, i) for i in range(windows)} for b in range(brokers)}
    for i in range(onset, windows):
        special[victim][i] = {
            "p99": stage_ms + 20,
            "stage_p99": {**healthy(seed, victim, i)["stage_p99"], stage: stage_ms},
        }
    assert findings(special, brokers, windows) == {("slow_broker", f"broker:{victim}", stage)}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 8),
    saturated=st.lists(st.integers(0, 6), min_size=8, max_size=8),
    changes=st.lists(st.integers(0, 11), min_size=0, max_size=6),
    seed=st.integers(0, 1000),
)
def test_clients_queued_on_healthy_brokers_are_never_a_finding(brokers, saturated, changes, seed) -> None:
    """Saturated connections are impact, never evidence: on brokers whose own timers stay in
    line, any counts of connections served back to back, changing in any windows, name nobody."""
    windows = 12
    special = {
        b: {
            i: healthy(seed, b, i) | {"saturated": saturated[(b + (i in changes) * i) % len(saturated)]}
            for i in range(windows)
        }
        for b in range(brokers)
    }
    assert findings(special, brokers, windows) == set()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 8),
    victim=st.integers(0, 7),
    stage=st.sampled_from(OWN),
    stage_ms=st.floats(60.0, 250.0),
    queued=st.integers(1, 8),
    onset=st.integers(4, 8),
    seed=st.integers(0, 1000),
)
def test_one_broker_slow_below_the_line_with_its_clients_queued_is_slow(
    brokers, victim, stage, stage_ms, queued, onset, seed
) -> None:
    """A broker's own stage out of line under the line, its clients' connections served back to
    back from the onset (its peers' none): slow, that broker and that stage, whatever the size."""
    victim %= brokers
    windows = onset + 4
    special = {b: {i: healthy(seed, b, i) for i in range(windows)} for b in range(brokers)}
    for i in range(onset, windows):
        special[victim][i] = {
            "p99": stage_ms + 20,
            "stage_p99": {**healthy(seed, victim, i)["stage_p99"], stage: stage_ms},
            "saturated": queued,
        }
    assert findings(special, brokers, windows) == {("slow_broker", f"broker:{victim}", stage)}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 8),
    factor=st.floats(2.0, 40.0),
    seed=st.integers(0, 1000),
)
def test_every_broker_slowed_alike_is_never_one_slow_broker(brokers, factor, seed) -> None:
    """Common mode: the same slowdown on every broker (a shared disk, a burst, the machine) names
    no broker, whatever its size; above the line it is the cluster's."""
    windows = 10
    special = {}
    for b in range(brokers):
        special[b] = {}
        for i in range(windows):
            h = healthy(seed, b, i)
            if i >= 4:
                h = {
                    "p99": h["p99"] * factor,
                    "stage_p99": {s: v * factor for s, v in h["stage_p99"].items()},
                }
            special[b][i] = h
    got = findings(special, brokers, windows)
    assert {r for r, _, _ in got} <= {"cluster_slow"}


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 8),
    follower=st.integers(0, 7),
    wait_ms=st.floats(200.0, 2000.0),
    seed=st.integers(0, 1000),
)
def test_leaders_waiting_on_one_follower_name_the_follower_stage_remote(
    brokers, follower, wait_ms, seed
) -> None:
    """A stalled follower (every partition on every broker): every other broker's acks=all
    requests wait on it, its own do not; the follower is found, never a waiting leader."""
    follower %= brokers
    windows = 10
    special = {b: {i: healthy(seed, b, i) for i in range(windows)} for b in range(brokers)}
    for b in range(brokers):
        if b == follower:
            continue
        for i in range(4, windows):
            h = healthy(seed, b, i)
            special[b][i] = {
                "p99": wait_ms + 10,
                "stage_p99": {**h["stage_p99"], "remote": wait_ms},
                "waited": {"remote": wait_ms},
            }
    got = findings(special, brokers, windows)
    rule = "slow_broker" if wait_ms + 10 > CFG.p99_threshold_ms else "degraded_broker"
    assert got == {(rule, f"broker:{follower}", "remote")}


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    brokers=st.integers(3, 6),
    victim=st.integers(0, 5),
    gaps=st.lists(st.integers(0, CFG.clear_windows - 1), min_size=3, max_size=8),
    seed=st.integers(0, 1000),
)
def test_a_fault_that_leaves_evidence_every_few_windows_never_clears_mid_fault(
    brokers, victim, gaps, seed
) -> None:
    """Hysteresis by evidence: once found, a broker whose fault shows at least once every
    clear_windows windows stays found in every evaluation until the fault ends."""
    victim %= brokers
    slow_windows, i = [], 3
    for gap in gaps:
        slow_windows.append(i)
        i += gap + 1
    windows = i
    special = {b: {w: healthy(seed, b, w) for w in range(windows)} for b in range(brokers)}
    for w in slow_windows:
        special[victim][w] = {
            "p99": 900.0,
            "stage_p99": {**healthy(seed, victim, w)["stage_p99"], "local": 880.0},
        }
    data = scenario(windows, brokers, special)
    first = None
    for now in range(1, windows + 1):
        active = {f.subject for f in SlowBrokerDetector().detect(data, now_after(now))}
        if f"broker:{victim}" in active and first is None:
            first = now
        elif first is not None:
            assert f"broker:{victim}" in active, f"cleared at window {now} of a fault lasting to {windows}"


@settings(max_examples=30, deadline=None, derandomize=True)
@given(brokers=st.integers(3, 6), shift=st.integers(1, 5), seed=st.integers(0, 1000))
def test_broker_ids_do_not_matter(brokers, shift, seed) -> None:
    """The same cluster with every broker id renamed gives the same findings, renamed."""
    windows = 10
    special = {b: {i: healthy(seed, b, i) for i in range(windows)} for b in range(brokers)}
    for i in range(4, windows):
        special[1][i] = {
            "p99": 700.0,
            "stage_p99": {**healthy(seed, 1, i)["stage_p99"], "requestQueue": 680.0},
        }
        special[0][i] = {"p99": 500.0, "stage_p99": {**healthy(seed, 0, i)["stage_p99"], "remote": 480.0}}
    data = scenario(windows, brokers, special)
    renamed = Aggregates(
        cluster=data.cluster,
        window_s=WINDOW_S,
        broker_stages=[
            r.__class__(**{**r.__dict__, "broker": (r.broker + shift * 10) if r.broker is not None else None})
            for r in data.broker_stages
        ],
    )

    def seen(d: Aggregates, offset: int) -> list[tuple[str, str, str | None]]:
        out = []
        for f in SlowBrokerDetector().detect(d, now_after(windows)):
            kind, _, ident = f.subject.partition(":")
            subject = f"broker:{int(ident) - offset}" if kind == "broker" else f.subject
            out.append((f.rule, subject, f.evidence.get("stage")))
        return sorted(out)

    assert seen(data, 0) == seen(renamed, shift * 10) and seen(data, 0)


def test_readings_hold_nothing_beyond_the_windows_given() -> None:
    """Pure: the same rows read twice give the same readings (no state kept between calls)."""
    data = scenario(8, 3, {2: {i: {"p99": 800.0} for i in range(3, 8)}})
    rows = Rows(data.broker_stages, data.probes)
    windows = rows.windows(now_after(8), WINDOW_S, CFG.requests)
    first = [(r.window_start_ms, r.common, sorted(r.blamed())) for r in read_windows(rows, windows, CFG)]
    again = [(r.window_start_ms, r.common, sorted(r.blamed())) for r in read_windows(rows, windows, CFG)]
    assert first == again and first[-1][2] == [2]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(values=st.dictionaries(st.integers(0, 2000), st.floats(0, 1e4), min_size=0, max_size=40))
def test_peer_medians_are_each_brokers_peers_median(values) -> None:
    got = peer_medians(values)
    want = {b: statistics.median([v for p, v in values.items() if p != b]) for b in values if len(values) > 1}
    assert got.keys() == want.keys() and all(abs(got[b] - want[b]) < 1e-9 for b in want)
