"""A stop-the-world safepoint storm: a JVM forced into full GCs or heap dumps, one after another.

Each operation stops every Java thread of the broker for its whole length (a heap dump of a few
hundred MB: 1-4 s here), like a GC storm or an operator's diagnostic gone wrong. The requests the
broker has read wait it out in whatever stage they are in; those that arrive meanwhile wait in
the socket, before the broker's clock for them starts: its own timers see only part of it, its
clients (the probe) all of it. The operations go through the broker's own Jolokia agent (an
MBean operation: ``java.lang:type=Memory`` ``gc`` or ``com.sun.management:type=HotSpotDiagnostic``
``dumpHeap``), so no new JVM is started per operation; dumps are written to a scratch directory
in memory and deleted at once.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from testbed.faults.registry import register, unregister

SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())


@dataclass
class SafepointStorm:
    """``how`` (``full_gc`` or ``heap_dump``) on the JVM behind ``jolokia_url``, the next one
    ``gap_s`` after the last ended, until stopped. After ``stop``: ``done`` operations,
    ``failed`` ones, and ``stopped_s``, their summed length (the time the JVM stood still)."""

    jolokia_url: str
    how: Literal["full_gc", "heap_dump"] = "heap_dump"
    gap_s: float = 1.0
    timeout_s: float = 60.0
    done: int = field(default=0, init=False)
    failed: int = field(default=0, init=False)
    stopped_s: float = field(default=0.0, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _token: int = field(default=0, init=False)

    def start(self) -> SafepointStorm:
        self._token = register(f"safepoint storm {self.jolokia_url}", self.stop)
        self._thread = threading.Thread(target=self._run, name="safepoint-storm", daemon=True)
        self._thread.start()
        return self

    def _request(self, n: int) -> tuple[dict, Path | None]:
        if self.how == "full_gc":
            return {"type": "exec", "mbean": "java.lang:type=Memory", "operation": "gc"}, None
        dump = SCRATCH / f"linkwatch-safepoint-{id(self)}-{n}.hprof"
        return {
            "type": "exec",
            "mbean": "com.sun.management:type=HotSpotDiagnostic",
            "operation": "dumpHeap",
            "arguments": [str(dump), True],
        }, dump

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            n += 1
            body, dump = self._request(n)
            t0 = time.monotonic()
            try:
                req = urllib.request.Request(
                    self.jolokia_url, json.dumps(body).encode(), {"Content-Type": "application/json"}
                )
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    ok = json.loads(resp.read()).get("status") == 200
            except (OSError, ValueError):
                ok = False
            finally:
                if dump is not None:
                    with contextlib.suppress(OSError):
                        dump.unlink()
            if ok:
                self.done += 1
                self.stopped_s += time.monotonic() - t0
            else:
                self.failed += 1
            self._stop.wait(self.gap_s)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(self.timeout_s + 5)
        unregister(self._token)

    def __enter__(self) -> SafepointStorm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
