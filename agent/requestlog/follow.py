"""Follow a log file like ``tail -F``: across rotation, truncation and re-creation.

* **Rotation** (log4j2 renames ``kafka-request.log`` to ``.1`` and opens a new file): the open
  file is read to its end first, then the new file is opened and read from its start.
* **Truncation** (size below the read position, same inode): read again from the start.
* **Disappearance** (broker stopped, directory cleaned): the source is reported down, the open
  file is drained, and the path is retried on every poll; a file that appears later is read
  from its start.
* **Position file**: ``(inode, offset)`` saved atomically after each poll batch; on start the
  follower resumes there if the inode is the current file's, or drains a rotated sibling
  (``<name>.N``) with that inode before the current file. Without a saved position it starts at
  the end (default) or the beginning.

Lines longer than ``max_line_bytes`` are cut off and skipped up to their newline (the caller sees
a ``too_long`` notice through ``on_skip``), so a missing newline can never grow memory.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

READ_BYTES = 1 << 20


@dataclass(frozen=True)
class Position:
    inode: int
    offset: int


class FileFollower:
    def __init__(
        self,
        path: Path | str,
        *,
        position_file: Path | str | None = None,
        start_at_end: bool = True,
        max_line_bytes: int = 1 << 20,
        on_skip: Callable[[str, str], None] | None = None,
    ) -> None:
        self.path = Path(path)
        self.position_file = Path(position_file) if position_file else None
        self.start_at_end = start_at_end
        self.max_line_bytes = max_line_bytes
        self.on_skip = on_skip or (lambda reason, detail: None)
        self._fh: os.FileIO | None = None
        self._inode = -1
        self._offset = 0
        self._partial = b""
        self._skipping = False  # inside an over-long line, discarding to its newline
        self._pending_files: list[Path] = []  # rotated files to drain before the current one
        self.rotations = 0
        self.truncations = 0
        self.up = False
        self._first_open = True
        self._open_next()  # "start at the end" means the end as of now

    # -- public -----------------------------------------------------------------------------
    def read_lines(self, max_bytes: int = 8 * READ_BYTES) -> list[bytes]:
        """Complete lines available now (without newlines), at most about ``max_bytes`` of them."""
        if self._fh is None and not self._open_next():
            return []
        lines: list[bytes] = []
        budget = max_bytes
        while budget > 0:
            chunk = self._fh.read(READ_BYTES) if self._fh is not None else b""
            if chunk:
                self._offset += len(chunk)
                budget -= len(chunk)
                self._split(chunk, lines)
                continue
            if not self._at_eof_switch():
                break
        return lines

    @property
    def behind_bytes(self) -> int:
        """Bytes of the followed file not read yet (0 when the file is gone)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return 0
        if st.st_ino != self._inode:
            return st.st_size
        return max(0, st.st_size - self._offset)

    def position(self) -> Position:
        return Position(self._inode, self._offset - len(self._partial))

    def save_position(self) -> None:
        if self.position_file is None or self._inode < 0:
            return
        pos = self.position()
        tmp = self.position_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"inode": pos.inode, "offset": pos.offset, "path": str(self.path)}))
        tmp.replace(self.position_file)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # -- internals --------------------------------------------------------------------------
    def _split(self, chunk: bytes, out: list[bytes]) -> None:
        # Split the chunk first and glue the partial line onto its first piece only: joining
        # it to the whole chunk would copy every byte read once more.
        parts = chunk.split(b"\n")
        if self._partial:
            parts[0] = self._partial + parts[0]
        self._partial = parts.pop()
        if self._skipping:
            if not parts:
                self._partial = b""
                return
            parts.pop(0)  # the rest of the over-long line
            self._skipping = False
        out.extend(parts)
        if len(self._partial) > self.max_line_bytes:
            self.on_skip("too_long", f"line over {self.max_line_bytes} bytes in {self.path}")
            self._partial = b""
            self._skipping = True

    def _at_eof_switch(self) -> bool:
        """At EOF of the open file: switch to the next file if there is one. True if switched."""
        if self._pending_files:
            return self._open_next()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.up = False
            return False
        if st.st_ino != self._inode:
            self.rotations += 1
            self._reset_line()
            return self._open_next()
        if st.st_size < self._offset:
            self.truncations += 1
            self.on_skip("truncated_file", f"{self.path} shrank to {st.st_size} < {self._offset}")
            assert self._fh is not None
            self._fh.seek(0)
            self._offset = 0
            self._reset_line()
            return True
        return False

    def _reset_line(self) -> None:
        if self._partial:
            self.on_skip("truncated", f"unterminated last line in {self.path}")
        self._partial = b""
        self._skipping = False

    def _open_next(self) -> bool:
        self.close()
        if self._first_open:
            self._first_open = False
            return self._open_first()
        if self._pending_files:
            return self._open(self._pending_files.pop(0), 0)
        return self._open(self.path, 0)

    def _open(self, path: Path, offset: int) -> bool:
        try:
            fh = open(path, "rb", buffering=0)  # noqa: SIM115 - kept open across polls
        except FileNotFoundError:
            if path == self.path:
                self.up = False
            return False
        st = os.fstat(fh.fileno())
        if path == self.path:
            self.up = True
        offset = min(offset, st.st_size)
        fh.seek(offset)
        self._fh, self._inode, self._offset = fh, st.st_ino, offset  # type: ignore[assignment]
        return True

    def _open_first(self) -> bool:
        saved = self._load_position()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self._first_open = True  # decide again when it appears...
            self.start_at_end = False  # ...and then read all of it: it is new
            self.up = False
            return False
        if saved is not None:
            if saved.inode == st.st_ino:
                return self._open(self.path, saved.offset if saved.offset <= st.st_size else 0)
            rotated = self._find_rotated(saved.inode)
            if rotated is not None:
                self._pending_files = [self.path]
                return self._open(rotated, saved.offset)
            return self._open(self.path, 0)
        return self._open(self.path, st.st_size if self.start_at_end else 0)

    def _find_rotated(self, inode: int) -> Path | None:
        for p in self.path.parent.glob(self.path.name + ".*"):
            with contextlib.suppress(OSError):
                if p.stat().st_ino == inode:
                    return p
        return None

    def _load_position(self) -> Position | None:
        if self.position_file is None:
            return None
        try:
            raw = json.loads(self.position_file.read_text())
            return Position(int(raw["inode"]), int(raw["offset"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None
