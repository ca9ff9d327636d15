"""The compiled block scanner (``_scan.c``, built by ``make build-ext`` into ``_scan.so``), loaded
with ctypes: one call per block reads every line's request type, stamp and stage times into
reused arrays (:class:`BlockScan`, the standard library's :mod:`array`: no numpy on a broker), no
Python object per line; a second call groups the block's stage rows by request type and finds
its slow lines (:meth:`BlockScan.group`), a third sums the time served per connection
(:meth:`BlockScan.busy`).

When the library is missing or does not load, :func:`block_scan` gives None and the agent runs the
pure-Python path (:func:`agent.requestlog.ingest.ingest_block` takes either); :data:`STATUS`
says which, and :func:`announce` logs it once per process.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from array import array
from dataclasses import dataclass
from pathlib import Path

from agent.requestlog.parse import MAX_STAGE_MS, REQUEST_TYPES
from linkwatch.records import FETCH_CONSUMER, FETCH_FOLLOWER, PRODUCE

log = logging.getLogger("linkwatch.agent")

LIBRARY = Path(__file__).with_name("_scan.so")
SOURCE = Path(__file__).with_name("_scan.c")
NSTAGES = 7
# The API names the scanner knows, the common ones first (it compares them in this order);
# index -> request type, FETCH's index a consumer Fetch, one more index a follower Fetch.
API_NAMES = ("FETCH", "PRODUCE", *sorted(set(REQUEST_TYPES) - {"FETCH", "PRODUCE"}))
FETCH_INDEX = 0
KIND_REQUESTS = (FETCH_CONSUMER, *(REQUEST_TYPES[name] for name in API_NAMES[1:]), FETCH_FOLLOWER)
FOLLOWER_INDEX = len(API_NAMES)
assert KIND_REQUESTS[1] == PRODUCE
assert len(KIND_REQUESTS) <= 256  # _scan.c's MAX_KINDS (lw_group refuses more)
_NAMES = b"".join(name.encode() + b"\0" for name in API_NAMES)
# As agent.requestlog.typed: values each below this sum within MAX_STAGE_MS.
_VALUE_LIMIT = MAX_STAGE_MS / 8


def load(library: Path = LIBRARY) -> tuple[ctypes.CDLL | None, str]:
    """The scanner library and "compiled", or None and "python (why)"; never raises."""
    if not library.exists():
        return None, f"python (no {library}: run make build-ext)"
    try:
        lib = ctypes.CDLL(str(library))
        fn = lib.lw_scan
        ready = lib.lw_init()
    except (OSError, AttributeError) as e:
        return None, f"python ({library} does not load: {e})"
    if not ready:
        return None, f"python ({library}: no C locale for strtod_l)"
    p = ctypes.c_void_p
    fn.argtypes = [ctypes.c_char_p, ctypes.c_long, ctypes.c_long, ctypes.c_char_p, ctypes.c_long]
    fn.argtypes += [ctypes.c_long, ctypes.c_double, ctypes.c_long, p, p, p, p, p, p, p]
    fn.restype = ctypes.c_long
    group = lib.lw_group
    group.argtypes = [p, p, p, p, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_double]
    group.argtypes += [p, p, p, p, p, p]
    group.restype = ctypes.c_long
    lib.lw_unique.argtypes = [p, ctypes.c_long, p, p, p, p, p, ctypes.c_long]
    lib.lw_unique.restype = None
    lib.lw_busy.argtypes = [
        p,
        p,
        p,
        ctypes.c_long,
        ctypes.c_long,
        ctypes.c_long,
        p,
        p,
        p,
        p,
        p,
        ctypes.c_long,
    ]
    lib.lw_busy.restype = ctypes.c_long
    return lib, "compiled"


_LIB, STATUS = load()
_announced = False


def announce() -> str:
    """:data:`STATUS`, logged the first time it is asked for in this process."""
    global _announced
    if not _announced:
        _announced = True
        if _LIB is None:
            log.warning("request log: the compiled block scanner is not in use, %s", STATUS)
        else:
            log.info("request log: compiled block scanner %s", LIBRARY)
    return STATUS


def _zeros(typecode: str, n: int) -> array:
    return array(typecode, bytes(n * array(typecode).itemsize))


def _address(a: array) -> int:
    return a.buffer_info()[0]


@dataclass(frozen=True)
class Grouped:
    """A scanned block accounted at once (:meth:`BlockScan.group`), valid until the next call.

    ``rows`` holds the block's stage rows (7 doubles each,
    :data:`~agent.requestlog.window.ROW_ORDER`) grouped by request type: ``spans[kind] = (first,
    end)`` rows of each kind present, in :data:`KIND_REQUESTS` order, each kind's rows in line
    order. ``slow`` the indexes of the lines
    whose slowness (total time, less the remote time for a Fetch) is at least the threshold, in
    line order, and ``slowness`` theirs; ``lo``/``hi`` a line with the earliest and one with the
    latest stamp (second, then millisecond)."""

    rows: memoryview
    spans: dict[int, tuple[int, int]]
    slow: list[int]
    slowness: list[float]
    lo: int
    hi: int


class BlockScan:
    """One thread's reused output arrays and the calls that fill them."""

    def __init__(self, capacity: int = 4096) -> None:
        self._grow(capacity)
        self.counts = _zeros("q", len(KIND_REQUESTS))
        self._ends = array("q", [0, 0])

    def _grow(self, capacity: int) -> None:
        self.capacity = capacity
        self.starts = _zeros("q", capacity)
        self.ends = _zeros("q", capacity)
        self.kinds = _zeros("i", capacity)
        self.secs = _zeros("q", capacity)
        self.millis = _zeros("q", capacity)
        self.stages = _zeros("d", capacity * NSTAGES)  # line k's row: [k * NSTAGES, (k + 1) * NSTAGES)
        self.grouped = _zeros("d", capacity * NSTAGES)
        self.slow = _zeros("q", capacity)
        self.slowness = _zeros("d", capacity)
        self.conns = _zeros("Q", capacity)  # the connection's hash (lw_scan's FNV-1a)
        # lw_scan's output arguments, in its order (starts, ends, kinds, secs, millis, stages, conns)
        arrays = (self.starts, self.ends, self.kinds, self.secs, self.millis, self.stages, self.conns)
        self._pointers = tuple(map(_address, arrays))

    def scan(self, block: bytes, max_line_bytes: int) -> int:
        """Scan ``block``; returns its number of lines, whose results are the first that many
        entries of the arrays (valid until the next call). ``kinds[k]`` is an index into
        :data:`KIND_REQUESTS`, or -1 for a line to read by the general path; line ``k``'s stage
        times are :meth:`row` ``(k)``."""
        assert _LIB is not None
        n = _LIB.lw_scan(
            block, len(block), max_line_bytes, _NAMES, len(API_NAMES), FETCH_INDEX, _VALUE_LIMIT,
            self.capacity, *self._pointers,
        )  # fmt: skip
        if n == -1:  # more lines than room: once more with room for all
            self._grow(block.count(b"\n") + 1)
            return self.scan(block, max_line_bytes)
        if n < 0:
            raise OSError(f"lw_scan failed ({n})")
        return n

    def row(self, k: int) -> list[float]:
        """Line ``k``'s stage times, as the log line writes them (totalTimeMs first)."""
        return self.stages[k * NSTAGES : (k + 1) * NSTAGES].tolist()

    def group(self, n: int, slow_threshold_ms: float) -> Grouped | None:
        """The first ``n`` scanned lines accounted in one C call (:class:`Grouped`); None if one of
        them is flagged for the general path (kind -1)."""
        assert _LIB is not None
        counts, ends = self.counts, self._ends
        kinds, secs, millis, stages = self._pointers[2:6]  # the arrays lw_scan filled
        m = _LIB.lw_group(
            kinds, secs, millis, stages, n,
            len(KIND_REQUESTS), FETCH_INDEX, FOLLOWER_INDEX, slow_threshold_ms, _address(counts),
            _address(self.grouped), _address(self.slow), _address(self.slowness), _address(ends),
            _address(ends) + ends.itemsize,
        )  # fmt: skip
        if m < 0:
            return None
        spans, at = {}, 0
        for kind, c in enumerate(counts):
            if c:
                spans[kind] = (at, at + c)
                at += c
        return Grouped(
            memoryview(self.grouped)[: n * NSTAGES],
            spans,
            self.slow[:m].tolist(),
            self.slowness[:m].tolist(),
            ends[0],
            ends[1],
        )

    def busy(self, n: int) -> list[tuple[int, int, int]]:
        """For the first ``n`` scanned lines (after :meth:`group` took them: every kind >= 0), per
        distinct (kind, connection) in the order first seen: ``(kind, first line, busy µs)``,
        the time the broker spent serving them (:func:`busy_us` of each line, summed). One C call
        (a hash table keyed by the connection's 64-bit hash and the kind: two connections whose
        hashes collide, about n² / 2⁶⁵ for n connections, are counted as one)."""
        assert _LIB is not None
        kinds, first, busy_us = _zeros("i", n), _zeros("q", n), _zeros("q", n)
        cap = 1 << max(4, (2 * n - 1).bit_length())  # the table's room: a power of two >= 2n
        keys, slots = _zeros("Q", cap), _zeros("q", cap)  # alive for the call
        d = _LIB.lw_busy(
            self._pointers[2], self._pointers[6], self._pointers[5], n, FETCH_INDEX, FOLLOWER_INDEX,
            _address(kinds), _address(first), _address(busy_us), _address(keys), _address(slots), cap,
        )  # fmt: skip
        return list(zip(kinds[:d].tolist(), first[:d].tolist(), busy_us[:d].tolist(), strict=True))


def busy_us(request: str, total_ms: float, remote_ms: float) -> int:
    """The time the broker spent serving one request, in whole microseconds (truncated): its
    total time, less its remote time for a fetch (a fetch waits in purgatory up to maxWaitMs by
    design: a consumer's long polls keep its connection busy and say nothing). What every path
    adds to the request's connection (``_scan.c``'s ``lw_busy`` truncates the same IEEE
    products), so a window's per-connection sums are exact and the same whichever path read each
    line."""
    if request in (FETCH_CONSUMER, FETCH_FOLLOWER):
        return int((total_ms - remote_ms) * 1000.0)
    return int(total_ms * 1000.0)


def count_rows(rows: array) -> list[tuple[list[float], list[int]]]:
    """Stage rows (doubles, :data:`NSTAGES` a row) counted per distinct value of each stage, in
    the rows' stage order: (values, counts) each, values in the order first seen. One C call (a
    hash table per stage)."""
    assert _LIB is not None
    n = len(rows) // NSTAGES
    values, counts = _zeros("d", n * NSTAGES), _zeros("q", n * NSTAGES)
    cap = 1 << max(4, (2 * n - 1).bit_length())  # the table's room: a power of two >= 2n
    distinct, keys, slots = _zeros("q", NSTAGES), _zeros("Q", cap), _zeros("q", cap)  # alive for the call
    _LIB.lw_unique(
        _address(rows), n, _address(values), _address(counts), _address(distinct), _address(keys),
        _address(slots), cap,
    )  # fmt: skip
    return [
        (values[j * n : j * n + d].tolist(), counts[j * n : j * n + d].tolist())
        for j, d in enumerate(distinct)
    ]


_local = threading.local()


def block_scan() -> BlockScan | None:
    """This thread's :class:`BlockScan`, or None when the compiled scanner is not loaded."""
    if _LIB is None:
        return None
    scan = getattr(_local, "scan", None)
    if scan is None:
        scan = _local.scan = BlockScan()
    return scan
