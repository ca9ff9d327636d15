"""The disk-write cap (:func:`testbed.faults.throttle_disk_writes`) on a real process and
the real cgroup v1 blkio controller: that process's fsyncs wait for their turn, and once reverted
it is back in its own cgroup and the cap's cgroup is gone."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from linkwatch.errors import SetupError
from testbed import faults

# A process that, for each line it reads, appends and fsyncs FSYNCS times and prints the seconds
# that took: the same system calls as a broker's flush per append.
FSYNCS = 20
WRITER = f"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
for _ in sys.stdin:
    t = time.perf_counter()
    for _ in range({FSYNCS}):
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
    print(time.perf_counter() - t, flush=True)
"""


def _usable(path: Path) -> str | None:
    """Why this machine cannot cap writes to ``path``'s disk (None when it can)."""
    try:
        faults.blkio_cgroup(os.getpid())
        faults.block_device(path)
    except SetupError as e:
        return str(e)
    if not os.access(f"{faults.BLKIO_ROOT}/cgroup.procs", os.W_OK):
        return f"{faults.BLKIO_ROOT}/cgroup.procs is not writable (not root?)"
    return None


class Writer:
    def __init__(self, path: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def fsyncs_s(self) -> float:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(self.proc.stdout.readline())

    def cgroup(self) -> str:
        return faults.blkio_cgroup(self.proc.pid)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[Writer]:
    if why := _usable(tmp_path):
        pytest.skip(f"no cgroup v1 blkio throttle here: {why}")
    w = Writer(tmp_path / "appends.bin")
    yield w
    w.proc.kill()
    w.proc.wait()


def test_capped_writes_make_that_process_fsyncs_wait_and_the_cap_is_removed(
    writer: Writer, tmp_path: Path
) -> None:
    home = writer.cgroup()
    iops = 20
    with faults.throttle_disk_writes(writer.proc.pid, tmp_path, iops) as group:
        assert writer.cgroup() == f"{home.rstrip('/')}/{os.path.basename(group)}"
        assert Path(group, "blkio.throttle.write_iops_device").read_text().split() == [
            faults.block_device(tmp_path),
            str(iops),
        ]
        capped_s = writer.fsyncs_s()
        assert any("disk writes" in name for name, _ in faults.ACTIVE.values())
    # Each fsync writes at least one block, and 20 a second are allowed: FSYNCS take about a
    # second or more (a throttle slice may let the first few through at once).
    assert capped_s >= 0.5 * FSYNCS / iops, capped_s
    assert writer.cgroup() == home
    assert not os.path.exists(group)
    assert not any("disk writes" in name for name, _ in faults.ACTIVE.values())
    writer.fsyncs_s()  # still writes once the cap is gone


def test_revert_all_removes_a_cap_left_active(writer: Writer, tmp_path: Path) -> None:
    home = writer.cgroup()
    cap = faults.throttle_disk_writes(writer.proc.pid, tmp_path, 1000)
    group = cap.__enter__()
    assert writer.cgroup() != home
    assert any("disk writes" in name for name in faults.revert_all())
    assert writer.cgroup() == home
    assert not os.path.exists(group)


@pytest.mark.parametrize("iops", [0, -1, 1_000_001])
def test_the_cap_must_be_a_sane_rate(iops: int, tmp_path: Path) -> None:
    with (
        pytest.raises(ValueError, match="write_iops"),
        faults.throttle_disk_writes(os.getpid(), tmp_path, iops),
    ):
        pass


def test_a_path_on_no_block_device_is_refused_by_name() -> None:
    with pytest.raises(SetupError, match="/dev/shm is on no block device"):
        faults.block_device("/dev/shm")


def test_a_process_that_is_gone_is_refused_by_pid(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with (
        pytest.raises(SetupError, match=f"no process {proc.pid}"),
        faults.throttle_disk_writes(proc.pid, tmp_path, 10),
    ):
        pass
