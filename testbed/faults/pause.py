"""A paused broker: SIGSTOP/SIGCONT of its JVM in a duty cycle. While stopped the JVM makes no
progress, so every stage of every request it handles is stretched, like a long GC or a stuck
disk; SIGCONT always ends it. The cycle runs in a thread of the caller or in a process of its
own (:mod:`testbed.pause_cycle`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from testbed.faults.registry import register, unregister


@dataclass
class PauseDutyCycle:
    """Stop the process for ``pause_ms`` out of every ``period_ms`` until stopped.

    The pause is real: the JVM makes no progress, so requests arriving during it see their
    queue/local/send stages stretched. ``stop`` always leaves the process running (SIGCONT).

    Two ways to run the cycle. ``own_process=True``: in a child process
    (:mod:`testbed.pause_cycle`) on an absolute schedule, so pauses come on time
    whatever the caller does (measured: resumes at most 15-70 ms late under the recovery bench's
    load). The default, a thread of the caller, is what the slow-broker tests and the demo were
    tuned with; its wake-ups wait for the caller's interpreter, so on a busy one its pauses run
    long and some seconds have none (a recovery-bench round had 10 s windows without a pause).
    Those tests move to ``own_process`` once the rules are checked against on-time pauses:
    with them, a broker paused 400 of every 1000 ms while it leads makes every broker wait in
    ``remote`` in some 2 s windows, which the analyzer's e2e test read as cluster-wide.

    After ``stop``, ``cycles`` is the number of pauses completed and ``max_late_ms`` the worst
    lateness of a resume against its schedule.
    """

    pid: int
    pause_ms: int = 400
    period_ms: int = 1000
    own_process: bool = False
    # Aperiodic pauses (own_process only): each pause and each run between them within ± jitter
    # of its nominal length; seed makes the schedule repeatable.
    jitter: float = 0.0
    seed: int | None = None
    _proc: subprocess.Popen[str] | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _token: int = field(default=0, init=False)
    cycles: int = field(default=0, init=False)
    max_late_ms: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.pause_ms < self.period_ms:
            raise ValueError(f"pause_ms={self.pause_ms} must be > 0 and < period_ms={self.period_ms}")
        if not 0 <= self.jitter < 1 or (self.jitter and not self.own_process):
            raise ValueError(f"jitter={self.jitter} must be in [0, 1), and needs own_process")

    def start(self) -> PauseDutyCycle:
        self._token = register(f"pause pid {self.pid}", self.stop)
        if self.own_process:
            cmd = [
                sys.executable,
                "-m",
                "testbed.pause_cycle",
                str(self.pid),
                str(self.pause_ms),
                str(self.period_ms),
                str(self.jitter),
                *([] if self.seed is None else [str(self.seed)]),
            ]
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        else:
            self._thread = threading.Thread(target=self._run, name=f"pause-{self.pid}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                resume_at = time.monotonic() + self.pause_ms / 1000
                self._stop.wait(self.pause_ms / 1000)
                os.kill(self.pid, signal.SIGCONT)
                self.max_late_ms = max(self.max_late_ms, (time.monotonic() - resume_at) * 1000)
                self.cycles += 1
                self._stop.wait((self.period_ms - self.pause_ms) / 1000)
        except ProcessLookupError:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)

    @property
    def running(self) -> bool:
        """The cycle is running (started and not stopped; its process or thread alive)."""
        if self.own_process:
            return self._proc is not None and self._proc.poll() is None
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                out, _ = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            fields = (out or "").split()
            if len(fields) == 4 and fields[0] == "cycles" and fields[2] == "max_late_ms":
                self.cycles, self.max_late_ms = int(fields[1]), float(fields[3])
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        unregister(self._token)

    def __enter__(self) -> PauseDutyCycle:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
