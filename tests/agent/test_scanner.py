"""The compiled block scanner (agent/requestlog/_scan.c via scanner.py) against the pure-Python path.

Per line: whatever the scanner reads (request type, stamp, stage times as doubles) is what
:meth:`LineParser.parse` reads; every other line is flagged for the general path. Per block: the
windows (every record field: sketches, histograms, exemplars, slow counts), drops and line
counts of :func:`ingest_block` are the same with the compiled scanner and without it, on every
line of both real captures, with the malformed lines of tests/agent/test_parse.py among them,
and on mutated lines (Hypothesis). Skipped only when no C compiler is installed to build it.
"""

from __future__ import annotations

import math
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.health import Health
from agent.requestlog import bulk, scanner, source
from agent.requestlog import ingest as ingest_module
from agent.requestlog.parse import Drop, LineParser
from agent.requestlog.window import ClosedWindow, WindowAggregator, row_of
from tests.agent.test_extract import ALL_LINES, BOUNDED, CAPTURES, SHAPES, mutated_line
from tests.agent.test_ingest_fixture import mixed, reference, snapshot
from tests.agent.test_parse import MALFORMED

if scanner.block_scan() is None:
    if shutil.which("cc") is None:
        pytest.skip(f"no C compiler to build the scanner ({scanner.STATUS})", allow_module_level=True)
    pytest.fail(f"the compiled scanner does not load: {scanner.STATUS}", pytrace=False)

CLOCK = lambda: 4e9  # noqa: E731  (past every stamp of the captures: no line is ahead of it)


def scanned(line: bytes) -> tuple[int, str, list[float]] | None:
    """What the scanner reads from ``line`` alone, or None if it flags it for the general path."""
    scan = scanner.block_scan()
    assert scan is not None
    parser = LineParser()
    n = scan.scan(line + b"\n", parser.max_line_bytes)
    assert n == 1 and (scan.starts[0], scan.ends[0]) == (0, len(line))
    kind = int(scan.kinds[0])
    if kind < 0:
        return None
    at = 0
    base = parser.ts.second_ms(line[at + 1 : at + 20])
    if base is None:
        return None  # the bulk path leaves an uncertain second to the general path
    return base + int(scan.millis[0]), scanner.KIND_REQUESTS[kind], scan.row(0)


def assert_same_or_flagged(line: bytes) -> bool:
    """The scanner agrees with the general parser on ``line`` or flags it; True if it read it."""
    got = scanned(line)
    if got is None:
        return False
    req = LineParser().parse(line)  # raises Drop if the scanner read a line the parser drops
    assert got == (req.ts_ms, req.request, [float(v) for v in row_of(req.stages)])
    return True


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_every_line_of_the_captures_is_read_as_the_general_parser_reads_it(name: str) -> None:
    assert all(assert_same_or_flagged(line) for line in CAPTURES[name])


@pytest.mark.parametrize(("name", "line", "read"), SHAPES, ids=[s[0] for s in SHAPES])
def test_shapes_are_read_as_the_general_parser_reads_them_or_flagged(
    name: str, line: bytes, read: bool
) -> None:
    got = assert_same_or_flagged(line)
    if read:
        assert got


NUMBERS = [
    (b"0", 0.0),
    (b"0.1", 0.1),
    (b"47.753", 47.753),
    (b"124999999.999", 124999999.999),
    (b"0.30000000000000004441", 0.30000000000000004),  # more than 15 digits: strtod
    (b"1.0000000000000002220446", 1.0000000000000002),
]


@pytest.mark.parametrize(("token", "value"), NUMBERS, ids=[n[0].decode() for n in NUMBERS])
def test_stage_numbers_are_the_doubles_json_gives(token: bytes, value: float) -> None:
    line = CAPTURES["kafka-request.log"][5]
    i = line.rindex(b'"totalTimeMs":') + len(b'"totalTimeMs":')
    got = scanned(line[:i] + token + line[line.index(b",", i) :])
    assert got is not None and got[2][0] == value and math.copysign(1, got[2][0]) == 1


@BOUNDED
@given(mutated_line())
def test_a_mutated_line_is_read_as_the_general_parser_reads_it_or_flagged(line: bytes) -> None:
    assert_same_or_flagged(line)


@BOUNDED
@given(st.binary(max_size=600), st.sampled_from(ALL_LINES), st.integers(min_value=0, max_value=2000))
def test_any_bytes_are_scanned_within_the_block(noise: bytes, real: bytes, cut: int) -> None:
    """Random bytes, and a real line cut anywhere (no newline at the end): every line is found
    between the block's bounds, and flagged unless the general parser reads it the same."""
    for block in (noise, real[:cut], noise + b"\n" + real[:cut]):
        scan = scanner.block_scan()
        assert scan is not None
        n = scan.scan(block, 1 << 20)
        lines = block.split(b"\n")
        if block.endswith(b"\n") or not block:
            lines.pop()
        assert n == len(lines)
        for k, line in enumerate(lines):
            assert block[scan.starts[k] : scan.ends[k]] == line
            if scan.kinds[k] >= 0:
                assert_same_or_flagged(line)


def test_a_block_of_more_lines_than_the_arrays_hold_is_read_whole() -> None:
    lines = ALL_LINES * 5
    scan = scanner.BlockScan(capacity=16)
    assert scan.scan(b"".join(line + b"\n" for line in lines), 1 << 20) == len(lines)
    assert scan.capacity >= len(lines) and min(scan.kinds[: len(lines)]) >= 0


# -- whole blocks: the compiled path against the pure-Python path ------------------------------


def ingest(
    lines: list[bytes], compiled: bool, monkeypatch: pytest.MonkeyPatch, block_lines: int, **options: float
) -> tuple[list, Health, list[ClosedWindow]]:
    """``lines`` through ``ingest_block`` ``block_lines`` lines at a time (as the follower hands
    blocks over), with or without the compiled scanner; the windows, health and raw windows."""
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(ingest_module, "block_scan", lambda: None)
        health, agg, parser = (
            Health(),
            WindowAggregator(cluster="t", broker=2, clock=CLOCK, **options),
            LineParser(),
        )
        closed: list[ClosedWindow] = []
        for i in range(0, len(lines), block_lines):
            block = b"".join(line + b"\n" for line in lines[i : i + block_lines])
            closed += ingest_module.ingest_block(block, parser, agg, health)
        closed += agg.close_all()
    return snapshot(closed), health, closed


def accumulators(closed: list[ClosedWindow]) -> list:
    return [
        {key: (acc.count, acc.units, acc.min, acc.max, dict(acc.codes)) for key, acc in w.values.items()}
        for w in closed
    ]


ONE_WINDOW = {"window_s": 10**6, "grace_s": 0.5}
# (name, lines, lines per block, aggregator options)
CASES = [
    *[
        (
            f"{name}, one block, threshold {t:g} ms",
            CAPTURES[name],
            10**6,
            {**ONE_WINDOW, "slow_threshold_ms": t},
        )
        for name in sorted(CAPTURES)
        for t in (0.0, 20.0, 300.0)
    ],
    *[
        (
            f"{name}, 37-line blocks, 1 s windows",
            CAPTURES[name],
            37,
            {"window_s": 1, "slow_threshold_ms": 5.0},
        )
        for name in sorted(CAPTURES)
    ],
    (
        "both captures with malformed, blank and late lines, 50-line blocks",
        mixed(ALL_LINES),
        50,
        {"window_s": 1, "grace_s": 0.5, "slow_threshold_ms": 5.0, "max_exemplars": 3},
    ),
    (
        "both captures with malformed lines, one window, 20-line blocks",
        mixed(ALL_LINES),
        20,
        {**ONE_WINDOW, "slow_threshold_ms": 20.0},
    ),
]


@pytest.mark.parametrize(("name", "lines", "block_lines", "options"), CASES, ids=[c[0] for c in CASES])
def test_the_compiled_path_gives_the_windows_of_the_python_path(
    name: str, lines: list[bytes], block_lines: int, options: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    got, got_health, got_closed = ingest(lines, True, monkeypatch, block_lines, **options)
    want, want_health, want_closed = ingest(lines, False, monkeypatch, block_lines, **options)
    assert got == want
    assert accumulators(got_closed) == accumulators(want_closed)
    assert got_health.dropped == want_health.dropped
    assert got_health.lines_read == want_health.lines_read == len(lines)
    assert got_health.slow_requests == want_health.slow_requests
    # And the general path line by line.
    general = reference(lines, WindowAggregator(cluster="t", broker=2, clock=CLOCK, **options), Health())
    assert got == snapshot(general)


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_a_whole_capture_takes_the_compiled_bulk_path(name: str) -> None:
    agg = WindowAggregator(cluster="t", broker=2, clock=CLOCK, **ONE_WINDOW)
    block = b"".join(line + b"\n" for line in CAPTURES[name])
    scan = scanner.block_scan()
    assert scan is not None
    assert bulk.ingest_compiled(block, LineParser(), agg, Health(), scan) == []


def test_rows_held_past_the_bound_are_folded_to_the_same_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    want, _, _ = ingest(ALL_LINES, True, monkeypatch, 10**6, **ONE_WINDOW)
    monkeypatch.setattr("agent.requestlog.window.BULK_ROWS", 7)
    got, _, _ = ingest(ALL_LINES, True, monkeypatch, 25, **ONE_WINDOW)
    assert got == want


@BOUNDED
@given(
    st.lists(st.one_of(st.sampled_from(ALL_LINES), mutated_line()), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=30),
)
def test_blocks_of_real_and_mutated_lines_give_the_windows_of_the_python_path(
    lines: list[bytes], block_lines: int
) -> None:
    options = {"window_s": 10**6, "grace_s": 0.5, "slow_threshold_ms": 20.0, "max_exemplars": 3}
    with pytest.MonkeyPatch.context() as monkeypatch:
        got, got_health, _ = ingest(lines, True, monkeypatch, block_lines, **options)
        want, want_health, _ = ingest(lines, False, monkeypatch, block_lines, **options)
    assert got == want
    assert got_health.dropped == want_health.dropped
    assert got_health.lines_read == want_health.lines_read == len(lines)


# -- without the library --------------------------------------------------------------------


def test_a_missing_or_broken_library_is_reported_not_raised(tmp_path: Path) -> None:
    lib, status = scanner.load(tmp_path / "_scan.so")
    assert lib is None and status.startswith("python (no ")
    (tmp_path / "_scan.so").write_bytes(b"not a shared object")
    lib, status = scanner.load(tmp_path / "_scan.so")
    assert lib is None and "does not load" in status


def test_the_source_says_which_path_reads_the_log(tmp_path: Path) -> None:
    health = Health()
    source.RequestLogSource(tmp_path / "kafka-request.log", WindowAggregator(cluster="t", broker=1), health)
    assert health.request_log_scanner == "compiled"


def test_the_malformed_lines_are_flagged_for_the_general_path() -> None:
    for _, raw, _ in MALFORMED:
        assert scanned(raw) is None
        with pytest.raises(Drop):
            LineParser().parse(raw)


def test_threads_scanning_at_once_each_read_their_own_blocks() -> None:
    """ctypes lets go of the GIL during the call: agents side by side in one process scan at
    once, each thread into its own arrays."""
    blocks = {name: b"".join(line + b"\n" for line in lines) for name, lines in CAPTURES.items()}
    want = {}
    for name, block in blocks.items():
        scan = scanner.BlockScan()
        n = scan.scan(block, 1 << 20)
        want[name] = (scan.kinds[:n].tolist(), scan.stages[: n * scanner.NSTAGES].tolist())

    def read(name: str) -> bool:
        scan = scanner.block_scan()
        assert scan is not None
        for _ in range(50):
            n = scan.scan(blocks[name], 1 << 20)
            if (scan.kinds[:n].tolist(), scan.stages[: n * scanner.NSTAGES].tolist()) != want[name]:
                return False
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(read, sorted(blocks) * 4))
