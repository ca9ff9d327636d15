"""The findings loop's boundary: a record that is not a finding is dropped and counted, never fatal."""

from __future__ import annotations

import pytest

from linkwatch.records import StageSketch
from remediation.service import _one


@pytest.mark.parametrize(
    ("raw", "dropped", "findings"),
    [
        (b"not json", 1, 0),
        (b"[1, 2]", 1, 0),
        (b'{"v": 99, "kind": "finding"}', 1, 0),  # a future schema version
        (b'{"v": 1, "kind": "nope"}', 1, 0),
        (
            StageSketch(
                cluster="c",
                source="s",
                ts_ms=1,
                broker=1,
                request="Produce",
                stage="local",
                window_s=10,
                sketch={},
            ).to_json(),
            0,
            0,
        ),  # another kind on the topic: skipped, not a finding
    ],
)
def test_bad_records_are_dropped_and_counted(raw: bytes, dropped: int, findings: int) -> None:
    counters = {"findings": 0, "dropped": 0}
    _one(None, raw, counters)  # type: ignore[arg-type]  # never reaches the remediator
    assert counters == {"findings": findings, "dropped": dropped}
