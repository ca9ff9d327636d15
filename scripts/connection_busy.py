"""How busy a broker kept each client connection: the share of every window it spent serving it.

    .venv/bin/python scripts/connection_busy.py BROKER/logs/kafka-request.log* \\
        [--request Produce] [--window-s 5] [--zero EPOCH_S] [--top 4] [--saturated 0.9]

A Kafka broker reads one request per connection at a time: its network processor mutes a
connection once a request is read and unmutes it when the response has gone out. So the time
it spends serving one connection's requests (each request's ``totalTimeMs``, from the read to
the response sent) never exceeds the wall time, and its share of a window says how much of the
window that client had a request in service. A share near 1 means the broker served the
client's requests back to back: its next request was already waiting (in the socket, or in the
client's own queue) when the previous response went out. That wait is held by no broker timer —
``totalTimeMs`` starts when the broker reads the request — and grows without bound while the
client sends faster than the broker serves it. A slow disk's flush in every append, a stalled
follower behind acks=all, a paused process: each makes a pipelining client's connection
saturate long before its logged p99 crosses a line, while a probe sending one record at a time
(never queueing behind itself) sees only the service time.

For fetches, the ``remote`` stage is the long poll's wait by design: it is left out, so an idle
consumer's connection is not busy. Each request's service interval ``[end - total, end]`` is
split exactly over the windows it spans (a line's timestamp is the response's completion).

A diagnostic for reading a fault's request logs (e.g. a testbed draw's): prints, per window,
the connections of the request type, how many were saturated, and the busiest with their
client ids. Lines that are not request lines are counted and skipped; a bad path or option is
one line naming it.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agent.requestlog.parse import STAGE_KEYS, Drop, LineParser, ParsedRequest, exemplar_fields  # noqa: E402
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER  # noqa: E402

TOTAL = STAGE_KEYS.index("totalTimeMs")
REMOTE = STAGE_KEYS.index("remoteTimeMs")
WAITS_BY_DESIGN = frozenset((FETCH_CONSUMER, FETCH_FOLLOWER))  # their remote stage is a long poll


@dataclass
class Busy:
    """One connection in one window: the ms the broker spent serving it, and its requests
    completed in the window (with the slowest one's service time)."""

    served_ms: float = 0.0
    completed: int = 0
    slowest_ms: float = 0.0
    line: bytes = b""  # one of its lines, for its client id

    def share(self, window_ms: int) -> float:
        return self.served_ms / window_ms


@dataclass
class Windows:
    window_ms: int
    by_start: dict[int, dict[str, Busy]] = field(default_factory=lambda: defaultdict(dict))
    dropped: Counter[str] = field(default_factory=Counter)
    other_requests: int = 0


def service_ms(req: ParsedRequest) -> float:
    """The time the broker held the connection for ``req``: its total, less a fetch's long poll."""
    total = req.stages[TOTAL]
    if req.request in WAITS_BY_DESIGN:
        return max(0.0, total - req.stages[REMOTE])
    return total


def spread(end_ms: float, served_ms: float, window_ms: int) -> Iterator[tuple[int, float]]:
    """(window start, ms of ``[end - served, end]`` in it), for each window the interval spans."""
    start = end_ms - served_ms
    w = int(start // window_ms) * window_ms
    while w < end_ms:
        part = min(end_ms, w + window_ms) - max(start, w)
        if part > 0:
            yield w, part
        w += window_ms


def busy_windows(lines: Iterable[bytes], request: str, window_ms: int) -> Windows:
    """Every connection's service time per window for requests of type ``request``."""
    out = Windows(window_ms)
    parser = LineParser()
    for raw in lines:
        line = raw.rstrip(b"\r\n")
        if not line:
            continue
        try:
            req = parser.parse(line)
        except Drop as e:
            out.dropped[e.reason] += 1
            continue
        if req.request != request:
            out.other_requests += 1
            continue
        served = service_ms(req)
        end_window = req.ts_ms // window_ms * window_ms
        for w, part in spread(req.ts_ms, served, window_ms):
            busy = out.by_start[w].setdefault(req.connection, Busy())
            busy.served_ms += part
            busy.line = busy.line or req.line  # the connection's client id, in every window it spans
            if w == end_window:
                busy.completed += 1
                busy.slowest_ms = max(busy.slowest_ms, served)
    return out


def read_lines(paths: list[Path]) -> Iterator[bytes]:
    for path in paths:
        with path.open("rb") as f:
            yield from f


def report(win: Windows, top: int, saturated: float, zero_ms: int | None) -> list[str]:
    out = []
    for start in sorted(win.by_start):
        conns = win.by_start[start]
        ranked = sorted(conns.values(), key=lambda b: b.served_ms, reverse=True)
        full = sum(1 for b in ranked if b.share(win.window_ms) >= saturated)
        label = f"{(start - zero_ms) / 1000:+8.1f}s" if zero_ms is not None else f"{start / 1000:.0f}"
        busiest = "  ".join(
            f"{exemplar_fields(b.line)[0] or '?'} {b.share(win.window_ms):.2f} "
            f"({b.completed} req, slowest {b.slowest_ms:.0f} ms)"
            for b in ranked[:top]
        )
        out.append(f"{label}  {len(conns):>3} conns  {full:>2} saturated  {busiest}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logs", nargs="+", type=Path, help="a broker's request log files, oldest first")
    ap.add_argument("--request", default="Produce", help="request type (linkwatch's names; default Produce)")
    ap.add_argument("--window-s", type=float, default=5.0)
    ap.add_argument("--zero", type=float, help="print windows in seconds from this moment (epoch seconds)")
    ap.add_argument("--top", type=int, default=4, help="busiest connections shown per window")
    ap.add_argument("--saturated", type=float, default=0.9, help="a connection's share counted as saturated")
    args = ap.parse_args(argv)
    if args.window_s <= 0 or not 0 < args.saturated <= 1 or args.top < 0:
        ap.error("--window-s must be > 0, --saturated in (0, 1], --top >= 0")
    for path in args.logs:
        if not path.is_file():
            print(f"no such file: {path}", file=sys.stderr)
            return 1
    window_ms = int(args.window_s * 1000)
    win = busy_windows(read_lines(args.logs), args.request, window_ms)
    zero_ms = int(args.zero * 1000) if args.zero is not None else None
    print(
        f"{args.request}: {len(win.by_start)} windows of {args.window_s:g} s; share of each window the "
        f"broker served a connection (saturated: >= {args.saturated:g}); {win.other_requests} other "
        f"requests, {sum(win.dropped.values())} lines skipped {dict(win.dropped) or ''}"
    )
    for line in report(win, args.top, args.saturated, zero_ms):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
