"""Capture policy for ``kafka-request.log``: what the broker writes, and so what it costs.

* ``always`` — ``kafka.request.logger`` at DEBUG: every request, full detail.
* ``slow_only`` — DEBUG plus a log4j2 ``RegexFilter`` on the request appender that accepts only
  lines whose ``totalTimeMs`` is at or above a threshold (:func:`slow_only_filter_yaml`). The
  broker still builds each line (the filter sees the formatted message) but writes far fewer.
  Window sketches then only describe slow requests: use JMX for the rest.
* ``windows`` — the logger at WARN normally and switched to DEBUG for bounded capture windows
  through the ``BROKER_LOGGER`` dynamic config, no restart (:class:`BrokerLoggerSwitch`).

Changing a broker's logger level changes the cluster: :class:`BrokerLoggerSwitch` does nothing
without an explicit list of broker ids, supports ``dry_run`` (logs what it would do), and
always restores the idle level when a window ends (also on error).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from linkwatch.errors import SetupError

log = logging.getLogger("linkwatch.agent.capture")
REQUEST_LOGGER = "kafka.request.logger"


def at_least_regex(n: int) -> str:
    """A regex matching the decimal integers >= ``n`` (no leading zeros), e.g. 300 ->
    ``[1-9]\\d{3,}|[3-9]\\d{2}``: more digits than n, or as many and at least n digit by digit."""
    if n <= 0:
        return r"\d+"
    digits = str(n)
    k = len(digits)
    parts = [rf"[1-9]\d{{{k},}}"]
    for i, ch in enumerate(digits):
        d = int(ch)
        rest = k - i - 1
        low = d + 1
        if low <= 9:
            tail = rf"\d{{{rest}}}" if rest else ""
            parts.append(f"{digits[:i]}[{low}-9]{tail}")
    parts.append(digits)
    return "|".join(parts)


def slow_only_regex(threshold_ms: int) -> str:
    """Whole-message regex for log4j2 ``RegexFilter`` (it uses ``matches()``)."""
    return rf'.*"totalTimeMs":({at_least_regex(threshold_ms)})(\.\d+)?,.*'


def slow_only_filter_yaml(threshold_ms: int, indent: int = 8) -> str:
    """The filter block for the request appender of a log4j2 YAML config (``indent`` spaces, the
    appender's own property level; :class:`testbed.cluster.ClusterSpec` takes it as
    ``request_filter_yaml``)."""
    regex = slow_only_regex(threshold_ms).replace("\\", "\\\\").replace('"', '\\"')
    pad = " " * indent
    return f'{pad}RegexFilter: {{ regex: "{regex}", onMatch: ACCEPT, onMismatch: DENY }}\n'


class BrokerLoggerSwitch:
    """Set ``kafka.request.logger`` on chosen brokers through IncrementalAlterConfigs
    (resource type BROKER_LOGGER); ``window`` is a bounded capture window.

    ``admin`` is an admin client, or a callable making one: then it is made on first use and
    made again after a failed switch (an agent may start before its broker is reachable).
    """

    def __init__(
        self, admin, broker_ids: list[int], *, idle_level: str = "WARN", dry_run: bool = False
    ) -> None:
        if not broker_ids:
            raise SetupError("capture windows need an explicit list of broker ids")
        self.admin = admin
        self.broker_ids = broker_ids
        self.idle_level = idle_level
        self.dry_run = dry_run
        self._made = None  # the admin client made by ``admin()`` when admin is a factory

    def close(self) -> None:
        """Close the admin client this switch made itself (one passed in is the caller's)."""
        if self._made is not None:
            with contextlib.suppress(Exception):
                self._made.close()
            self._made = None

    def set_level(self, level: str) -> None:
        from kafka.admin import ConfigResource, ConfigResourceType

        if self.dry_run:
            log.info("dry run: would set %s=%s on brokers %s", REQUEST_LOGGER, level, self.broker_ids)
            return
        resources = [
            ConfigResource(ConfigResourceType.BROKER_LOGGER, str(b), {REQUEST_LOGGER: level})
            for b in self.broker_ids
        ]
        admin = self.admin
        if callable(admin) and not hasattr(admin, "alter_configs"):
            admin = self._made = self._made or admin()
        try:
            result = admin.alter_configs(resources, raise_on_unknown=False)
        except Exception:
            if admin is self._made:
                self._made = None  # made again on the next switch
                with contextlib.suppress(Exception):
                    admin.close()
            raise
        errors = [f"{k} {n}: {v}" for k, by in result.items() for n, v in by.items() if v != "OK"]
        if errors:
            raise SetupError(f"the broker refused {REQUEST_LOGGER}={level}: " + "; ".join(errors))

    @contextlib.contextmanager
    def window(self, seconds: float | None = None, level: str = "DEBUG") -> Iterator[None]:
        """Capture at ``level`` inside the block (and at most ``seconds`` if given), then restore."""
        self.set_level(level)
        try:
            yield
            if seconds is not None:
                time.sleep(seconds)
        finally:
            self.set_level(self.idle_level)


# -- sampled capture windows: the agent's default capture policy --------------------------------
#
# The broker pays for the request log only while ``kafka.request.logger`` is at DEBUG: Kafka
# checks ``isDebugEnabled`` before it renders a request to JSON, so a logger at WARN costs
# nothing, and a log4j2 filter (``slow_only``) cannot save that CPU. The sampled policy keeps the
# logger at the idle level and, in every aggregation window of ``window_s``, switches it to
# DEBUG for ``1 / stride`` of the window, in ``n`` short slices spaced evenly at a random phase
# (spread, because latency tails come in bursts; random and wrapping at the window's end, so
# every moment of the window is captured with the same chance and no periodic load or fault
# can hide between slices: :func:`plan_window`). The broker's extra CPU per request is then about ``full_capture_cost_pct /
# stride``; the agent multiplies the window's counts by ``stride`` and marks its records
# ``capture_ratio = 1 / stride``. Counts are estimates there; quantiles are those of the
# captured requests.


def capture_stride(
    rate_rps: float | None,
    *,
    cpu_budget_pct: float,
    full_capture_cost_pct: float,
    max_lines_per_s: float,
    max_stride: int,
) -> int:
    """How many windows' worth of time the captured part stands for (1 = full capture).

    The CPU budget alone gives ``ceil(full_capture_cost_pct / cpu_budget_pct)``. A busy broker
    raises it further, so that the agent reads at most ``max_lines_per_s`` lines per second on
    average (its own CPU and the log's disk bytes grow with the lines, not the requests).
    Never above ``max_stride`` (the shortest slice that still makes sense), never below 1.
    """
    stride = math.ceil(full_capture_cost_pct / cpu_budget_pct - 1e-9)
    if rate_rps is not None and rate_rps > 0 and max_lines_per_s > 0:
        stride = max(stride, math.ceil(rate_rps / max_lines_per_s - 1e-9))
    return max(1, min(stride, max_stride))


@dataclass(frozen=True)
class CaptureSlice:
    """One planned capture: DEBUG over ``[on_ms, off_ms)``, inside the window at ``window_start_ms``."""

    window_start_ms: int
    stride: int
    on_ms: int
    off_ms: int


def plan_window(
    window_start_ms: int,
    window_s: int,
    stride: int,
    rng: random.Random,
    *,
    slices: int = 1,
    min_slice_ms: int = 0,
    end_margin_ms: int = 50,
) -> list[CaptureSlice]:
    """The slices of one window, in time order: ``1 / stride`` of the window at DEBUG, as at
    most ``slices`` equal slices (none shorter than ``min_slice_ms``) spaced evenly at one
    random phase; a slice running past the window's end wraps to its start.

    So every moment of the window is captured with the same chance, ``1 / stride``. A uniform
    offset per slice would capture the window's edges less, and periodic work at a fixed phase
    in the window (a broker task every 5 s, say) would be sampled less than the rest: measured,
    the p99 read low in every draw. The exception is the last ``end_margin_ms``, where the
    switch back must land before the window ends. Stride 1 is the whole window, one slice."""
    window_ms = window_s * 1000
    if stride <= 1:
        return [CaptureSlice(window_start_ms, 1, window_start_ms, window_start_ms + window_ms)]
    usable = window_ms - end_margin_ms
    n = max(1, min(slices, usable // stride // max(min_slice_ms, 1)))
    part = usable // n
    length = part // stride
    phase = rng.randrange(part)
    spans = []
    for i in range(n):
        on = phase + i * part
        off = on + length
        if off <= usable:
            spans.append((on, off))
        elif on < usable:
            spans += [(on, usable), (0, off - usable)]
        else:
            spans.append((on - usable, off - usable))
    return [
        CaptureSlice(window_start_ms, stride, window_start_ms + on, window_start_ms + off)
        for on, off in sorted(spans)
        if off > on
    ]


@dataclass
class _Captured:
    slices: list[CaptureSlice]
    # Every line of slice i is stamped inside spans[i] = [on, off]: DEBUG was asked for at on,
    # and the broker had acknowledged the idle level again by off.
    spans: list[tuple[int, int]] = field(default_factory=list)
    error: str = ""

    @property
    def window_start_ms(self) -> int:
        return self.slices[0].window_start_ms

    @property
    def stride(self) -> int:
        return self.slices[0].stride


class CaptureScheduler:
    """Runs sampled capture windows on this agent's own broker, in a thread of its own.

    Contract:

    * ``start()`` first sets the idle level (repairing a DEBUG left by an agent that died inside
      a slice), then captures each window's slices until ``stop()``, which always ends with the
      idle level set (also on error; a failed switch is retried at the next slice).
    * ``factor(window_start_ms)`` is the multiplier for that window's counts: 1 in a dry run
      (the switches are only logged, so the broker logs what its config says); the stride when
      every slice of the window was switched on and off inside the window as planned, ``None``
      otherwise (a window the agent did not plan, e.g. the one it started in, or one with a
      failed switch: the broker's own admin API answers late or not at all exactly when the
      broker stalls). The caller keeps such a window's lines, scaled by
      :meth:`planned_stride` and marked inexact: the windows that show a broker sick must not
      need its cooperation to be kept.
    * ``observe(lines, window_start_ms)`` reports how many lines that window's slices had; the
      next windows' stride follows the broker's request rate from it.
    * State is bounded: the last ``keep_windows`` windows' slices.
    """

    def __init__(
        self,
        switch: BrokerLoggerSwitch,
        *,
        window_s: int,
        cpu_budget_pct: float,
        full_capture_cost_pct: float,
        max_lines_per_s: float,
        min_slice_s: float,
        slices_per_window: int = 1,
        on_error: Callable[[str], None] | None = None,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.time,
        keep_windows: int = 64,
    ) -> None:
        self.switch = switch
        self.window_s = window_s
        self.cpu_budget_pct = cpu_budget_pct
        self.full_capture_cost_pct = full_capture_cost_pct
        self.max_lines_per_s = max_lines_per_s
        self.min_slice_ms = int(min_slice_s * 1000)
        self.max_stride = max(1, int(window_s / min_slice_s))
        self.slices_per_window = slices_per_window
        self.on_error = on_error or (lambda detail: log.warning("capture switch failed: %s", detail))
        self.rng = rng or random.Random()
        self.clock = clock
        self.rate_rps: float | None = None
        self._captured: collections.OrderedDict[int, _Captured] = collections.OrderedDict()
        self._keep = keep_windows
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.switch_errors = 0

    # -- what the agent asks ---------------------------------------------------------------
    @property
    def stride(self) -> int:
        return capture_stride(
            self.rate_rps,
            cpu_budget_pct=self.cpu_budget_pct,
            full_capture_cost_pct=self.full_capture_cost_pct,
            max_lines_per_s=self.max_lines_per_s,
            max_stride=self.max_stride,
        )

    def plan(self, window_start_ms: int, stride: int | None = None) -> list[CaptureSlice]:
        """The slices of that window at ``stride`` (now's by default), as the thread plans them."""
        return plan_window(
            window_start_ms,
            self.window_s,
            self.stride if stride is None else stride,
            self.rng,
            slices=self.slices_per_window,
            min_slice_ms=self.min_slice_ms,
        )

    def captured(self) -> list[_Captured]:
        """The remembered windows, oldest first (a copy)."""
        with self._lock:
            return list(self._captured.values())

    def _complete(self, window_start_ms: int) -> _Captured | None:
        """That window's capture if every slice was switched on and off without error."""
        with self._lock:
            c = self._captured.get(window_start_ms)
        return c if c is not None and not c.error and len(c.spans) == len(c.slices) else None

    def factor(self, window_start_ms: int) -> int | None:
        if self.switch.dry_run:
            return 1  # nothing is switched: the broker logs what its own config says, unscaled
        c = self._complete(window_start_ms)
        if c is None:
            return None
        end_ms = window_start_ms + self.window_s * 1000
        if c.stride == 1:  # whole window at DEBUG: on before it began, off after it ended
            on, off = c.spans[0]
            return 1 if on <= window_start_ms and off >= end_ms else None
        inside = all(window_start_ms <= on <= off <= end_ms for on, off in c.spans)
        return c.stride if inside else None

    def planned_stride(self, window_start_ms: int) -> int:
        """The stride that window was planned at (now's stride for a window never planned, e.g.
        the one the agent started in)."""
        with self._lock:
            c = self._captured.get(window_start_ms)
        return c.stride if c is not None else self.stride

    def observe(self, lines: int, window_start_ms: int) -> None:
        """The captured slices of that window held ``lines`` request lines."""
        c = self._complete(window_start_ms)
        if c is None:
            return
        captured_s = sum(off - on for on, off in c.spans) / 1000
        if captured_s <= 0:
            return
        rate = lines / captured_s
        # A rising rate is followed at once (it is what costs); a falling one halfway per window.
        self.rate_rps = rate if self.rate_rps is None or rate > self.rate_rps else (self.rate_rps + rate) / 2

    # -- the thread --------------------------------------------------------------------------
    def start(self) -> CaptureScheduler:
        self._set(self.switch.idle_level)
        self._thread = threading.Thread(target=self._run, name="linkwatch-capture", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        self._set(self.switch.idle_level)
        self.switch.close()

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _wait_until(self, at_ms: int) -> bool:
        """Sleep until ``at_ms``; False if asked to stop meanwhile."""
        while not self._stop.is_set():
            left = at_ms - self._now_ms()
            if left <= 0:
                return True
            self._stop.wait(min(left / 1000, 1.0))
        return False

    def _set(self, level: str) -> str:
        """Set the level; the error text if that failed (reported, never raised)."""
        try:
            self.switch.set_level(level)
            return ""
        except Exception as e:  # an unreachable broker must not end the thread
            self.switch_errors += 1
            detail = f"{REQUEST_LOGGER}={level}: {type(e).__name__}: {e}"
            self.on_error(detail)
            return detail

    def _remember(self, c: _Captured) -> None:
        with self._lock:
            self._captured[c.window_start_ms] = c
            while len(self._captured) > self._keep:
                self._captured.popitem(last=False)

    def _run(self) -> None:
        window_ms = self.window_s * 1000
        carried_to: int | None = None  # DEBUG stays on from a full-capture window ending here
        while not self._stop.is_set():
            # the next window that begins at least 100 ms from now (time to switch before it)
            start_ms = (
                carried_to
                if carried_to is not None
                else ((self._now_ms() + 100) // window_ms + 1) * window_ms
            )
            c = _Captured(self.plan(start_ms))
            self._remember(c)
            for sl in c.slices:
                if sl.stride == 1 and carried_to is not None:
                    on_ms = start_ms - 1  # on since an earlier window
                else:
                    if not self._wait_until(sl.on_ms - (50 if sl.stride == 1 else 0)):
                        return
                    on_ms = self._now_ms()  # before the switch: no line of the slice is earlier
                    c.error = c.error or self._set("DEBUG")
                carried_to = None
                if not self._wait_until(sl.off_ms):
                    # Stopped within the slice: switch back here, so that the span recorded covers
                    # every line it let through; the window is incomplete (never scaled).
                    self._set(self.switch.idle_level)
                    c.spans.append((on_ms, self._now_ms()))
                    c.error = c.error or "stopped within a slice"
                    return
                if sl.stride == 1 and self.stride == 1 and not c.error:
                    c.spans.append((on_ms, sl.off_ms))  # stays on into the next full window
                    carried_to = sl.off_ms
                    continue
                err = self._set(self.switch.idle_level)
                c.spans.append((on_ms, self._now_ms()))
                c.error = c.error or err
