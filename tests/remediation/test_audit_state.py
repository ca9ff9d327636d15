"""Audit log (append-only, torn lines counted), persisted state (survives a reload), throttle lists."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation.audit import AuditLog, read_audit
from remediation.state import FileStateStore
from remediation.throttle import _merge, moving_brokers, throttled_replicas


def test_audit_appends_and_counts_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    AuditLog(path, "r1").write("plan", plan={"id": "p1"})
    with path.open("ab") as f:
        f.write(b'{"ts": 1, "event": "st')  # a crash mid-line
    AuditLog(path, "r2").write("recover", action="p1")
    events, dropped = read_audit(path)
    assert dropped == 1
    assert [(e["event"], e["remediator"]) for e in events] == [("plan", "r1"), ("recover", "r2")]


def test_state_survives_reload(tmp_path: Path) -> None:
    s = FileStateStore(tmp_path / "state.json")
    s.put_action({"id": "a1", "status": "running", "steps": [{"status": "planned"}], "throttles": {}})
    s.step_status("a1", 0, "intent")
    s.data["pending"].append({"k": 1})
    s.save()
    again = FileStateStore(tmp_path / "state.json")
    assert again.action("a1")["steps"][0]["status"] == "intent"
    assert [a["id"] for a in again.running()] == ["a1"]
    assert again.data["pending"] == [{"k": 1}]
    assert not (tmp_path / "state.tmp").exists()


@pytest.mark.parametrize(
    ("current", "add", "expected"),
    [
        (None, {"0:1"}, "0:1"),
        ("0:1,2:3", {"1:2", "0:1"}, "0:1,1:2,2:3"),
        ("*", {"0:1"}, "*"),  # an operator's throttle on every replica is never narrowed
        ("", {"10:1", "2:1"}, "2:1,10:1"),
    ],
)
def test_merge_replica_lists(current: str | None, add: set[str], expected: str) -> None:
    assert _merge(current, add) == expected


def test_only_moving_replicas_are_throttled() -> None:
    moves = [("t", 0, [1, 2], [3, 2]), ("u", 1, [2], [1])]
    assert throttled_replicas(moves) == {
        "t": {"leader": {"0:1", "0:2"}, "follower": {"0:3"}},
        "u": {"leader": {"1:2"}, "follower": {"1:1"}},
    }
    assert moving_brokers(moves) == {1, 2, 3}
