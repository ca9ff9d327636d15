"""The contiguous processed-offset rule, as a table of scenarios (pure, no Kafka)."""

from __future__ import annotations

import pytest

from consumer.commits import CommitTracker, Outcome, PartitionOffsets

# (name, delivered offsets, operations, expected committable, expected uncommitted)
# operations: ("ack", o) | ("fail", o) | ("stop", o) | ("commit", o)
CASES = [
    ("nothing delivered", [], [], None, 0),
    ("delivered, nothing done", [0, 1, 2], [], None, 3),
    ("all acked in order", [0, 1, 2], [("ack", 0), ("ack", 1), ("ack", 2)], 3, 0),
    ("acked out of order", [0, 1, 2], [("ack", 2), ("ack", 1), ("ack", 0)], 3, 0),
    (
        "gap holds the prefix (Storm: 14 failed, 15-18 acked)",
        [11, 12, 13, 14, 15, 16, 17, 18],
        [("ack", o) for o in (11, 12, 13, 15, 16, 17, 18)],
        14,
        5,
    ),
    ("failed record is not done", [0, 1], [("ack", 0), ("fail", 1)], 1, 1),
    ("failed then acked on retry", [0, 1], [("fail", 0), ("ack", 0), ("ack", 1)], 2, 0),
    ("offsets with holes (compaction)", [3, 7, 20], [("ack", 3), ("ack", 7), ("ack", 20)], 21, 0),
    ("hole before an unacked record", [3, 7, 20], [("ack", 3), ("ack", 20)], 7, 2),
    ("already committed: nothing new", [0, 1], [("ack", 0), ("ack", 1), ("commit", 2)], None, 0),
    ("commit then more progress", [0, 1, 2], [("ack", 0), ("commit", 1), ("ack", 1)], 2, 1),
    (
        "stopped partition never passes the stop",
        [0, 1, 2],
        [("ack", 0), ("stop", 1), ("ack", 1), ("ack", 2)],
        1,
        2,
    ),
    ("ack of an unknown offset is ignored", [0], [("ack", 5)], None, 1),
    ("double ack is harmless", [0, 1], [("ack", 0), ("ack", 0)], 1, 1),
]


@pytest.mark.parametrize(
    ("name", "delivered", "ops", "committable", "uncommitted"), CASES, ids=[c[0] for c in CASES]
)
def test_contiguous_prefix(name, delivered, ops, committable, uncommitted):
    part = PartitionOffsets(max_retries=2)
    for o in delivered:
        part.delivered(o)
    for op, o in ops:
        if op == "ack":
            part.ack(o)
        elif op == "fail":
            part.fail(o)
        elif op == "stop":
            part.stop(o)
        elif op == "commit":
            part.mark_committed(o)
    assert part.committable() == committable
    assert part.uncommitted == uncommitted


def test_retries_then_exhausted():
    part = PartitionOffsets(max_retries=2)
    part.delivered(0)
    assert [part.fail(0) for _ in range(3)] == [Outcome.RETRY, Outcome.RETRY, Outcome.EXHAUSTED]
    assert part.attempts(0) == 3


def test_zero_retries_exhausts_at_once():
    part = PartitionOffsets(max_retries=0)
    part.delivered(0)
    assert part.fail(0) is Outcome.EXHAUSTED


@pytest.mark.parametrize(
    ("delivered", "offset", "error"),
    [([5], 5, "out of order"), ([5], 4, "out of order")],
)
def test_out_of_order_delivery_is_refused(delivered, offset, error):
    part = PartitionOffsets(max_retries=1)
    for o in delivered:
        part.delivered(o)
    with pytest.raises(ValueError, match=error):
        part.delivered(offset)


def test_stale_acks_after_revoke_and_reassign():
    tracker = CommitTracker(max_retries=1)
    tp = ("t", 0)
    tracker.assign(tp, epoch=1)
    assert tracker.delivered(tp, 1, 0)
    tracker.ack(tp, 1, 0)
    assert tracker.delivered(tp, 1, 1)
    revoked = tracker.revoke(tp)
    assert (revoked.commit, revoked.at_risk) == (1, 0)
    assert tracker.ack(tp, 1, 1) is Outcome.STALE  # the app finished it after the revoke
    tracker.assign(tp, epoch=2)
    assert tracker.ack(tp, 1, 1) is Outcome.STALE  # still the old epoch
    assert tracker.delivered(tp, 2, 1)
    assert tracker.ack(tp, 2, 1) is Outcome.DONE
    assert tracker.committable() == {tp: 2}


def test_at_risk_counts_acked_records_beyond_a_gap():
    tracker = CommitTracker(max_retries=1)
    tp = ("t", 3)
    tracker.assign(tp, 1)
    for o in range(5):
        tracker.delivered(tp, 1, o)
    for o in (0, 2, 3):
        tracker.ack(tp, 1, o)
    revoked = tracker.revoke(tp)
    assert (revoked.commit, revoked.at_risk) == (1, 2)  # 2 and 3 will be processed again


@pytest.mark.parametrize("seed", range(40))
def test_runs_give_what_single_steps_give(seed):
    """delivered_run / ack_run (the batch paths) against delivered / ack one offset at a time,
    over random interleavings: refetched overlaps, holes, out-of-order and repeated acks,
    failures, a stop and commits. Every outcome count and every state reading must agree."""
    import random

    rnd = random.Random(seed)
    single, batch = PartitionOffsets(max_retries=1), PartitionOffsets(max_retries=1)
    delivered: list[int] = []
    nxt = 0
    for _ in range(60):
        op = rnd.random()
        if op < 0.35:  # a fetched run, sometimes overlapping what was delivered (seek back)
            start = max(0, nxt - rnd.randrange(4)) if delivered else nxt
            run = sorted({start + i + rnd.choice((0, 0, 0, 2)) * i for i in range(rnd.randrange(1, 8))})
            expected = 0
            for o in run:
                try:
                    single.delivered(o)
                    expected += 1
                except ValueError:
                    assert expected == 0
            assert batch.delivered_run(run) == expected
            delivered += run[len(run) - expected :]
            nxt = max(nxt, run[-1] + 1)
        elif op < 0.75 and delivered:  # ack a run: mostly the oldest in order, sometimes not
            k = rnd.randrange(1, 6)
            pool = delivered if rnd.random() < 0.3 else delivered[:k]
            offsets = sorted(rnd.sample(pool, min(k, len(pool)))) if rnd.random() < 0.5 else pool[:k]
            counts: dict[Outcome, int] = {}
            for o in offsets:
                outcome = single.ack(o)
                counts[outcome] = counts.get(outcome, 0) + 1
            assert batch.ack_run(list(offsets)) == counts
        elif op < 0.85 and delivered:
            o = rnd.choice(delivered)
            assert batch.fail(o) == single.fail(o)
        elif op < 0.88 and delivered:
            o = rnd.choice(delivered)
            single.stop(o)
            batch.stop(o)
        elif single.committable() is not None:
            c = single.committable()
            single.mark_committed(c)
            batch.mark_committed(c)
        for reading in ("committable", "first_unfinished", "position"):
            assert getattr(batch, reading)() == getattr(single, reading)(), reading
        assert (batch.uncommitted, batch.done_beyond_prefix) == (
            single.uncommitted,
            single.done_beyond_prefix,
        )


def test_delivered_run_refuses_descending_offsets():
    part = PartitionOffsets(max_retries=0)
    with pytest.raises(ValueError, match="out of order"):
        part.delivered_run([5, 7, 6])


@pytest.mark.parametrize(
    ("delivered", "ops", "unfinished"),
    [
        ([], [], 0),
        ([0, 1, 2], [], 3),
        ([0, 1, 2], [("ack", 0)], 2),
        ([0, 1, 2], [("ack", 2)], 2),  # done beyond a gap is finished, the gap is not
        ([0, 1, 2], [("fail", 1)], 3),  # a failed (retried) record is not finished
        ([0, 1, 2, 3], [("stop", 2)], 2),  # nothing at or after the stop will be finished
        ([0, 1, 2], [("ack", 0), ("ack", 1), ("ack", 2)], 0),
    ],
)
def test_unfinished_counts_what_a_revoke_waits_for(delivered, ops, unfinished):
    tracker = CommitTracker(max_retries=3)
    tracker.assign(("t", 0), 1)
    tracker.delivered_many(("t", 0), 1, delivered)
    for op, offset in ops:
        getattr(tracker, op)(("t", 0), 1, offset)
    assert tracker.unfinished(("t", 0)) == unfinished
    assert tracker.unfinished(("t", 1)) == 0  # not assigned
