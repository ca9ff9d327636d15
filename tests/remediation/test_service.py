"""The findings loop's boundary: a record that is not a finding is dropped, counted and audited,
never fatal; a finding met while the lease is not held is not judged; where a never-judged
findings partition starts."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from linkwatch.records import StageSketch
from remediation.audit import read_audit
from remediation.lease import LocalLease
from remediation.remediator import STANDBY
from remediation.service import _NotHeld, _one
from tests.remediation.fake_cluster import FakeCluster
from tests.remediation.test_intake import Clock, good, remediator

SKETCH = StageSketch(
    cluster="c", source="s", ts_ms=1, broker=1, request="Produce", stage="local", window_s=10, sketch={}
).to_json()


@pytest.mark.parametrize(
    ("raw", "dropped", "reason"),
    [
        (b"not json", 1, "not_json"),
        (b"[1, 2]", 1, "not_object"),
        (b'{"v": 99, "kind": "finding"}', 1, "future_version"),  # a future schema version
        (b'{"v": 1, "kind": "nope"}', 1, "unknown_kind"),
        (SKETCH, 0, None),  # another kind on the topic: skipped, not a finding
    ],
)
def test_bad_records_are_dropped_counted_and_audited(
    tmp_path: Path, raw: bytes, dropped: int, reason: str | None
) -> None:
    rem = remediator(tmp_path, FakeCluster(), Clock())
    counters = {"findings": 0, "dropped": 0, "errors": 0}
    assert _one(rem, raw, counters) is True  # judged: read past it
    assert counters == {"findings": 0, "dropped": dropped, "errors": 0}
    audited = [e["reason"] for e in read_audit(rem.cfg.audit_path)[0] if e["event"] == "dropped"]
    assert audited == ([reason] if reason else [])
    assert rem.state.data["dropped"] == ({reason: 1} if reason else {})


class _Lease(LocalLease):
    """A lease whose ``held()`` answers from a script (then the last answer): a holder that a
    standby's join leaves unconfirmed for a moment."""

    def __init__(self, *answers: bool) -> None:
        super().__init__()
        self.answers = list(answers)

    def held(self) -> bool:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def wait_held(self) -> bool:
        return self.held()


@pytest.mark.parametrize(
    ("answers", "refused_audited"),
    [
        ((False,), 0),  # not held when the record is read
        ((True, False), 1),  # lost between the loop's check and the handover
    ],
)
def test_a_finding_met_without_the_lease_is_not_judged(
    tmp_path: Path, answers: tuple[bool, ...], refused_audited: int
) -> None:
    rem = remediator(tmp_path, FakeCluster(), Clock())
    rem.lease = _Lease(*answers)
    counters = {"findings": 0, "dropped": 0, "errors": 0}
    with pytest.raises(_NotHeld):
        _one(rem, orjson.dumps(good()), counters)
    assert counters == {"findings": 0, "dropped": 0, "errors": 0}
    before = read_audit(rem.cfg.audit_path)[0]
    assert [e["event"] for e in before] == ["refused"] * refused_audited
    assert all(e["reason"] == STANDBY for e in before)
    # The lease back (the rebalance ended): the same record is judged, and acted on.
    rem.lease = _Lease(True)
    assert _one(rem, orjson.dumps(good()), counters) is True
    assert counters["findings"] == 1
    after = read_audit(rem.cfg.audit_path)[0][len(before) :]
    assert [e["status"] for e in after if e["event"] == "result"] == ["done"], after
