"""The request-log source: what the agent runs on a broker to read its ``kafka-request.log``.

:class:`RequestLogSource` joins the file follower, the ingest of each block it reads and the
window aggregator. Contract: :meth:`RequestLogSource.poll` reads what is there, never blocks,
never raises for bad data (a bad line is dropped and counted in ``health`` by reason), and
returns the windows that closed.

One line from the file to a record, module by module in the order it passes them:

* :mod:`agent.requestlog.follow` — the file read in blocks of complete lines (rotation,
  truncation, the saved position);
* :mod:`agent.requestlog.ingest` — which path the block takes;
* :mod:`agent.requestlog.bulk` — a block of usual lines in one open window, at once (the
  compiled :mod:`~agent.requestlog.scanner`, or :mod:`~agent.requestlog.shape` and
  :mod:`~agent.requestlog.typed` in Python);
* :mod:`agent.requestlog.lines` — any other block, line by line: the extractor for usual lines,
  the general parser (:mod:`agent.requestlog.parse`) for the rest and for every drop reason;
* :mod:`agent.requestlog.window` — windows of sketches and exemplars, closed into
  :class:`~agent.requestlog.window.ClosedWindow` (whose sketches are the records sent).
"""

from __future__ import annotations

import time
from datetime import tzinfo
from pathlib import Path

from agent.health import Health
from agent.requestlog.follow import FileFollower
from agent.requestlog.ingest import ingest_block
from agent.requestlog.parse import LineParser, ParsedRequest
from agent.requestlog.scanner import announce
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
        zone: tzinfo | None = None,
    ) -> None:
        self.aggregator = aggregator
        self.health = health
        self.parser = LineParser(max_line_bytes, zone)
        self.follower = FileFollower(
            path,
            position_file=position_file,
            start_at_end=start_at_end,
            max_line_bytes=max_line_bytes,
            on_skip=lambda reason, detail: health.drop(reason, detail, context=str(path)),
        )
        health.request_log_scanner = announce()
        aggregator.on_late = self._late
        aggregator.on_future = self._future

    @property
    def missing(self) -> str:
        """Why the source is down while the file is not there, as the log says it (once)."""
        return (
            f"request_log.path {self.follower.path} does not exist (is it the broker's request log, "
            "and does the broker's log4j2 write kafka.request.logger there? docs/agent.md); "
            "read as soon as it appears"
        )

    def _late(self, req: ParsedRequest) -> None:
        self.health.drop("late", f"{req.request} at {req.ts_ms}", context=str(self.follower.path))

    def _future(self, req: ParsedRequest) -> None:
        self.health.drop("future_timestamp", f"{req.request} at {req.ts_ms}", context=str(self.follower.path))

    def poll(self, now_ms: int | None = None) -> list[ClosedWindow]:
        """Read available lines, then close windows the wall clock has passed.

        Closing by the clock happens whenever the follower has read to the end of the log (a
        busy log too), never while it is still behind: lines not read yet may belong to them."""
        closed: list[ClosedWindow] = []
        for block in self.follower.iter_blocks():
            closed += ingest_block(block, self.parser, self.aggregator, self.health, str(self.follower.path))
        self.health.set_up(self.NAME, self.follower.up, self.missing)
        self.health.log_behind_bytes = self.follower.behind_bytes
        if self.follower.caught_up:
            closed += self.aggregator.close_due(now_ms if now_ms is not None else int(time.time() * 1000))
        try:
            self.follower.save_position()
        except OSError as e:  # a full or read-only disk must not cost the windows just closed
            self.health.position_not_saved(str(self.follower.position_file), f"{e.strerror or e}")
        return closed
