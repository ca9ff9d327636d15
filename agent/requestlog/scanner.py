"""The compiled block scanner (``_scan.c``, built by ``make build-ext`` into ``_scan.so``), loaded
with ctypes: one call per block reads every line's request type, stamp and stage times into
reused numpy arrays (:class:`BlockScan`), no Python object per line.

When the library is missing or does not load, :func:`block_scan` gives None and the agent runs the
pure-Python path (:func:`agent.requestlog.ingest.ingest_block` takes either); :data:`STATUS`
says which, and :func:`announce` logs it once per process.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from pathlib import Path

import numpy as np

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
    fn.argtypes += [ctypes.c_long, ctypes.c_double, ctypes.c_long, p, p, p, p, p, p]
    fn.restype = ctypes.c_long
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


class BlockScan:
    """One thread's reused output arrays and the call that fills them."""

    def __init__(self, capacity: int = 4096) -> None:
        self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        self.capacity = capacity
        self.starts = np.zeros(capacity, np.int64)
        self.ends = np.zeros(capacity, np.int64)
        self.kinds = np.zeros(capacity, np.int32)
        self.secs = np.zeros(capacity, np.int64)
        self.millis = np.zeros(capacity, np.int64)
        self.stages = np.zeros((capacity, NSTAGES), np.float64)
        arrays = (self.starts, self.ends, self.kinds, self.secs, self.millis, self.stages)
        self._pointers = tuple(a.ctypes.data for a in arrays)

    def scan(self, block: bytes, max_line_bytes: int) -> int:
        """Scan ``block``; returns its number of lines, whose results are the first that many
        entries of the arrays (valid until the next call). ``kinds[k]`` is an index into
        :data:`KIND_REQUESTS`, or -1 for a line to read by the general path."""
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


_local = threading.local()


def block_scan() -> BlockScan | None:
    """This thread's :class:`BlockScan`, or None when the compiled scanner is not loaded."""
    if _LIB is None:
        return None
    scan = getattr(_local, "scan", None)
    if scan is None:
        scan = _local.scan = BlockScan()
    return scan
