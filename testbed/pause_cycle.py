"""The SIGSTOP/SIGCONT duty cycle of :class:`testbed.faults.PauseDutyCycle`
(``own_process=True``), run as a process of its own::

    python -m testbed.pause_cycle PID PAUSE_MS PERIOD_MS [JITTER [SEED]]

Why a process and not a thread of the caller: the callers (benchmarks, the demo, tests) run load
generators, agents and a Spark driver in one interpreter, and a thread's wake-ups wait for that
interpreter's lock; pauses then come late or not at all, and the fault is not the one asked for
(a 90 s fault of ``bench/remediation_recover.py`` had 10 s windows with no pause in them).

The cycle follows an absolute schedule (a late cycle is not made up by a burst of pauses). With
``JITTER`` j > 0 it is aperiodic: each pause and each run between pauses is drawn uniformly in
``[1 - j, 1 + j]`` × its nominal length (the duty cycle stays ``PAUSE_MS / PERIOD_MS`` on
average), so no observer probing at a fixed period can stay in step with it. On
SIGTERM (or the parent's death, through ``PR_SET_PDEATHSIG``) it stops at once, even mid-pause,
always leaves the target running (SIGCONT), and prints one line: ``cycles N max_late_ms X``
(the cycles completed and the worst lateness of a resume against its schedule).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import sys
import time

PR_SET_PDEATHSIG = 1


class _Stop(Exception):
    pass


def _on_term(signum: int, frame: object) -> None:
    raise _Stop


def run(
    pid: int, pause_ms: int, period_ms: int, jitter: float = 0.0, seed: int | None = None
) -> tuple[int, float]:
    """Pause ``pid`` for ``pause_ms`` of every ``period_ms`` (each drawn within ``± jitter`` of
    it) until SIGTERM; returns (cycles, worst lateness in ms). The target is always left
    running."""
    cycles, late_s = 0, 0.0
    rng = random.Random(seed)
    pause_s, run_s = pause_ms / 1000, (period_ms - pause_ms) / 1000

    def drawn(nominal_s: float) -> float:
        return nominal_s * rng.uniform(1 - jitter, 1 + jitter) if jitter else nominal_s

    try:
        start = time.monotonic()
        while True:
            os.kill(pid, signal.SIGSTOP)
            resume_at = start + drawn(pause_s)
            time.sleep(max(0.0, resume_at - time.monotonic()))
            os.kill(pid, signal.SIGCONT)
            now = time.monotonic()
            late_s = max(late_s, now - resume_at)
            cycles += 1
            start = max(resume_at + drawn(run_s), now)  # no catch-up burst after a late cycle
            time.sleep(max(0.0, start - time.monotonic()))
    except (_Stop, ProcessLookupError):
        pass
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    return cycles, late_s * 1000


def main(argv: list[str]) -> int:
    if not 3 <= len(argv) <= 5:
        print("usage: python -m testbed.pause_cycle PID PAUSE_MS PERIOD_MS [JITTER [SEED]]", file=sys.stderr)
        return 2
    pid, pause_ms, period_ms = (int(a) for a in argv[:3])
    jitter = float(argv[3]) if len(argv) > 3 else 0.0
    seed = int(argv[4]) if len(argv) > 4 else None
    if not 0 < pause_ms < period_ms:
        print(f"pause_ms={pause_ms} must be > 0 and < period_ms={period_ms}", file=sys.stderr)
        return 2
    if not 0 <= jitter < 1:
        print(f"jitter={jitter} must be >= 0 and < 1", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_term)
    # If the parent dies without stopping us, stop as if told to (the target is left running).
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    with contextlib.suppress(OSError):
        os.nice(-10)  # resume on time on a busy machine (root only; harmless otherwise)
    cycles, late_ms = run(pid, pause_ms, period_ms, jitter, seed)
    print(f"cycles {cycles} max_late_ms {late_ms:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
