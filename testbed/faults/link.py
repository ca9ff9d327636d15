"""A congested link to one broker: every byte to and from its port through an HTB rate cap.

``tc`` (iproute2) on the loopback device: an HTB root whose default class is unlimited, and one
class capped at ``rate``, which the packets with the broker's port as source or destination go
to (u32 filters). Clients' requests and responses, and followers' fetches from it, queue at the
cap, as behind a saturated or lossy network path; its own fetches from its peers are not capped.
``netem`` (delay, loss) is not in every kernel; a rate cap is. With ``rate`` given as a share of
the port's own traffic, the cap is measured first, for ``measure_s`` with the class unlimited.

Changing the machine's loopback queueing needs root, and a root qdisc that is not the device's
default is refused (someone else's). The loopback device is the whole machine's: one process
shapes it at a time (an exclusive ``flock`` on :data:`LOCK`, waited for up to ``lock_wait_s``),
so parallel test workers take turns instead of refusing each other. Undone by deleting the root
qdisc, also by ``revert_all``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from linkwatch.errors import SetupError
from testbed.cluster import try_lock
from testbed.faults.registry import register, unregister

DEV = "lo"
CLASS = "1:2"
LOCK = Path(tempfile.gettempdir()) / "linkwatch-loopback-qdisc.lock"


def _tc(*args: str, check: bool = True) -> str:
    tc = shutil.which("tc") or "/usr/sbin/tc"
    done = subprocess.run([tc, *args], capture_output=True, text=True, timeout=10)
    if check and done.returncode != 0:
        raise SetupError(f"tc {' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def class_bytes() -> int:
    """Bytes sent through the capped class so far."""
    out = _tc("-s", "class", "show", "dev", DEV, "classid", CLASS)
    m = re.search(r"Sent (\d+) bytes", out)
    return int(m[1]) if m else 0


@dataclass
class CongestedLink:
    """Cap the traffic of ``port`` on loopback at ``rate_kbit``, or at ``share`` × its own rate
    measured over ``measure_s`` (``rate_kbit`` 0). After start: ``measured_kbit``, ``cap_kbit``."""

    port: int
    rate_kbit: int = 0
    share: float = 0.85
    measure_s: float = 5.0
    lock_wait_s: float = 600.0
    measured_kbit: float = field(default=0.0, init=False)
    cap_kbit: int = field(default=0, init=False)
    _token: int = field(default=0, init=False)
    _lock_fd: int = field(default=-1, init=False)

    def start(self) -> CongestedLink:
        self._take_lock()
        try:
            root = _tc("qdisc", "show", "dev", DEV)
            if "htb" in root or "netem" in root or "tbf" in root:
                raise SetupError(f"{DEV} already has a root qdisc ({root.strip()}): not changing it")
        except BaseException:
            self._drop_lock()
            raise
        # From here ``stop`` (also through ``revert_all``) undoes whatever was done, lock included.
        self._token = register(f"congested link port {self.port}", self.stop)
        _tc("qdisc", "add", "dev", DEV, "root", "handle", "1:", "htb", "default", "1")
        _tc("class", "add", "dev", DEV, "parent", "1:", "classid", "1:1", "htb", "rate", "100gbit")
        _tc("class", "add", "dev", DEV, "parent", "1:", "classid", CLASS, "htb", "rate", "100gbit")
        for way in ("sport", "dport"):
            _tc(
                "filter", "add", "dev", DEV, "parent", "1:", "protocol", "ip", "prio", "1",
                "u32", "match", "ip", way, str(self.port), "0xffff", "flowid", CLASS,
            )  # fmt: skip
        if self.rate_kbit:
            self.cap_kbit = self.rate_kbit
        else:
            before, t0 = class_bytes(), time.monotonic()
            time.sleep(self.measure_s)
            self.measured_kbit = (class_bytes() - before) * 8 / 1000 / (time.monotonic() - t0)
            self.cap_kbit = max(8, int(self.measured_kbit * self.share))
        rate = f"{self.cap_kbit}kbit"
        _tc(
            "class", "change", "dev", DEV, "parent", "1:", "classid", CLASS, "htb", "rate", rate, "ceil", rate
        )
        return self

    def stop(self) -> None:
        _tc("qdisc", "del", "dev", DEV, "root", check=False)
        unregister(self._token)
        self._drop_lock()

    def _take_lock(self) -> None:
        deadline = time.monotonic() + self.lock_wait_s
        while (fd := try_lock(LOCK)) is None:
            if time.monotonic() > deadline:
                raise SetupError(
                    f"{DEV} is being shaped by another process (lock {LOCK}) for over {self.lock_wait_s:.0f} s"
                )
            time.sleep(0.5)
        self._lock_fd = fd

    def _drop_lock(self) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the file drops its lock
            self._lock_fd = -1

    def __enter__(self) -> CongestedLink:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
