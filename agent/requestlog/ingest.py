"""Which path a block of request-log lines takes, and the entry points that feed them.

:func:`ingest_block` is called with each block the follower reads (:class:`RequestLogSource`)
and tries, in order:

1. in bulk with the compiled scanner (:func:`agent.requestlog.bulk.ingest_compiled`) when it
   is loaded, else in bulk in Python (:func:`agent.requestlog.bulk.ingest_python`) — a block of
   usual lines in one open window;
2. line by line (:func:`agent.requestlog.lines.ingest_ordered`) — any other block.

:func:`ingest_lines` feeds given lines the same way (tests, benchmarks, one-shot replays of a
captured log).

Contract: the windows, exemplars and drops are those of ``aggregator.add(parser.parse(line))``
for every line, whichever path is taken; bad lines are dropped and counted in ``health`` by
reason, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent.health import Health
from agent.requestlog.bulk import ingest_compiled, ingest_python
from agent.requestlog.lines import add_general, count_slow, ingest_ordered
from agent.requestlog.parse import LineParser
from agent.requestlog.scanner import block_scan
from agent.requestlog.window import ClosedWindow, WindowAggregator


def ingest_block(
    block: bytes,
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    """Parse and account the lines of ``block`` (complete lines, each ending in ``\n``, as
    :meth:`~agent.requestlog.follow.FileFollower.read_blocks` gives them); returns the windows they closed.

    The same result as ``aggregator.add(parser.parse(line))`` for every line. A block of usual
    lines within one open window (the common case: a window holds ~10 s of log) is accounted in
    bulk (:func:`~agent.requestlog.bulk.ingest_compiled` when the compiled scanner is loaded,
    else :func:`~agent.requestlog.bulk.ingest_python`); any other line by line
    (:func:`~agent.requestlog.lines.ingest_ordered`)."""
    scan = block_scan()
    if scan is not None:
        closed = ingest_compiled(block, parser, aggregator, health, scan)
    else:
        closed = ingest_python(block, parser, aggregator, health)
    if closed is None:
        closed = ingest_ordered(block, parser, aggregator, health, context)
    return closed


def ingest_lines(
    lines: Iterable[bytes],
    parser: LineParser,
    aggregator: WindowAggregator,
    health: Health,
    context: str = "",
) -> list[ClosedWindow]:
    """Parse and account ``lines`` (without their newlines); returns the windows they closed.

    The same result as ``aggregator.add(parser.parse(line))`` for every line; see
    :func:`ingest_block`, which this calls with the lines joined ``INGEST_CHUNK_LINES`` at a
    time (bounded memory whatever the input's length)."""
    closed_all: list[ClosedWindow] = []
    chunk: list[bytes] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= INGEST_CHUNK_LINES:
            closed_all += _ingest_chunk(chunk, parser, aggregator, health, context)
            chunk = []
    if chunk:
        closed_all += _ingest_chunk(chunk, parser, aggregator, health, context)
    return closed_all


INGEST_CHUNK_LINES = 512


def _ingest_chunk(
    lines: list[bytes], parser: LineParser, aggregator: WindowAggregator, health: Health, context: str
) -> list[ClosedWindow]:
    block = b"\n".join(lines) + b"\n"
    if block.count(b"\n") == len(lines):
        return ingest_block(block, parser, aggregator, health, context)
    # A line holding a newline is still one line: each through the general path.
    closed: list[ClosedWindow] = []
    for line in lines:
        agg_closed = add_general(line, parser, aggregator, health, context)
        if agg_closed:
            closed += agg_closed
    health.lines_read += len(lines)
    count_slow(closed, health)
    return closed
