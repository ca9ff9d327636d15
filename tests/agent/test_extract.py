"""The fast extractor (:func:`agent.requestlog.lines.extract`) against the general parser.

Both committed captures (tests/agent/fixtures: ``kafka-request.log``, a broker of a 3-broker
cluster under produce and consume traffic; ``kafka-request-kraft.log``, a combined
broker+controller whose lines are mostly KRaft fetches) are read by the fast path line for line,
with exactly the timestamp, request type and stage times (values and JSON number types) that
:meth:`LineParser.parse` gives. A line the extractor is not sure of goes to the general path:
the table names the shapes that must, the Hypothesis tests mutate real lines (cut, bytes
replaced or inserted, keys swapped, numbers rewritten) and check that whatever the fast path
accepts is what the general parser reads, and that a whole ingest of such lines gives the
windows, sketches, exemplars and drop counts of the general path.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.health import Health
from agent.requestlog.bulk import ingest_python
from agent.requestlog.ingest import ingest_block, ingest_lines
from agent.requestlog.lines import extract
from agent.requestlog.parse import STAGE_KEYS, LineParser, stage_drop_reason
from agent.requestlog.typed import Tail, decode_tails
from agent.requestlog.window import ClosedWindow, WindowAggregator, row_of
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER
from tests.agent.test_ingest_fixture import reference, snapshot
from tests.agent.test_parse import MALFORMED

FIXTURES = Path(__file__).parent / "fixtures"
CAPTURES = {
    name: (FIXTURES / name).read_bytes().splitlines()
    for name in ("kafka-request.log", "kafka-request-kraft.log")
}
ALL_LINES = [line for lines in CAPTURES.values() for line in lines]
BOUNDED = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def fast(line: bytes) -> tuple[int, str, list[float], str] | None:
    """What the extractor reads from ``line`` alone, or None if it leaves it to the general path."""
    entries, rows, conns = extract(line + b"\n", LineParser())
    assert len(entries) == 1 and entries[0][2:] == (0, len(line))
    ts, request, _, _ = entries[0]
    if request is None:
        assert rows == []
        return None
    return None if rows[0] is None else (ts, request, rows[0], conns[0][1:-1].decode("ascii"))


def general(line: bytes) -> tuple[int, str, tuple[float, ...], str]:
    req = LineParser().parse(line)
    return req.ts_ms, req.request, row_of(req.stages), req.connection


def assert_same_or_general(line: bytes) -> bool:
    """The extractor agrees with the general parser on ``line`` or leaves it; True if it read it."""
    got = fast(line)
    if got is None:
        return False
    ts, request, row, connection = general(line)  # the general parser accepts what the fast path accepts
    assert (got[0], got[1], got[3]) == (ts, request, connection)
    assert got[2] == list(row)
    assert [type(v) for v in got[2]] == [type(v) for v in row]  # 0 stays an int, 0.0 a float
    return True


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_every_line_of_the_captures_takes_the_fast_path_with_the_general_result(name: str) -> None:
    lines = CAPTURES[name]
    assert all(assert_same_or_general(line) for line in lines)
    kinds = {general(line)[1] for line in lines}
    assert FETCH_FOLLOWER in kinds
    if name == "kafka-request.log":
        assert FETCH_CONSUMER in kinds


def test_a_whole_capture_in_one_block_takes_the_fast_path() -> None:
    """As the follower hands it over: one block, every line read by the fast path."""
    for lines in CAPTURES.values():
        parser = LineParser()
        entries, rows, conns = extract(b"".join(line + b"\n" for line in lines), parser)
        assert len(entries) == len(lines) == len(rows)
        assert None not in rows and all(request is not None for _, request, _, _ in entries)
        # A last line without its newline is read all the same.
        assert extract(b"\n".join(lines), LineParser()) == (entries, rows, conns)


REAL = CAPTURES["kafka-request.log"][5]
TAIL_AT = REAL.rindex(b',"connection":')
FETCHES = [line for line in ALL_LINES if b'"requestApiKeyName":"FETCH"' in line]
CONSUMER = next(line for line in FETCHES if b'"request":{"replicaId":-1,"maxWaitMs"' in line)
FOLLOWER = next(line for line in FETCHES if b'"request":{"replicaState":' in line)
KRAFT = next(line for line in FETCHES if b'"request":{"clusterId":"' in line)


def swap(line: bytes, a: bytes, b: bytes) -> bytes:
    return line.replace(a, b"\0").replace(b, a).replace(b"\0", b)


def with_total(line: bytes, value: bytes) -> bytes:
    i = line.rindex(b'"totalTimeMs":') + len(b'"totalTimeMs":')
    j = line.index(b",", i)
    return line[:i] + value + line[j:]


# (name, line, the fast path reads it). Every row is also checked against the general parser.
SHAPES = [
    ("real line", REAL, True),
    ("consumer fetch", CONSUMER, True),
    ("follower fetch", FOLLOWER, True),
    ("KRaft fetch (clusterId, replicaState)", KRAFT, True),
    ("stage keys in another order", swap(REAL, b'"localTimeMs"', b'"remoteTimeMs"'), False),
    ("a stage key missing", REAL.replace(b',"sendTimeMs":', b',"sendTimeMz":'), False),
    ("exponent", with_total(REAL, b"1e3"), False),
    ("negative", with_total(REAL, b"-1.5"), False),
    ("leading zero", with_total(REAL, b"01.5"), False),
    ("huge", with_total(REAL, b"999999999999"), False),
    ("string", with_total(REAL, b'"7"'), False),
    ("boolean", with_total(REAL, b"true"), False),
    ("connection with an escape", REAL.replace(b'"connection":"', b'"connection":"\\u0041'), False),
    ("connection with a quote", REAL.replace(b'"connection":"', b'"connection":"a"b'), False),
    (
        "connection null",
        REAL[:TAIL_AT] + b',"connection":null' + REAL[REAL.index(b',"totalTimeMs"') :],
        False,
    ),
    ("tail after the last brace", REAL[: REAL.rindex(b',"securityProtocol"') + 25], False),
    ("extra key in the tail", REAL.replace(b',"totalTimeMs":', b',"x":1,"totalTimeMs":'), False),
    ("a digit between a number and its key", REAL.replace(b',"sendTimeMs":', b',1"sendTimeMs":'), False),
    ("a digit inside a stage key", REAL.replace(b',"sendTimeMs":', b',"send1TimeMs":'), False),
    ("a dot before a key's colon", REAL.replace(b'"sendTimeMs":', b'"sendTimeMs".:'), False),
    ("unknown request type", REAL.replace(b'"requestApiKeyName":"', b'"requestApiKeyName":"X'), False),
    (
        "request object before the header ends",
        FOLLOWER.replace(b'"clientId":', b'"q":{},"request":{},"clientId":'),
        False,
    ),
    ("non-ASCII", REAL.replace(b'"connection":"', b'"connection":"\xc3\xa9'), False),
    ("zoned timestamp", REAL[:24] + b"Z" + REAL[24:], False),
    *[(f"malformed: {name}", raw, False) for name, raw, _ in MALFORMED],
]


@pytest.mark.parametrize(("name", "line", "read"), SHAPES, ids=[s[0] for s in SHAPES])
def test_shapes_the_fast_path_must_read_or_leave(name: str, line: bytes, read: bool) -> None:
    assert assert_same_or_general(line) is read


# Tokens that change a line's structure where it matters to the extractor.
TOKENS = [
    b'"',
    b"\\",
    b"}",
    b"{",
    b",",
    b"-",
    b"e5",
    b"0",
    b"\xff",
    b',"connection":"x"',
    b',"totalTimeMs":1',
    b',"securityProtocol":',
    b'},"request":{',
    b'"replicaState":',
    b'"replicaId":-1,',
    b'"maxWaitMs"',
    b'"requestApiKeyName":"FETCH"',
]


@st.composite
def mutated_line(draw: st.DrawFn) -> bytes:
    line = draw(st.sampled_from(ALL_LINES))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        kind = draw(st.sampled_from(["cut", "delete", "insert", "replace", "swap", "number"]))
        at = draw(st.integers(min_value=0, max_value=len(line)))
        if kind == "cut":
            line = line[:at]
        elif kind == "delete":
            line = line[:at] + line[at + draw(st.integers(min_value=1, max_value=40)) :]
        elif kind in ("insert", "replace"):
            token = draw(st.one_of(st.sampled_from(TOKENS), st.binary(min_size=1, max_size=4)))
            token = token.replace(b"\n", b" ")
            line = line[:at] + token + line[at + (len(token) if kind == "replace" else 0) :]
        elif kind == "swap":
            a, b = draw(st.lists(st.sampled_from(STAGE_KEYS), min_size=2, max_size=2, unique=True))
            line = swap(line, a.encode(), b.encode())
        elif b'"totalTimeMs":' in line and b"," in line[line.rindex(b'"totalTimeMs":') :]:
            number = draw(
                st.one_of(
                    st.floats(allow_nan=False, allow_infinity=False).map(lambda v: repr(v).encode()),
                    st.integers(min_value=-(10**12), max_value=10**12).map(lambda v: str(v).encode()),
                    st.sampled_from([b"1e400", b"-0", b"-0.0", b"1.", b".5", b"00", b"1E2", b"NaN"]),
                )
            )
            line = with_total(line, number)
    return line


@BOUNDED
@given(mutated_line())
def test_a_mutated_line_is_read_as_the_general_parser_reads_it_or_left(line: bytes) -> None:
    assert_same_or_general(line)


@BOUNDED
@given(st.lists(st.one_of(st.sampled_from(ALL_LINES), mutated_line()), min_size=1, max_size=30))
def test_ingest_of_real_and_mutated_lines_equals_the_general_path(lines: list[bytes]) -> None:
    options = {"window_s": 1, "grace_s": 0.5, "slow_threshold_ms": 20.0, "max_exemplars": 3}
    want_health, got_health = Health(), Health()
    # A clock past every stamp of the captures, so no line counts as ahead of it.
    clock = lambda: 4e9  # noqa: E731
    want = reference(lines, WindowAggregator(cluster="t", broker=2, clock=clock, **options), want_health)
    agg = WindowAggregator(cluster="t", broker=2, clock=clock, **options)
    got: list[ClosedWindow] = ingest_lines(lines, LineParser(), agg, got_health) + agg.close_all()
    assert snapshot(got) == snapshot(want)
    assert got_health.dropped == want_health.dropped
    assert got_health.lines_read == len(lines)


# -- the bulk path of ingest_block (bulk.ingest_python): whole blocks of usual lines in one window ----

# One window holds both captures (they are two days apart): every block can take the bulk path.
ONE_WINDOW = {"window_s": 10**6, "grace_s": 0.5, "slow_threshold_ms": 20.0, "max_exemplars": 3}


def bulk_and_general(lines: list[bytes], **options: float) -> tuple[list, list, Health, Health, bool]:
    """The windows of ``ingest_block`` over ``lines`` as one block and of the general path, and
    whether the bulk path took the block."""
    clock = lambda: 4e9  # noqa: E731
    want_health, got_health = Health(), Health()
    want = reference(lines, WindowAggregator(cluster="t", broker=2, clock=clock, **options), want_health)
    agg = WindowAggregator(cluster="t", broker=2, clock=clock, **options)
    block = b"".join(line + b"\n" for line in lines)
    closed = ingest_python(block, LineParser(), agg, got_health)
    took = closed is not None
    if closed is None:
        closed = ingest_block(block, LineParser(), agg, got_health)
    return snapshot(closed + agg.close_all()), snapshot(want), got_health, want_health, took


@pytest.mark.parametrize("name", sorted(CAPTURES))
@pytest.mark.parametrize("threshold", [20.0, 300.0, 1e6])
def test_a_whole_capture_takes_the_bulk_path_with_the_general_result(name: str, threshold: float) -> None:
    options = {**ONE_WINDOW, "slow_threshold_ms": threshold, "max_exemplars": 5}
    got, want, got_health, _, took = bulk_and_general(CAPTURES[name], **options)
    assert took
    assert got == want
    assert got_health.lines_read == len(CAPTURES[name]) and not got_health.dropped
    if threshold == 20.0:
        assert want[0][2]  # exemplars were kept, in the general path's order


def test_a_block_across_windows_or_with_late_lines_is_left_to_the_line_by_line_path() -> None:
    lines = CAPTURES["kafka-request.log"]
    options = {**ONE_WINDOW, "window_s": 1}  # the capture spans several 1 s windows
    got, want, _, _, took = bulk_and_general(lines, **options)
    assert not took and got == want


@pytest.mark.parametrize(("name", "line", "read"), SHAPES, ids=[s[0] for s in SHAPES])
def test_a_shape_among_real_lines_gives_the_general_result(name: str, line: bytes, read: bool) -> None:
    """Every shape of the table amid real lines: the block's windows, exemplars and drops are
    the general path's, and a block of usual lines only is taken in bulk."""
    real = CAPTURES["kafka-request.log"]
    lines = [*real[:40], line, *real[40:80]]
    got, want, got_health, want_health, took = bulk_and_general(lines, **ONE_WINDOW)
    assert got == want
    assert got_health.dropped == want_health.dropped
    if read:
        assert took


@BOUNDED
@given(st.lists(st.one_of(st.sampled_from(ALL_LINES), mutated_line()), min_size=1, max_size=30))
def test_bulk_ingest_of_real_and_mutated_lines_equals_the_general_path(lines: list[bytes]) -> None:
    got, want, got_health, want_health, _ = bulk_and_general(lines, **ONE_WINDOW)
    assert got == want
    assert got_health.dropped == want_health.dropped
    assert got_health.lines_read == len(lines)


# -- the typed tail decoder (agent.requestlog.typed.decode_tails) against the tail orjson reads --


def tail_of(line: bytes) -> bytes:
    """The tail as the bulk path slices it: ``connection":…`` up to ``,"securityProtocol":``."""
    c = line.rindex(b',"connection":')
    return line[c + 2 : line.index(b',"securityProtocol":', c)]


def orjson_row(tail: bytes) -> list[float] | None:
    """The stage row the general parser reads from this tail text, or None if it would not read
    it as usable stage times from the tail alone."""
    try:
        obj = orjson.loads(b'{"' + tail + b"}")
        stages = tuple(obj[key] for key in STAGE_KEYS)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None
    if stage_drop_reason(stages) is not None:
        return None
    return list(row_of(stages))


def typed_row(tail: Tail) -> list[float]:
    return [getattr(tail, name) for name in ("totalTimeMs", *(k for k in STAGE_KEYS if k != "totalTimeMs"))]


def test_every_tail_of_the_captures_decodes_as_the_general_parser_reads_it() -> None:
    tails = [tail_of(line) for line in ALL_LINES]
    rows = decode_tails(tails)
    assert rows is not None and len(rows) == len(ALL_LINES)
    for line, row in zip(ALL_LINES, rows, strict=True):
        want = list(general(line)[2])
        assert typed_row(row) == want
        assert [type(v) for v in typed_row(row)] == [type(v) for v in want]  # ints stay ints


REAL_TAIL = tail_of(REAL)


def with_value(tail: bytes, key: bytes, value: bytes) -> bytes:
    i = tail.index(key + b'":') + len(key) + 2
    j = tail.find(b",", i)
    return tail[:i] + value + (tail[j:] if j >= 0 else b"")


# (name, tails, decoded): a tail decoder that must leave the block to the general path (False)
# or read it (True, then as orjson reads the same text).
TAIL_SHAPES = [
    ("real tail", [REAL_TAIL], True),
    ("a repeated key: the last one, as orjson", [REAL_TAIL + b',"sendTimeMs":7'], True),
    ("an extra key", [REAL_TAIL.replace(b',"totalTimeMs"', b',"x":[1,2],"totalTimeMs"')], True),
    ("an escaped connection", [REAL_TAIL.replace(b'connection":"', b'connection":"\\u0041')], True),
    ("connection null", [with_value(REAL_TAIL, b"connection", b"null")], False),
    ("boolean stage", [with_value(REAL_TAIL, b"sendTimeMs", b"true")], False),
    ("negative stage", [with_value(REAL_TAIL, b"sendTimeMs", b"-1")], False),
    ("stage too large", [with_value(REAL_TAIL, b"sendTimeMs", b"999999999999")], False),
    ("string stage", [with_value(REAL_TAIL, b"sendTimeMs", b'"1"')], False),
    ("a stage missing", [REAL_TAIL.replace(b',"sendTimeMs":', b',"sendTimeMz":')], False),
    ("a brace in the tail", [REAL_TAIL.replace(b',"totalTimeMs"', b',"x":{},"totalTimeMs"')], False),
    ("bad JSON", [REAL_TAIL.replace(b'":', b'":,', 1)], False),
    # A string left open swallows the join: one valid object for two tails.
    ("a join swallowed", [REAL_TAIL + b',"y":"', b',"' + REAL_TAIL], False),
]


@pytest.mark.parametrize(("name", "tails", "decoded"), TAIL_SHAPES, ids=[s[0] for s in TAIL_SHAPES])
def test_tail_shapes_the_typed_decoder_must_read_or_leave(
    name: str, tails: list[bytes], decoded: bool
) -> None:
    rows = decode_tails(tails)
    assert (rows is not None) is decoded
    if rows is not None:
        for tail, row in zip(tails, rows, strict=True):
            assert typed_row(row) == orjson_row(tail)


TAIL_TOKENS = [b'"', b"\\", b"}", b"{", b"[", b"]", b",", b":", b"-", b"e5", b"0", b".", b"true", b" "]


@st.composite
def mutated_tail(draw: st.DrawFn) -> bytes:
    tail = tail_of(draw(st.sampled_from(ALL_LINES)))
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        at = draw(st.integers(min_value=0, max_value=len(tail)))
        token = draw(st.one_of(st.sampled_from(TAIL_TOKENS), st.binary(min_size=1, max_size=3)))
        tail = tail[:at] + token + tail[at + draw(st.integers(min_value=0, max_value=2)) :]
    return tail


@BOUNDED
@given(st.lists(mutated_tail(), min_size=1, max_size=8))
def test_mutated_tails_are_read_as_orjson_reads_them_or_left(tails: list[bytes]) -> None:
    rows = decode_tails(tails)
    if rows is None:
        return
    for tail, row in zip(tails, rows, strict=True):
        want = orjson_row(tail)
        assert want is not None  # the general parser reads it from the tail alone
        assert typed_row(row) == want
        assert [type(v) for v in typed_row(row)] == [type(v) for v in want]
