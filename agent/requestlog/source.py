"""The request-log source: follower + parser + window aggregator, with drops counted by reason.

:meth:`RequestLogSource.poll` reads what is there, never blocks, never raises for bad data, and
returns the windows that closed. :func:`ingest_lines` is the same loop over given lines (tests,
benchmarks, one-shot replays of a captured log).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from agent.health import Health
from agent.requestlog.follow import FileFollower
from agent.requestlog.parse import Drop, LineParser, ParsedRequest
from agent.requestlog.window import ClosedWindow, WindowAggregator


class RequestLogSource:
    NAME = "request_log"

    def __init__(
        self,
        path: Path | str,
        aggregator: WindowAggregator,
        health: Health,
        *,
        position_file: Path | str | None = None,
        start_at_end: bool = True,
        max_line_bytes: int = 1 << 20,
    ) -> None:
        self.aggregator = aggregator
        self.health = health
        self.parser = LineParser(max_line_bytes)
        self.follower = FileFollower(
            path,
            position_file=position_file,
            start_at_end=start_at_end,
            max_line_bytes=max_line_bytes,
            on_skip=lambda reason, detail: health.drop(reason, detail, context=str(path)),
        )
        aggregator.on_late = self._late

    def _late(self, req: ParsedRequest) -> None:
        self.health.drop("late", f"{req.request} at {req.ts_ms}", context=str(self.follower.path))

    def poll(self, now_ms: int | None = None) -> list[ClosedWindow]:
        """Read available lines, then close windows the wall clock has passed."""
        lines = self.follower.read_lines()
        closed = ingest_lines(lines, self.parser, self.aggregator, self.health, str(self.follower.path))
        self.health.set_up(self.NAME, self.follower.up, f"{self.follower.path} is missing")
        self.health.log_behind_bytes = self.follower.behind_bytes
        if not lines:
            closed += self.aggregator.close_due(now_ms if now_ms is not None else int(time.time() * 1000))
        self.follower.save_position()
        return closed


def ingest_lines(
    lines: Iterable[bytes],
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    closed: list[ClosedWindow] = []
    parse, add = parser.parse, aggregator.add
    n = 0
    for line in lines:
        n += 1
        try:
            req = parse(line)
        except Drop as d:
            if d.reason != "not_a_request_line" or line.strip():
                health.drop(d.reason, d.detail, context=context)
            continue
        got = add(req)
        if got:
            closed += got
    health.lines_read += n
    for win in closed:
        for request, n_slow in win.slow_counts.items():
            health.slow_requests[request] += n_slow
    return closed
