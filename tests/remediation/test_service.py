"""The findings loop's boundary: a record that is not a finding is dropped, counted and audited,
never fatal; where a never-judged findings partition starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from linkwatch.records import StageSketch
from remediation.audit import read_audit
from remediation.service import _one
from tests.remediation.fake_cluster import FakeCluster
from tests.remediation.test_intake import Clock, remediator

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
