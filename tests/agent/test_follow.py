"""tail -F behaviour on real files: rotation, truncation, re-creation, resume, over-long lines."""

from __future__ import annotations

import os
from pathlib import Path

from agent.requestlog.follow import FileFollower


def write(path: Path, text: str, mode: str = "a") -> None:
    with open(path, mode) as f:
        f.write(text)


def test_starts_at_end_by_default_and_reads_appended_lines(tmp_path: Path) -> None:
    log = tmp_path / "kafka-request.log"
    write(log, "old-1\nold-2\n")
    f = FileFollower(log)
    assert f.read_lines() == []
    write(log, "new-1\nnew-")
    assert f.read_lines() == [b"new-1"]
    write(log, "2\n")
    assert f.read_lines() == [b"new-2"]


def test_start_at_beginning_when_asked(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    write(log, "a\nb\n")
    assert FileFollower(log, start_at_end=False).read_lines() == [b"a", b"b"]


def test_rotation_drains_old_file_then_reads_new_one(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    write(log, "")
    f = FileFollower(log)
    write(log, "a\n")
    assert f.read_lines() == [b"a"]
    write(log, "b\n")  # written before the rename, not read yet
    log.rename(tmp_path / "r.log.1")
    write(log, "c\n")
    assert f.read_lines() == [b"b", b"c"]
    assert f.rotations == 1


def test_truncation_rereads_from_start(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    write(log, "a-long-first-line\n")
    f = FileFollower(log, start_at_end=False)
    assert f.read_lines() == [b"a-long-first-line"]
    write(log, "x\n", mode="w")
    assert f.read_lines() == [b"x"]
    assert f.truncations == 1


def test_file_disappears_and_comes_back(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    write(log, "a\n")
    f = FileFollower(log, start_at_end=False)
    assert f.read_lines() == [b"a"]
    os.unlink(log)
    assert f.read_lines() == []
    assert f.up is False
    write(log, "after-restart\n")
    assert f.read_lines() == [b"after-restart"]
    assert f.up is True


def test_missing_at_start_then_created_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    f = FileFollower(log)
    assert f.read_lines() == []
    assert f.up is False
    write(log, "first\n")
    assert f.read_lines() == [b"first"]


def test_resume_from_position_file(tmp_path: Path) -> None:
    log, pos = tmp_path / "r.log", tmp_path / "pos.json"
    write(log, "a\nb\n")
    f = FileFollower(log, position_file=pos, start_at_end=False)
    assert f.read_lines() == [b"a", b"b"]
    f.save_position()
    f.close()
    write(log, "c\n")
    g = FileFollower(log, position_file=pos)
    assert g.read_lines() == [b"c"]


def test_resume_after_rotation_while_stopped(tmp_path: Path) -> None:
    log, pos = tmp_path / "r.log", tmp_path / "pos.json"
    write(log, "a\n")
    f = FileFollower(log, position_file=pos, start_at_end=False)
    assert f.read_lines() == [b"a"]
    f.save_position()
    f.close()
    write(log, "b\n")
    log.rename(tmp_path / "r.log.1")
    write(log, "c\n")
    g = FileFollower(log, position_file=pos)
    assert g.read_lines() == [b"b", b"c"]


def test_over_long_line_is_skipped_and_reported(tmp_path: Path) -> None:
    log = tmp_path / "r.log"
    write(log, "")
    skipped: list[str] = []
    f = FileFollower(log, max_line_bytes=1000, on_skip=lambda reason, detail: skipped.append(reason))
    write(log, "x" * 5000)
    assert f.read_lines() == []
    write(log, "y" * 5000 + "\nok\n")
    assert f.read_lines() == [b"ok"]
    assert skipped == ["too_long"]


def test_resume_after_two_rotations_while_stopped(tmp_path: Path) -> None:
    log, pos = tmp_path / "r.log", tmp_path / "pos.json"
    write(log, "a\n")
    f = FileFollower(log, position_file=pos, start_at_end=False)
    assert f.read_lines() == [b"a"]
    f.save_position()
    f.close()
    write(log, "b\n")
    log.rename(tmp_path / "r.log.1")
    write(log, "c\n")
    (tmp_path / "r.log.1").rename(tmp_path / "r.log.2")
    log.rename(tmp_path / "r.log.1")
    write(log, "d\n")
    g = FileFollower(log, position_file=pos)
    assert g.read_lines() == [b"b", b"c", b"d"]


def test_resume_after_copy_truncate_while_stopped(tmp_path: Path) -> None:
    log, pos = tmp_path / "r.log", tmp_path / "pos.json"
    write(log, "old-1\n")
    skips: list[str] = []
    f = FileFollower(log, position_file=pos, start_at_end=False)
    assert f.read_lines() == [b"old-1"]
    f.save_position()
    f.close()
    write(log, "old-2\n")
    (tmp_path / "r.log.1").write_bytes(log.read_bytes())
    write(log, "new-1\nnew-2\nnew-3\n", mode="w")  # same inode, past the saved offset
    g = FileFollower(log, position_file=pos, on_skip=lambda reason, detail: skips.append(reason))
    assert g.read_lines() == [b"old-2", b"new-1", b"new-2", b"new-3"]
    assert skips == []


def test_resume_after_truncation_without_a_copy_counts_the_loss(tmp_path: Path) -> None:
    log, pos = tmp_path / "r.log", tmp_path / "pos.json"
    write(log, "old-1\nold-2\n")
    skips: list[str] = []
    f = FileFollower(log, position_file=pos, start_at_end=False)
    assert f.read_lines() == [b"old-1", b"old-2"]
    f.save_position()
    f.close()
    write(log, "new-1\n", mode="w")
    g = FileFollower(log, position_file=pos, on_skip=lambda reason, detail: skips.append(reason))
    assert g.read_lines() == [b"new-1"]
    assert skips == ["truncated_file"]
