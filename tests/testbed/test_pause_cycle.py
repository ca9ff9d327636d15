"""The pause duty cycle on a real target process (a ``sleep``), in its own process
(testbed.pause_cycle: paused on schedule, always left running, also when its caller
dies) and in a thread of the caller."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from testbed import faults
from testbed.pause_cycle import main


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def target() -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(["sleep", "120"])
    yield proc
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()


@pytest.mark.timing
@pytest.mark.parametrize("own_process", [True, False], ids=["process", "thread"])
def test_pauses_on_schedule_and_leaves_the_target_running(
    target: subprocess.Popen, own_process: bool
) -> None:
    seen = set()
    with faults.PauseDutyCycle(target.pid, pause_ms=100, period_ms=200, own_process=own_process) as pause:
        assert pause.running
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            seen.add(_state(target.pid))
            time.sleep(0.01)
    assert not pause.running
    assert "T" in seen and "S" in seen, seen  # stopped part of the time, running the rest
    # ~10 cycles in 2 s (the thread's run a little longer each: its schedule is relative)
    assert 7 <= pause.cycles <= 11, pause.cycles
    assert pause.max_late_ms < 150, pause.max_late_ms
    time.sleep(0.05)
    assert _state(target.pid) != "T"
    assert not faults.ACTIVE


@pytest.mark.timing
def test_a_long_pause_is_ended_at_once_by_stop(target: subprocess.Popen) -> None:
    pause = faults.PauseDutyCycle(target.pid, pause_ms=60_000, period_ms=60_001, own_process=True).start()
    time.sleep(0.5)
    assert _state(target.pid) == "T"
    t0 = time.monotonic()
    pause.stop()
    assert time.monotonic() - t0 < 2.0
    assert _state(target.pid) != "T"
    pause.stop()  # idempotent


@pytest.mark.timing
def test_the_target_is_left_running_when_the_caller_is_killed(target: subprocess.Popen) -> None:
    # A caller that starts a 60 s pause and is then SIGKILLed: no stop(), no revert_all().
    code = (
        "import sys, time\n"
        "from testbed.faults import PauseDutyCycle\n"
        f"PauseDutyCycle({target.pid}, pause_ms=60_000, period_ms=60_001, own_process=True).start()\n"
        "print('started', flush=True)\n"
        "time.sleep(120)\n"
    )
    caller = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert caller.stdout is not None and caller.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 10
        while _state(target.pid) != "T":
            assert time.monotonic() < deadline, "the pause never began"
            time.sleep(0.05)
    finally:
        caller.kill()
        caller.wait()
    deadline = time.monotonic() + 5
    while _state(target.pid) == "T":
        assert time.monotonic() < deadline, "target still stopped 5 s after its caller died"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["1", "2"], "usage"),
        (["1", "0", "100"], "pause_ms=0"),
        (["1", "100", "100"], "pause_ms=100"),
        (["1", "100", "200", "1.5"], "jitter=1.5"),
        (["1", "2", "3", "4", "5", "6"], "usage"),
    ],
)
def test_bad_arguments_are_refused(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.timing
def test_jittered_pauses_keep_the_duty_cycle_and_lose_the_period(target: subprocess.Popen) -> None:
    """Aperiodic pauses: the stopped share stays near pause/period, while the moments the target
    is stopped no longer repeat with the period (an observer probing every period_ms would see
    the stopped state at some phases and not others)."""
    period_s, samples = 0.2, []
    with faults.PauseDutyCycle(
        target.pid, pause_ms=100, period_ms=200, own_process=True, jitter=0.6, seed=3
    ) as pause:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0:
            samples.append((time.monotonic() - t0, _state(target.pid) == "T"))
            time.sleep(0.005)
    stopped = sum(s for _, s in samples) / len(samples)
    assert 0.3 <= stopped <= 0.7, stopped
    assert pause.cycles >= 12
    # A probe every period lands at the same phase each time: with fixed periods it would see
    # the same state every time; with jitter it sees both.
    for phase in (0.05, 0.15):
        seen = {s for t, s in samples if abs((t - phase) % period_s) < 0.006}
        assert seen == {True, False}, (phase, seen)
    with pytest.raises(ValueError, match="jitter"):
        faults.PauseDutyCycle(target.pid, jitter=0.3)  # the thread's schedule has none


def test_a_target_that_is_gone_ends_the_cycle(target: subprocess.Popen) -> None:
    target.kill()
    target.wait()
    pause = faults.PauseDutyCycle(target.pid, pause_ms=50, period_ms=100, own_process=True).start()
    deadline = time.monotonic() + 5
    while pause.running:
        assert time.monotonic() < deadline, "the cycle goes on without its target"
        time.sleep(0.05)
    pause.stop()
    assert pause.cycles == 0
