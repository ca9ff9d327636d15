"""Property-based tests of the request-log path (Hypothesis, bounded and derandomized).

* Parser + window aggregator: whatever a line's bytes after the timestamp, it is either counted
  in a window or dropped with a reason, the inline path agrees with the general parser line by
  line, the valid lines around it are all counted, and open windows stay bounded.
* Timestamps: local times read in order across a daylight-saving fall-back come back exact.
* Follower: any interleaving of appends, renames, copy-truncates, re-creations and polls reads
  every complete line once, in order.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.health import Health
from agent.requestlog.follow import FileFollower
from agent.requestlog.ingest import ingest_lines
from agent.requestlog.parse import Drop, LineParser, TimestampParser
from agent.requestlog.window import MAX_OPEN_WINDOWS, WindowAggregator
from tests.agent.test_requestlog_faults import counted, request_line

BOUNDED = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
T0 = 1_800_000_000_000  # the fake clock's start; lines are stamped at the clock, as when live
UTC_PARSER_ZONE = ZoneInfo("UTC")

stage_values = st.one_of(
    st.floats(min_value=0, max_value=1e6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.booleans(),
    st.sampled_from(["1.0", None, [], {}]),
).map(lambda v: repr(v).lower().replace("none", "null").replace("'", '"').encode())


@st.composite
def mutated(draw: st.DrawFn, line: bytes) -> bytes:
    """``line`` with its body changed: bytes cut, replaced or inserted, or a stage value set."""
    kind = draw(st.sampled_from(["cut", "replace", "insert", "stage"]))
    body = 26  # after "[yyyy-MM-dd HH:mm:ss,SSS] ": the stamp stays valid, the body does not
    if kind == "stage":
        return request_line(line[1:24], total=draw(stage_values), local=draw(stage_values))
    at = draw(st.integers(min_value=body, max_value=len(line)))
    if kind == "cut":
        return line[:at]
    raw = draw(st.binary(min_size=1, max_size=8).filter(lambda b: b"\n" not in b))
    return line[:at] + raw + line[at + (len(raw) if kind == "replace" else 0) :]


@st.composite
def request_log(draw: st.DrawFn) -> list[tuple[int, bytes, bool]]:
    """(clock ms, line, valid) in log order: one line every 0-3 s, some of them mutated."""
    out, ts = [], T0
    for n in range(draw(st.integers(min_value=1, max_value=40))):
        ts += draw(st.integers(min_value=0, max_value=3000))
        line = request_line(_stamp(ts), n=n)
        if draw(st.booleans()):
            out.append((ts, draw(mutated(line)), False))
        else:
            out.append((ts, line, True))
    return out


def _stamp(ms: int) -> bytes:
    dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return dt.strftime("%Y-%m-%d %H:%M:%S").encode() + b",%03d" % (ms % 1000)


@BOUNDED
@given(request_log(), st.integers(min_value=1, max_value=5))
def test_every_line_is_counted_or_dropped_and_valid_lines_are_never_lost(
    log: list[tuple[int, bytes, bool]], batch: int
) -> None:
    clock = [T0 / 1000]
    health = Health()
    agg = WindowAggregator(cluster="t", broker=1, window_s=2, grace_s=1, clock=lambda: clock[0])
    parser = LineParser(zone=UTC_PARSER_ZONE)
    closed = []
    for i in range(0, len(log), batch):
        part = log[i : i + batch]
        clock[0] = part[-1][0] / 1000  # read as soon as written
        closed += ingest_lines([line for _, line, _ in part], parser, agg, health)
        assert agg.open_windows <= MAX_OPEN_WINDOWS + 1
    closed += agg.close_all()
    # What the general parser says of each line alone.
    want_dropped: Counter[str] = Counter()
    accepted = 0
    for _, line, _ in log:
        try:
            LineParser(zone=UTC_PARSER_ZONE).parse(line)
            accepted += 1
        except Drop as d:
            if line.strip():
                want_dropped[d.reason] += 1
    assert health.dropped == want_dropped
    assert counted(closed) == accepted  # every valid line, and every accepted mutated one
    assert accepted >= sum(valid for _, _, valid in log)
    assert health.lines_read == len(log)


FALL_BACK = datetime(2026, 10, 25, 1, 0, tzinfo=UTC)  # 03:00 CEST -> 02:00 CET in Berlin


@BOUNDED
@given(
    st.integers(min_value=-3 * 3600_000, max_value=-1),
    st.lists(st.integers(min_value=0, max_value=20 * 60_000), min_size=1, max_size=60),
)
def test_local_stamps_in_order_across_a_fall_back_read_back_exact(start: int, gaps: list[int]) -> None:
    """Read in order, at most 20 minutes apart, from before the repeated hour (a first stamp
    inside it, with nothing before, is read as the occurrence nearer the wall clock)."""
    zone = ZoneInfo("Europe/Berlin")
    parser = TimestampParser(zone)
    assert parser(b"2026-10-24 23:00:00,000") == int(
        datetime(2026, 10, 24, 21, tzinfo=UTC).timestamp() * 1000
    )
    ms = int(FALL_BACK.timestamp() * 1000) + start
    for gap in [0, *gaps]:
        ms += gap
        local = datetime.fromtimestamp(ms / 1000, tz=zone)
        text = local.strftime("%Y-%m-%d %H:%M:%S").encode() + b",%03d" % (ms % 1000)
        assert parser(text) == ms, (local, local.fold)


@BOUNDED
@given(
    st.integers(min_value=0, max_value=2_000_000_000_000), st.sampled_from(["Z", "+05:30", "-0800", "+01"])
)
def test_stamps_with_an_offset_are_exact(ms: int, offset: str) -> None:
    sign = -1 if offset[0] == "-" else 1
    digits = offset[1:].replace(":", "")
    delta = (
        timedelta(hours=int(digits[:2]), minutes=int(digits[2:] or 0)) * sign
        if offset != "Z"
        else timedelta()
    )
    local = datetime.fromtimestamp(ms / 1000, tz=UTC) + delta
    text = local.strftime("%Y-%m-%d %H:%M:%S").encode() + b",%03d" % (ms % 1000) + offset.encode()
    assert TimestampParser()(text) == ms


# -- the follower --------------------------------------------------------------------------
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=4)),
        st.tuples(st.sampled_from(["rename", "copytruncate", "recreate", "poll"]), st.just(0)),
    ),
    max_size=25,
)


class Writer:
    """A log writer on real files: appends numbered lines and rotates the ways loggers do.

    ``expected`` is every line written except those of a file deleted before any poll could
    have opened it (``recreate`` right after a rotation): no follower can read those."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = 0
        self.expected: list[bytes] = []
        self._current: list[bytes] = []  # lines of the current file
        self.polled = True  # a poll happened since the current file was created
        path.write_bytes(b"")

    def append(self, k: int) -> None:
        lines = [b"line-%05d-%s" % (self.n + i, b"x" * ((self.n + i) % 7)) for i in range(k)]
        self.n += k
        self.expected += lines
        self._current += lines
        with open(self.path, "ab") as f:
            f.write(b"".join(x + b"\n" for x in lines))

    def _shift(self) -> Path:
        """Make room for ``<name>.1`` as log4j2's %i rollover does (.1 -> .2, ...)."""
        rotated = sorted(self.path.parent.glob(self.path.name + ".*"), key=lambda p: -int(p.suffix[1:]))
        for p in rotated:
            p.rename(p.with_suffix(f".{int(p.suffix[1:]) + 1}"))
        return self.path.with_name(self.path.name + ".1")

    def _new_file(self) -> None:
        self.path.write_bytes(b"")
        self._current, self.polled = [], False

    def rename(self) -> None:
        self.path.rename(self._shift())
        self._new_file()

    def copytruncate(self) -> None:
        shutil.copyfile(self.path, self._shift())
        os.truncate(self.path, 0)
        self._current = []

    def recreate(self) -> None:
        self.path.unlink()
        if not self.polled:  # never opened, now gone: lost whatever follows it
            lost = set(self._current)
            self.expected = [x for x in self.expected if x not in lost]
        self._new_file()


@settings(max_examples=200, deadline=None, derandomize=True)
@given(ops)
def test_any_interleaving_of_writes_and_rotations_loses_no_line(steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        writer = Writer(Path(d) / "kafka-request.log")
        skips: list[str] = []
        follower = FileFollower(writer.path, on_skip=lambda reason, detail: skips.append(reason))
        read: list[bytes] = []
        for op, k in steps:
            if op == "poll":
                read += follower.read_lines()
                writer.polled = True
            elif op == "append":
                writer.append(k)
            else:
                getattr(writer, op)()
        read += follower.read_lines()
        read += follower.read_lines()
        follower.close()
        assert sorted(read) == sorted(writer.expected) and len(set(read)) == len(read)  # once each
        ops_used = {op for op, _ in steps}
        if not {"recreate", "copytruncate"} <= ops_used:
            # In order too. (A file deleted while held, beside copies never read, has no age to
            # sort it by: it is read first. Loggers copy-truncate or delete, not both.)
            assert read == writer.expected
        assert skips == []


restart_ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(min_value=1, max_value=4)),
        st.tuples(st.sampled_from(["rename", "copytruncate", "poll", "stop"]), st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(restart_ops)
def test_stops_and_restarts_from_the_position_file_lose_no_line(steps: list[tuple[str, int]]) -> None:
    """As above, with the agent stopped (position saved) while the log is written and rotated;
    the next poll starts a new follower from the position file. (Deleting the log while the
    agent is stopped loses what was not read: not generated.)"""
    with tempfile.TemporaryDirectory() as d:
        writer = Writer(Path(d) / "kafka-request.log")
        skips: list[str] = []
        pos = Path(d) / "position.json"

        def start() -> FileFollower:
            return FileFollower(
                writer.path, position_file=pos, on_skip=lambda reason, detail: skips.append(reason)
            )

        follower: FileFollower | None = start()
        follower.save_position()
        read: list[bytes] = []
        for op, k in [*steps, ("poll", 0), ("poll", 0)]:
            if op == "poll":
                follower = follower or start()
                read += follower.read_lines()
                follower.save_position()
                writer.polled = True
            elif op == "stop" and follower is not None:
                follower.close()
                follower = None
            elif op == "append":
                writer.append(k)
            elif op != "stop":
                getattr(writer, op)()
        assert follower is not None
        follower.close()
        assert read == writer.expected
        assert skips == []
