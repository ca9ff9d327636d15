"""A bounded on-disk FIFO of (key, value) records: append-only segment files, read in order.

Layout of ``<dir>``: ``<20-digit sequence>.seg`` segment files and ``cursor.json`` (the segment
and byte offset of the first record not yet acknowledged). An entry is
``>I length, >I crc32, >H key length, key, value``; a torn or corrupt tail (crash mid-write) is
detected by the CRC and skipped from there on.

Contract:

* :meth:`Spool.append` accepts a record or raises nothing: past ``max_bytes`` the *oldest*
  segment is deleted and its records counted in ``dropped_oldest``; a write error (disk full)
  counts the record in ``dropped_write_error``. Everything accepted and not dropped that way is
  returned by :meth:`peek` in append order until :meth:`ack`-ed, across restarts.
* :meth:`peek` / :meth:`ack` are for one reader; all methods are thread-safe.
"""

from __future__ import annotations

import contextlib
import json
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

_HEAD = struct.Struct(">II")
_KEYLEN = struct.Struct(">H")
CURSOR = "cursor.json"


@dataclass
class _Segment:
    seq: int
    path: Path
    size: int
    records: int


class Spool:
    def __init__(
        self, directory: Path | str, max_bytes: int = 256 << 20, segment_bytes: int = 4 << 20
    ) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self.segment_bytes = segment_bytes
        self.dropped_oldest = 0
        self.dropped_write_error = 0
        self._lock = threading.Lock()
        self._segments: list[_Segment] = []
        self._cursor_seq = 0
        self._cursor_off = 0
        self._cursor_index = 0  # records before the cursor in the cursor's segment
        self._writer = None
        self._load()

    # -- public -----------------------------------------------------------------------------
    def append(self, key: bytes, value: bytes) -> bool:
        """Add one record; False if it could not be written (counted in dropped_write_error)."""
        entry_body = _KEYLEN.pack(len(key)) + key + value
        entry = _HEAD.pack(len(entry_body), zlib.crc32(entry_body)) + entry_body
        with self._lock:
            try:
                seg = self._writable(len(entry))
                assert self._writer is not None
                self._writer.write(entry)
                self._writer.flush()
            except OSError:
                self.dropped_write_error += 1
                self._close_writer()
                return False
            seg.size += len(entry)
            seg.records += 1
            self._enforce_bound()
            return True

    def peek(self, max_records: int) -> list[tuple[bytes, bytes]]:
        """Up to ``max_records`` unacknowledged records from the oldest, in order."""
        with self._lock:
            out: list[tuple[bytes, bytes]] = []
            for i, seg in enumerate(self._segments):
                offset = self._cursor_off if i == 0 else 0
                for key, value, _end in _read_entries(seg.path, offset, max_records - len(out)):
                    out.append((key, value))
                if len(out) >= max_records:
                    break
            return out

    def ack(self, n: int) -> None:
        """Acknowledge the first ``n`` records returned by :meth:`peek`."""
        # Invariant: the cursor is in the first segment.
        with self._lock:
            while n > 0 and self._segments:
                seg = self._segments[0]
                take = min(n, seg.records - self._cursor_index)
                if take > 0:
                    entries = list(_read_entries(seg.path, self._cursor_off, take))
                    if not entries:
                        break
                    self._cursor_off = entries[-1][2]
                    self._cursor_index += len(entries)
                    n -= len(entries)
                if self._cursor_index >= seg.records and seg is not self._current():
                    self._remove(seg)
                    self._cursor_seq, self._cursor_off, self._cursor_index = self._segments[0].seq, 0, 0
                elif take <= 0:
                    break
            self._save_cursor()

    def __len__(self) -> int:
        with self._lock:
            return sum(s.records for s in self._segments) - self._cursor_index

    @property
    def size_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

    def close(self) -> None:
        with self._lock:
            self._close_writer()
            self._save_cursor()

    # -- internals --------------------------------------------------------------------------
    def _current(self) -> _Segment | None:
        return self._segments[-1] if self._segments else None

    def _writable(self, entry_len: int) -> _Segment:
        seg = self._current()
        if (
            seg is not None
            and self._writer is not None
            and (seg.size == 0 or seg.size + entry_len <= self.segment_bytes)
        ):
            return seg
        # A new segment: none yet, the current one is full, or no writer (restart, write error).
        seq = seg.seq + 1 if seg else max(1, self._cursor_seq)
        new = _Segment(seq, self.dir / f"{seq:020d}.seg", 0, 0)
        self._close_writer()
        self._writer = open(new.path, "ab")  # noqa: SIM115 - kept open for appends
        self._segments.append(new)
        if len(self._segments) == 1:
            self._cursor_seq, self._cursor_off, self._cursor_index = seq, 0, 0
        return new

    def _enforce_bound(self) -> None:
        while sum(s.size for s in self._segments) > self.max_bytes and len(self._segments) > 1:
            oldest = self._segments[0]
            self.dropped_oldest += oldest.records - self._cursor_index
            self._remove(oldest)
            self._cursor_seq, self._cursor_off, self._cursor_index = self._segments[0].seq, 0, 0
            self._save_cursor()

    def _remove(self, seg: _Segment) -> None:
        self._segments.remove(seg)
        with contextlib.suppress(OSError):
            seg.path.unlink()

    def _close_writer(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(OSError):
                self._writer.close()
            self._writer = None

    def _save_cursor(self) -> None:
        tmp = self.dir / (CURSOR + ".tmp")
        with contextlib.suppress(OSError):
            tmp.write_text(json.dumps({"seq": self._cursor_seq, "offset": self._cursor_off}))
            tmp.replace(self.dir / CURSOR)

    def _load(self) -> None:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            raw = json.loads((self.dir / CURSOR).read_text())
            self._cursor_seq, self._cursor_off = int(raw["seq"]), int(raw["offset"])
        for path in sorted(self.dir.glob("*.seg")):
            try:
                seq = int(path.stem)
            except ValueError:
                continue
            if seq < self._cursor_seq:
                with contextlib.suppress(OSError):
                    path.unlink()
                continue
            entries = list(_read_entries(path, 0, 1 << 62))
            end = entries[-1][2] if entries else 0
            if seq == self._cursor_seq:
                self._cursor_index = sum(1 for e in entries if e[2] <= self._cursor_off)
            self._segments.append(_Segment(seq, path, end, len(entries)))
            if end != path.stat().st_size:
                with open(path, "r+b") as f:  # cut a torn tail so appends continue cleanly
                    f.truncate(end)
        if self._segments and self._cursor_seq < self._segments[0].seq:
            self._cursor_seq, self._cursor_off, self._cursor_index = self._segments[0].seq, 0, 0


def _read_entries(path: Path, offset: int, limit: int):
    """Yield (key, value, end_offset) from ``offset``; stops at the end or a corrupt entry."""
    if limit <= 0:
        return
    try:
        f = open(path, "rb")  # noqa: SIM115
    except OSError:
        return
    with f:
        f.seek(offset)
        pos, n = offset, 0
        while n < limit:
            head = f.read(_HEAD.size)
            if len(head) < _HEAD.size:
                return
            length, crc = _HEAD.unpack(head)
            body = f.read(length)
            if len(body) < length or zlib.crc32(body) != crc:
                return
            (klen,) = _KEYLEN.unpack_from(body)
            pos += _HEAD.size + length
            n += 1
            yield body[2 : 2 + klen], body[2 + klen :], pos
