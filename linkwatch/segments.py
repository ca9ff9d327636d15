"""Map an offset to its place in a partition's log on this broker (Kafka's on-disk layout).

A partition directory ``<log.dir>/<topic>-<partition>/`` holds segments named by their base
offset in 20 digits: ``00000000000000368769.log`` with its sparse ``.index`` (8-byte entries:
4-byte offset relative to the base, 4-byte byte position in the ``.log``) and ``.timeindex``.

* :func:`find_segment` — binary search over the sorted base offsets: the segment holding an
  offset is the one with the greatest base ≤ offset.
* :func:`index_position` — binary search in the ``.index`` for the greatest indexed offset
  ≤ offset (the active segment's index is preallocated with zero entries; they are ignored).
* :func:`locate` — from there, walk record-batch headers in the ``.log`` (bounded) to the batch
  that holds the offset.

Everything reads files only; nothing here writes or holds a file open after returning.
"""

from __future__ import annotations

import bisect
import mmap
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

SEGMENT_NAME = re.compile(r"^(\d{20})\.log$")
INDEX_ENTRY = struct.Struct(">ii")  # relative offset, position
BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length (bytes after this field)
LAST_OFFSET_DELTA_AT = 23  # baseOffset 8, length 4, leaderEpoch 4, magic 1, crc 4, attributes 2
MAX_SCAN_BYTES = 64 * 1024 * 1024


class SegmentError(ValueError):
    """The offset cannot be placed: ``reason`` is a short label, the message says why."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class SegmentPosition:
    partition_dir: Path
    base_offset: int
    log_path: Path
    index_position: int  # where the .index lookup put us
    position: int  # start of the batch holding the offset
    batch_bytes: int
    batch_base_offset: int
    scanned_batches: int


def partition_dir(log_dirs: list[str] | list[Path], topic: str, partition: int) -> Path:
    for d in log_dirs:
        p = Path(d) / f"{topic}-{partition}"
        if p.is_dir():
            return p
    raise SegmentError("no_partition_dir", f"{topic}-{partition} is in none of {[str(d) for d in log_dirs]}")


def segment_base_offsets(pdir: Path) -> list[int]:
    bases = []
    for name in os.listdir(pdir):
        m = SEGMENT_NAME.match(name)
        if m:
            bases.append(int(m.group(1)))
    bases.sort()
    return bases


def find_segment(bases: list[int], offset: int) -> int:
    """Base offset of the segment holding ``offset`` (``bases`` sorted ascending)."""
    i = bisect.bisect_right(bases, offset) - 1
    if i < 0:
        first = bases[0] if bases else None
        raise SegmentError("before_log_start", f"offset {offset} is below the first segment {first}")
    return bases[i]


def segment_file(pdir: Path, base: int, suffix: str) -> Path:
    return pdir / f"{base:020d}{suffix}"


def index_position(index_path: Path, base: int, offset: int) -> int:
    """Byte position in the .log of the greatest indexed offset ≤ ``offset`` (0 if none)."""
    try:
        size = index_path.stat().st_size
    except FileNotFoundError:
        return 0
    n = size // INDEX_ENTRY.size
    if n == 0:
        return 0
    with open(index_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        valid = _valid_entries(m, n)
        target = offset - base
        lo, hi, pos = 0, valid - 1, 0
        while lo <= hi:
            mid = (lo + hi) // 2
            rel, p = INDEX_ENTRY.unpack_from(m, mid * INDEX_ENTRY.size)
            if rel <= target:
                pos, lo = p, mid + 1
            else:
                hi = mid - 1
        return pos


def _valid_entries(m: mmap.mmap, n: int) -> int:
    # Real entries have position > 0 (the first entry is written after index.interval.bytes);
    # the preallocated tail is zeros. Real entries come first, so binary search the boundary.
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        rel, pos = INDEX_ENTRY.unpack_from(m, mid * INDEX_ENTRY.size)
        if rel > 0 or pos > 0:
            lo = mid + 1
        else:
            hi = mid
    return lo


def locate(
    log_dirs: list[str] | list[Path], topic: str, partition: int, offset: int, scan: bool = True
) -> SegmentPosition:
    """Where ``offset`` sits. With ``scan=False`` only the ``.index`` is read (the position is
    then that of the nearest indexed batch at or before the offset, at most
    ``index.interval.bytes`` earlier) — use that when the ``.log`` must not be touched, e.g. to
    measure its page-cache residency without faulting pages in."""
    pdir = partition_dir(log_dirs, topic, partition)
    bases = segment_base_offsets(pdir)
    if not bases:
        raise SegmentError("no_segments", f"{pdir} holds no .log segment")
    base = find_segment(bases, offset)
    start = index_position(segment_file(pdir, base, ".index"), base, offset)
    log_path = segment_file(pdir, base, ".log")
    if not scan:
        return SegmentPosition(pdir, base, log_path, start, start, 0, -1, 0)
    with open(log_path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        pos, scanned = start, 0
        while pos + 27 <= size and pos - start <= MAX_SCAN_BYTES:
            f.seek(pos)
            head = f.read(27)
            batch_base, length = BATCH_HEADER.unpack_from(head)
            (last_delta,) = struct.unpack_from(">i", head, LAST_OFFSET_DELTA_AT)
            scanned += 1
            if batch_base + last_delta >= offset:
                return SegmentPosition(pdir, base, log_path, start, pos, 12 + length, batch_base, scanned)
            pos += 12 + length
    # The offset is past the last batch of its segment: it is the next one to be written.
    return SegmentPosition(pdir, base, log_path, start, min(pos, size), 0, offset, scanned)
