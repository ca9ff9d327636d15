"""The on-disk spool: order, acknowledgement, restart, bound (drop oldest), torn tail, disk errors."""

from __future__ import annotations

from pathlib import Path

from agent.output.spool import Spool


def fill(spool: Spool, n: int, start: int = 0, size: int = 100) -> list[bytes]:
    keys = [f"k{i:05d}".encode() for i in range(start, start + n)]
    for k in keys:
        assert spool.append(k, b"v" * size)
    return keys


def test_records_come_back_in_order_until_acked(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    keys = fill(spool, 100)
    assert [k for k, _ in spool.peek(1000)] == keys
    spool.ack(30)
    assert [k for k, _ in spool.peek(10)] == keys[30:40]
    assert len(spool) == 70
    spool.ack(70)
    assert spool.peek(10) == []
    assert len(spool) == 0
    assert len(list(tmp_path.glob("*.seg"))) == 1  # acked full segments are deleted


def test_restart_resumes_at_the_cursor(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    keys = fill(spool, 50)
    spool.ack(20)
    spool.close()
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=4096)
    assert [k for k, _ in again.peek(1000)] == keys[20:]
    more = fill(again, 5, start=50)
    assert [k for k, _ in again.peek(1000)] == keys[20:] + more


def test_past_the_bound_the_oldest_are_dropped_and_counted(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=64 << 10, segment_bytes=8 << 10)
    keys = fill(spool, 1000, size=200)  # ~215 KB into a 64 KB spool
    remaining = [k for k, _ in spool.peek(10_000)]
    assert spool.size_bytes <= 64 << 10
    assert spool.dropped_oldest + len(remaining) == 1000
    assert remaining == keys[-len(remaining) :]  # the newest survive, in order, no gaps


def test_torn_tail_after_a_crash_is_cut(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1 << 20)
    keys = fill(spool, 10)
    spool.close()
    seg = next(tmp_path.glob("*.seg"))
    with open(seg, "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage")
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=1 << 20)
    assert [k for k, _ in again.peek(100)] == keys
    more = fill(again, 2, start=10)
    assert [k for k, _ in again.peek(100)] == keys + more


def test_unwritable_directory_counts_and_keeps_going(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s", max_bytes=1 << 20, segment_bytes=200)
    fill(spool, 1)
    # The next segment cannot be created: its path is taken by a directory.
    (tmp_path / "s" / f"{2:020d}.seg").mkdir()
    assert spool.append(b"x", b"v" * 300) is False
    assert spool.dropped_write_error == 1
