"""A slow disk of one broker's own: its JVM's writes to the disk capped by the cgroup v1 blkio
controller (``blkio.throttle.write_iops_device``, the JVM moved into a cgroup of its own), so
its fsyncs wait their turn while its peers', on the same disk, do not; :func:`slow_disk` pairs
the cap with :func:`~testbed.faults.log_appends.slow_log_appends` so appends flush in the
broker's own request handler threads. Needs root and cgroup v1 blkio."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from linkwatch.errors import SetupError
from testbed.faults.log_appends import slow_log_appends
from testbed.faults.registry import register, unregister

BLKIO_ROOT = "/sys/fs/cgroup/blkio"  # the cgroup v1 blkio hierarchy


def block_device(path: os.PathLike[str] | str) -> str:
    """``MAJ:MIN`` of the whole disk that holds ``path`` (a partition's parent disk: the blkio
    throttle takes disks only). SetupError when ``path`` is on no block device (tmpfs, overlay)."""
    dev = os.stat(path).st_dev
    if os.major(dev) == 0:
        raise SetupError(f"{path} is on no block device (tmpfs or overlay?): no disk to throttle")
    sysfs = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if os.path.exists(f"{sysfs}/partition"):
        with open(f"{sysfs}/../dev") as f:
            return f.read().strip()
    return f"{os.major(dev)}:{os.minor(dev)}"


def blkio_cgroup(pid: int) -> str:
    """The blkio cgroup ``pid`` is in (``/`` for the root), from ``/proc/PID/cgroup``."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise SetupError(f"no process {pid}: is the broker running?") from None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return path
    raise SetupError(f"process {pid} is in no cgroup v1 blkio hierarchy (cgroup v2 only?)")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@contextlib.contextmanager
def throttle_disk_writes(
    pid: int, path: os.PathLike[str] | str, write_iops: int, blkio_root: str = BLKIO_ROOT
) -> Iterator[str]:
    """Cap process ``pid``'s writes to the disk that holds ``path`` at ``write_iops`` a second:
    the process (every thread) moves into a cgroup of its own, below its own blkio cgroup, with
    ``blkio.throttle.write_iops_device``. Its fsyncs wait for their turn, its peers' do not: a
    slow disk of its own on a machine where the brokers share one. Yields the cgroup's folder.

    Buffered writes are written back by the kernel's flusher threads, which cgroup v1 does not
    charge to the process: pair it with :func:`slow_log_appends`, so that appends flush in the
    broker's request handler threads (its Produce Local stage). On exit the process goes back to
    the cgroup it was in and the new one is removed. Needs root and the cgroup v1 blkio controller
    (SetupError otherwise, naming which)."""
    if not 1 <= write_iops <= 1_000_000:
        raise ValueError(f"write_iops={write_iops} must be between 1 and 1000000")
    device = block_device(path)
    parent = f"{blkio_root.rstrip('/')}{blkio_cgroup(pid)}".rstrip("/")
    if not os.access(f"{parent}/cgroup.procs", os.W_OK):
        raise SetupError(f"cannot write {parent}/cgroup.procs: root and cgroup v1 blkio are needed")
    group = f"{parent}/linkwatch-slow-disk-{pid}"

    def undo() -> None:
        if not os.path.isdir(group):
            return
        with contextlib.suppress(OSError):  # ESRCH: the process is gone, nothing to move back
            _write(f"{parent}/cgroup.procs", str(pid))
        for _ in range(50):  # tasks leave asynchronously: rmdir is EBUSY until they have
            try:
                os.rmdir(group)
                return
            except OSError:
                time.sleep(0.1)
        raise SetupError(f"{group} still has tasks after 5 s: remove it by hand")

    token = register(f"disk writes of pid {pid} capped at {write_iops}/s", undo)
    try:
        os.makedirs(group, exist_ok=True)
        _write(f"{group}/blkio.throttle.write_iops_device", f"{device} {write_iops}")
        _write(f"{group}/cgroup.procs", str(pid))
        yield group
    finally:
        unregister(token)
        undo()


@contextlib.contextmanager
def slow_disk(
    admin: Any, broker_id: int, pid: int, path: os.PathLike[str] | str, write_iops: int
) -> Iterator[str]:
    """A slow disk of broker ``broker_id``'s own: every append on it flushed
    (:func:`slow_log_appends`) and its JVM ``pid``'s writes to the disk that holds ``path`` (a
    log dir) capped at ``write_iops`` a second (:func:`throttle_disk_writes`), so its Produce
    Local stage grows and its peers' do not, though the brokers share one disk. Yields the
    cap's cgroup folder. Both are undone on exit."""
    with slow_log_appends(admin, broker_id), throttle_disk_writes(pid, path, write_iops) as group:
        yield group
