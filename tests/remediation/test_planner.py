"""The free-disk-first planner: table rows (including no-false-move rows) and properties."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from remediation.rebalance import RebalanceConfig, Window, plan_moves
from remediation.view import ClusterView, LogDirState, PartitionState, ReplicaDir

RACKS = {1: "a", 2: "b", 3: "c", 4: "a"}
CFG = RebalanceConfig(high_ratio=0.8, target_ratio=0.6, throttle_bytes_per_s=None)


def view(
    assign: dict[tuple[str, int], list[tuple[int, str, int]]], cap: int = 100, brokers=(1, 2, 3)
) -> ClusterView:
    """``assign``: partition -> [(broker, dir, size)], first replica the preferred leader."""
    replicas = [ReplicaDir(b, d, t, p, size) for (t, p), rs in assign.items() for b, d, size in rs]
    dirs = [
        LogDirState(b, d, cap, sum(r.size_bytes for r in replicas if (r.broker, r.log_dir) == (b, d)))
        for b in brokers
        for d in ("d1", "d2")
    ]
    parts = {
        k: PartitionState(k[0], k[1], tuple(b for b, _, _ in rs), tuple(b for b, _, _ in rs), rs[0][0])
        for k, rs in assign.items()
    }
    return ClusterView(
        brokers={b: RACKS[b] for b in brokers}, partitions=parts, log_dirs=dirs, replicas=replicas
    )


def test_balanced_cluster_plans_nothing() -> None:
    v = view({("t", p): [(p % 3 + 1, "d1", 30), ((p + 1) % 3 + 1, "d2", 30)] for p in range(3)})
    assert plan_moves(v, CFG) == ([], [])


def test_one_full_dir_moves_to_its_sibling_first_fewest_bytes() -> None:
    # broker 1 d1 at 90 %: excess to 60 % is 30; the 35-byte replica covers it alone.
    v = view(
        {
            ("t", 0): [(1, "d1", 50)],
            ("t", 1): [(1, "d1", 35)],
            ("t", 2): [(1, "d1", 5)],
            ("u", 0): [(2, "d1", 10)],
        }
    )
    moves, notes = plan_moves(v, CFG)
    assert [(m.topic, m.partition, m.dst_broker, m.dst_dir) for m in moves] == [("t", 1, 1, "d2")]
    assert notes == []


def test_a_full_dir_is_drained_to_target_not_just_under_high() -> None:
    # 90 % -> one 20-byte move gets it under 80 % but not to 60 %: three moves of 10 more do.
    v = view({("t", p): [(1, "d1", s)] for p, s in enumerate((20, 10, 10, 10, 10, 10, 10, 10))})
    moves, _ = plan_moves(v, CFG)
    assert [m.size_bytes for m in moves] == [20, 10]
    assert sum(m.size_bytes for m in moves) >= 90 - 60


def test_fullest_dir_first() -> None:
    v = view(
        {("a", p): [(1, "d1", s)] for p, s in enumerate((30, 30, 25))}
        | {("b", p): [(2, "d1", s)] for p, s in enumerate((40, 30, 25))}
    )
    moves, _ = plan_moves(v, CFG)
    assert [(m.src_broker, m.src_dir) for m in moves] == [(2, "d1"), (1, "d1")]


def test_sibling_without_headroom_goes_to_another_rack() -> None:
    # broker 1: d1 90, d2 55 (no room for 35 under 60 %); the partition also lives on broker 2 (rack b):
    # the new replica must go to broker 3 (rack c), never 2.
    v = view({("t", 0): [(1, "d1", 35), (2, "d1", 35)], ("t", 1): [(1, "d1", 55)], ("t", 2): [(1, "d2", 55)]})
    moves, _ = plan_moves(v, CFG)
    m = moves[0]
    assert (m.topic, m.partition, m.dst_broker) == ("t", 0, 3)
    assert m.replicas_after == (3, 2)


def test_no_destination_is_a_note_not_a_bad_move() -> None:
    v = view(
        {
            ("t", 0): [(b, d, 90) for b in (1,) for d in ("d1",)],
            ("x", 0): [(1, "d2", 59)],
            ("y", 0): [(2, "d1", 59)],
            ("y", 1): [(2, "d2", 59)],
            ("z", 0): [(3, "d1", 59)],
            ("z", 1): [(3, "d2", 59)],
        }
    )
    moves, notes = plan_moves(v, CFG)
    assert moves == []
    assert notes and "broker 1" in notes[0]


def test_rack_spread_blocks_a_broker_with_room() -> None:
    # Brokers 1 and 4 share rack a. Partition t-0 lives on 2 (rack b, too full) and 1 (rack a);
    # 3 (rack c) has no room; 4 has room but is in rack a: no move rather than two replicas in one rack.
    full = {("f", i): [(b, d, 70)] for i, (b, d) in enumerate([(2, "d2"), (3, "d1"), (3, "d2")])}
    v = view({("t", 0): [(2, "d1", 90), (1, "d1", 10)], **full}, brokers=(1, 2, 3, 4))
    moves, notes = plan_moves(v, CFG)
    assert [m for m in moves if m.topic == "t"] == []
    assert any("broker 2" in n for n in notes)


def test_topics_filter_moves_only_those_topics() -> None:
    # The 35-byte replica of "keep" would be the fewest bytes; only "t" may move.
    v = view({("keep", 0): [(1, "d1", 35)], ("t", 0): [(1, "d1", 30)], ("t", 1): [(1, "d1", 25)]})
    moves, _ = plan_moves(v, RebalanceConfig(high_ratio=0.8, target_ratio=0.6, topics=["t"]))
    assert {m.topic for m in moves} == {"t"}
    assert [m.size_bytes for m in moves] == [30]


def test_reassigning_partitions_are_left_alone() -> None:
    v = view({("t", 0): [(1, "d1", 90)]})
    v.reassigning = {("t", 0): {"replicas": [1, 2], "adding_replicas": [2], "removing_replicas": [1]}}
    assert plan_moves(v, CFG)[0] == []


sizes = st.integers(min_value=0, max_value=60)


@st.composite
def clusters(draw):
    n = draw(st.integers(min_value=1, max_value=8))
    assign = {}
    for p in range(n):
        rf = draw(st.integers(min_value=1, max_value=3))
        brokers = draw(st.permutations([1, 2, 3]))[:rf]
        assign[("t", p)] = [(b, draw(st.sampled_from(["d1", "d2"])), draw(sizes)) for b in brokers]
    return view(assign)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(clusters())
def test_properties(v: ClusterView) -> None:
    moves, notes = plan_moves(v, CFG)
    used = {(d.broker, d.path): d.used_bytes for d in v.log_dirs}
    over_before = {k for k, u in used.items() if u / 100 > CFG.high_ratio}
    if not over_before:
        assert moves == []  # no-false-move: nothing too full, nothing moves
    for m in moves:
        assert m.size_bytes > 0
        assert (m.src_broker, m.src_dir) in over_before or used[
            (m.src_broker, m.src_dir)
        ] / 100 > CFG.high_ratio
        used[(m.src_broker, m.src_dir)] -= m.size_bytes
        used[(m.dst_broker, m.dst_dir)] += m.size_bytes
        assert used[(m.dst_broker, m.dst_dir)] / 100 <= CFG.target_ratio  # headroom checked per move
        racks = [RACKS[b] for b in m.replicas_after]
        assert len(racks) == len(set(racks))  # rack spread kept
        assert len(m.replicas_after) == len(m.replicas_before)
    assert len({(m.topic, m.partition) for m in moves}) == len(moves)
    for (b, d), u in used.items():  # a dir left too full is named in a note, never silently
        if u / 100 > CFG.high_ratio:
            assert any(f"log dir {d} of broker {b} " in n for n in notes), (b, d, u, notes)


def test_window_backs_off_and_recovers() -> None:
    w = Window(limit=4, backoff_ms=500, recover_s=10)
    assert w.update(100.0, 0.0) == 4
    assert w.update(900.0, 1.0) == 2  # halve
    assert w.update(900.0, 2.0) == 2  # at most once per recover_s
    assert w.update(900.0, 11.0) == 1
    assert w.update(900.0, 30.0) == 1  # floor
    assert w.update(None, 31.0) == 1  # unknown latency: hold
    assert w.update(100.0, 41.0) == 1  # calm starts now; growth waits recover_s
    assert w.update(None, 45.0) == 1
    assert w.update(100.0, 51.0) == 2
    assert w.update(100.0, 61.0) == 3
    assert w.update(100.0, 71.0) == 4
    assert w.update(100.0, 81.0) == 4  # ceiling
