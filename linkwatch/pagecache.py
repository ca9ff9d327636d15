"""Is this part of a file in the page cache? ``mincore(2)`` on a private mapping, via ctypes.

Python's ``mmap`` has no ``mincore``, so :func:`residency` maps the byte range with libc
``mmap`` (read-only, shared), asks ``mincore`` which pages are resident, and unmaps. Mapping
does not fault pages in, so the check does not change what it measures.

:func:`check_cold_read` is the broker-side confirmation for the lag collector's cold-read risk:
locate the group's committed offset in its segment (:mod:`linkwatch.segments`, segment by binary
search over base offsets, position by the ``.index`` lookup, the ``.log`` itself is not read)
and report how much of the ``span_bytes`` the group reads next is resident, leaving out the
first ``skip_bytes`` (the collector's own read of the record at the offset may have loaded
them). *Confirmed* means fewer than
``resident_ratio_below`` of those pages are in memory: the group's next fetches go to disk.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

from linkwatch.segments import SegmentError, locate, segment_base_offsets, segment_file

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass(frozen=True)
class Residency:
    resident_pages: int
    total_pages: int

    @property
    def ratio(self) -> float:
        return self.resident_pages / self.total_pages if self.total_pages else 1.0


def residency(path: Path | str, start: int = 0, length: int | None = None) -> Residency:
    """Resident pages of ``path`` in ``[start, start + length)`` (clipped to the file)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        end = size if length is None else min(size, start + length)
        if end <= start:
            return Residency(0, 0)
        aligned = start - start % PAGE
        span = end - aligned
        addr = _libc.mmap(None, span, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), aligned)
        if addr in (None, MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap {path}: {os.strerror(err)}")
        try:
            pages = (span + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, span, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore {path}: {os.strerror(err)}")
            return Residency(sum(b & 1 for b in vec), pages)
        finally:
            _libc.munmap(addr, span)


@dataclass(frozen=True)
class ColdReadCheck:
    topic: str
    partition: int
    offset: int
    segment: str | None
    position: int | None
    resident_pages: int
    total_pages: int
    confirmed: bool | None  # None: could not check (reason says why)
    reason: str


def log_ranges(
    pdir: Path, bases: list[int], base: int, start: int, length: int
) -> list[tuple[Path, int, int]]:
    """``length`` bytes of the log from (segment ``base``, byte ``start``), continuing into the
    following segments: [(file, start, length), ...]."""
    out = []
    for b in bases[bases.index(base) :]:
        if length <= 0:
            break
        path = segment_file(pdir, b, ".log")
        size = path.stat().st_size
        if start < size:
            n = min(size - start, length)
            out.append((path, start, n))
            length -= n
            start = 0
        else:
            start -= size
    return out


def check_cold_read(
    log_dirs: list[str] | list[Path],
    topic: str,
    partition: int,
    offset: int,
    span_bytes: int = 1024 * 1024,
    resident_ratio_below: float = 0.5,
    skip_bytes: int = 256 * 1024,
) -> ColdReadCheck:
    """Residency of the ``span_bytes`` the group will read after the first ``skip_bytes`` from
    its committed offset. The skipped part is what reading the record at the offset (for lag in
    seconds: one fetch plus kernel readahead) may itself have loaded, so it proves nothing."""
    try:
        # Index only: reading the .log here would load the very pages we are about to measure.
        pos = locate(log_dirs, topic, partition, offset, scan=False)
        bases = segment_base_offsets(pos.partition_dir)
        ranges = log_ranges(pos.partition_dir, bases, pos.base_offset, pos.position + skip_bytes, span_bytes)
        parts = [residency(path, start, n) for path, start, n in ranges]
    except (SegmentError, OSError) as e:
        return ColdReadCheck(topic, partition, offset, None, None, 0, 0, None, str(e))
    r = Residency(sum(p.resident_pages for p in parts), sum(p.total_pages for p in parts))
    where = f"{r.resident_pages}/{r.total_pages} pages from byte {pos.position} + {skip_bytes} of {pos.log_path.name} in {pos.partition_dir.name}"
    if r.total_pages == 0:
        return ColdReadCheck(
            topic,
            partition,
            offset,
            pos.log_path.name,
            pos.position,
            0,
            0,
            None,
            f"cannot judge: less than {skip_bytes} bytes written after the offset",
        )
    cold = r.ratio < resident_ratio_below
    words = "confirmed: mostly not in the page cache" if cold else "not confirmed: resident in the page cache"
    return ColdReadCheck(
        topic,
        partition,
        offset,
        pos.log_path.name,
        pos.position,
        r.resident_pages,
        r.total_pages,
        cold,
        f"{words} ({where})",
    )
