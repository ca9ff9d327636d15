"""Follow a log file like ``tail -F``: across rotation, truncation and re-creation.

* **Rotation** (log4j2 renames ``kafka-request.log`` to ``.1`` and opens a new file): the open
  file is read to its end first (also what was appended after the read that hit its end and
  before the rename was seen), then rotated files this follower never opened (a rotation more
  than once between two polls; older ``<name>.N`` first), then the new file from its start.
* **Truncation** (copy-truncate: same inode, size below the read position, *or* the first
  bytes changed, which catches a truncated file rewritten past the old position before the
  next poll): if a sibling ``<name>.*`` starts with the same bytes and holds the position, it is
  the copy, and the rest of it is read first; the file is then read again from its start.
  Without such a copy the unread tail is lost, and counted as a ``truncated_file`` skip.
* **Disappearance** (broker stopped, directory cleaned): the source is reported down, the open
  file is drained, and the path is retried on every poll; a file that appears later is read
  from its start.
* **Position file**: ``(inode, offset, first bytes)`` and the files known (inode and first
  bytes) saved atomically after each poll batch. On start the follower resumes there if the
  inode and first bytes are the current file's; else it reads the rest of that file where it
  is now (rotated) or of its copy (truncated), every rotated file it does not know, oldest
  first, then the current file. Without a saved position it starts at the end (default) or
  the beginning, and the rotated files present count as known.

Files are told apart by inode *and* first bytes (:data:`HEAD_BYTES`), so a reused inode is not
taken for a file already read; an empty file has no identity and is skipped until it has
bytes. Lost, because nothing holds them any more: lines of a file created and deleted between
two polls (or while stopped), and lines written between a copy and its truncation.

Lines longer than ``max_line_bytes`` are cut off and skipped up to their newline (the caller sees
a ``too_long`` notice through ``on_skip``), so a missing newline can never grow memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Read size: small enough that a block is done with and its memory reused before the next read
# (a fresh megabyte per read costs a page fault per 4 KiB, more than reading it), large enough
# that the ingest's per-block work is spread over a few hundred lines.
READ_BYTES = 1 << 18
MAX_POLL_BYTES = 8 << 20  # per poll
# The first bytes of a file identify it (with its inode): a Kafka request line starts with a
# millisecond timestamp and a correlation id, so two files agree on these only if one is a copy.
HEAD_BYTES = 256
MAX_KNOWN_FILES = 256
MAX_SAVED_KNOWN = 64  # the most recent ones go to the position file ...
KNOWN_HEAD_BYTES = 64  # ... with this many of their first bytes


@dataclass(frozen=True)
class Position:
    inode: int
    offset: int
    head: bytes = b""  # the file's first bytes as known then: tells a rewritten file or reused inode
    # (inode, first bytes) of the files read or seen by then: a rotated file not among them, at
    # the next start, holds lines never read. None: unknown (every file present is taken as seen).
    known: tuple[tuple[int, bytes], ...] | None = None


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
        # Files to read before the current one, oldest first: (path, offset), or (the open file,
        # offset) to come back to it after older rotated files.
        self._pending_files: list[tuple[Path | os.FileIO, int]] = []
        self._head = b""  # the open file's first bytes (up to HEAD_BYTES, as far as known)
        # inode -> first bytes of every file opened or present at start: rotated files not in
        # here (or with other first bytes: a reused inode) were never read.
        self._known: dict[int, bytes] = {}
        self.rotations = 0
        self.truncations = 0
        self.up = False
        self.caught_up = False  # the last read_blocks stopped at the end of the log
        self._first_open = True
        saved = self._load_position()
        if saved is not None and saved.known is not None:
            for inode, head in saved.known:
                self._remember(inode, head)
        else:  # files present now count as read: "start at the end" (or no record of them)
            for _path, st, head in self._siblings():
                self._remember(st.st_ino, head)
        self._open_next()  # "start at the end" means the end as of now

    # -- public -----------------------------------------------------------------------------
    def read_lines(self, max_bytes: int = MAX_POLL_BYTES) -> list[bytes]:
        """Complete lines available now (without newlines), at most about ``max_bytes`` of them."""
        return [line for block in self.read_blocks(max_bytes) for line in block.split(b"\n")[:-1]]

    def read_blocks(self, max_bytes: int = MAX_POLL_BYTES) -> list[bytes]:
        """:meth:`iter_blocks`, as a list."""
        return list(self.iter_blocks(max_bytes))

    def iter_blocks(self, max_bytes: int = MAX_POLL_BYTES) -> Iterator[bytes]:
        """Complete lines available now, at most about ``max_bytes`` of them, as blocks of
        consecutive lines, each line ending in ``\n`` (no block is empty). What
        :meth:`read_lines` returns, without a bytes object per line: the ingest loop works on
        positions in a block. Blocks are read as they are asked for (:data:`READ_BYTES` each),
        so a caller that is done with one before asking for the next keeps memory small and
        reused. :attr:`caught_up` holds once the iteration ends."""
        self.caught_up = True
        if self._fh is None and not self._open_next():
            return
        self._check_rewritten()  # before reading from a position that may mean nothing now
        budget = max_bytes
        self.caught_up = False
        blocks: list[bytes] = []
        while budget > 0:
            chunk = self._fh.read(READ_BYTES) if self._fh is not None else b""
            if chunk:
                self._offset += len(chunk)
                budget -= len(chunk)
                self._split(chunk, blocks)
                yield from blocks
                blocks.clear()
                continue
            if not self._at_eof_switch():
                self.caught_up = True
                break

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
        return Position(self._inode, self._offset - len(self._partial), self._head)

    def save_position(self) -> None:
        if self.position_file is None or self._inode < 0:
            return
        pos = self.position()
        tmp = self.position_file.with_suffix(".tmp")
        known = [[inode, head[:KNOWN_HEAD_BYTES].hex()] for inode, head in self._known.items()]
        data = {
            "inode": pos.inode,
            "offset": pos.offset,
            "head": pos.head.hex(),
            "path": str(self.path),
            "known": known[-MAX_SAVED_KNOWN:],
        }
        tmp.write_text(json.dumps(data))
        tmp.replace(self.position_file)

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    # -- internals --------------------------------------------------------------------------
    def _split(self, chunk: bytes, out: list[bytes]) -> None:
        # One block per read: the partial line before it, and the chunk up to its last newline
        # (chunks are small, so gluing copies little).
        last = chunk.rfind(b"\n")
        if last < 0:
            self._partial = b"" if self._skipping else self._partial + chunk
        else:
            if self._skipping:  # the rest of the over-long line, up to its newline
                self._skipping = False
                block = chunk[chunk.find(b"\n") + 1 : last + 1]
            elif last + 1 == len(chunk) and not self._partial:
                block = chunk
            else:
                block = self._partial + chunk[: last + 1]
            if block:
                out.append(block)
            self._partial = chunk[last + 1 :]
        if len(self._partial) > self.max_line_bytes:
            self.on_skip("too_long", f"line over {self.max_line_bytes} bytes in {self.path}")
            self._partial = b""
            self._skipping = True

    def _at_eof_switch(self) -> bool:
        """At EOF of the open file: switch to the next file if there is one. True if the loop
        should read again (switched, or the open file grew)."""
        if self._pending_files:
            return self._open_next()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            self.up = False
            return self._grew()  # drain the deleted or renamed file we still hold
        if st.st_ino != self._inode:
            if self._grew():
                return True  # written after our read hit its end, before the rename: read it
            self.rotations += 1
            self._reset_line()
            self._pending_files = [(p, 0) for p in self._unread_rotated(st.st_ino)]
            return self._open_next()
        return self._check_rewritten(st.st_size)

    def _grew(self) -> bool:
        return self._fh is not None and os.fstat(self._fh.fileno()).st_size > self._offset

    def _check_rewritten(self, size: int | None = None) -> bool:
        """Detect a copy-truncate of the open file, or rotated files never read while nothing
        was read from it yet; if so, queue them oldest first (the copy from where we were) with
        the open file in its place, read again from its start. True if anything was queued."""
        if self._fh is None or self._pending_files:
            return False  # reading a rotated file: it does not change
        fd = self._fh.fileno()
        if size is None:
            size = os.fstat(fd).st_size
        head = os.pread(fd, HEAD_BYTES, 0)  # one small read per poll
        resume = self._offset - len(self._partial)
        copy = None
        if size >= self._offset and head.startswith(self._head):
            if len(head) > len(self._head):
                self._head = head
                self._remember(self._inode, head)
            # Nothing read from this file yet: neither its size nor its first bytes can tell a
            # copy-truncate, but a copy never read would hold lines never read. (A deleted file
            # is read to its end first, then the rotation: there is no telling its age.)
            if resume > 0 or not self._unread_rotated(self._inode):
                return False
            renamed = any(st.st_ino == self._inode for _, st, _ in self._siblings())
            if not renamed and not self._still_current():
                return False
        else:
            self.truncations += 1
            self._known.pop(self._inode, None)  # its first bytes changed: a new file now
            copy = self._find_copy(resume) if resume > 0 else None
            if copy is None and resume > 0:
                self.on_skip("truncated_file", f"{self.path} was truncated at {resume} bytes; no copy found")
        self._partial, self._skipping = b"", False  # read again from the copy, or lost above
        order = []
        for path, st, head in self._siblings():
            if st.st_ino == self._inode:  # the open file, renamed since: in its place by age
                order.append((-_suffix_number(path), st.st_mtime_ns, 1, (self._fh, 0)))
            elif head and not self._is_known(st.st_ino, head):
                order.append(
                    (-_suffix_number(path), st.st_mtime_ns, 0, (path, resume if path == copy else 0))
                )
        self._pending_files = [entry for *_, entry in sorted(order, key=lambda o: o[:3])]
        if not any(target is self._fh for target, _ in self._pending_files):
            self._pending_files.append((self._fh, 0))
        return self._open_next()

    def _still_current(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self._inode
        except OSError:
            return False

    def _find_copy(self, offset: int) -> Path | None:
        """The rotated sibling that starts like the open file did and holds ``offset`` bytes."""
        for path, st, head in self._siblings():
            is_copy = st.st_ino != self._inode and st.st_size >= offset and head.startswith(self._head)
            if is_copy and self._head and not self._is_known(st.st_ino, head):
                return path
        return None

    def _unread_rotated(self, current_inode: int) -> list[Path]:
        """Rotated siblings never opened (a rotation more than once between polls), oldest
        first; the new current file, empty files and every file already known are left out."""
        out = []
        for path, st, head in self._siblings():
            if head and st.st_ino != current_inode and not self._is_known(st.st_ino, head):
                out.append((-_suffix_number(path), st.st_mtime_ns, path))
        return [p for _, _, p in sorted(out)]

    def _siblings(self) -> list[tuple[Path, os.stat_result, bytes]]:
        out = []
        for p in self.path.parent.glob(self.path.name + ".*"):
            if p == self.position_file or p.suffix == ".tmp":
                continue
            try:
                with open(p, "rb", buffering=0) as fh:
                    out.append((p, os.fstat(fh.fileno()), fh.read(HEAD_BYTES)))
            except OSError:
                continue
        return out

    def _is_known(self, inode: int, head: bytes) -> bool:
        """Opened (or present at start) before: same inode, and its first bytes extend the ones
        seen then (a reused inode has others)."""
        known = self._known.get(inode)
        # An empty file has no identity (its inode may be reused): taken as never read, which
        # costs nothing if it is still empty.
        return bool(known) and head.startswith(known)

    def _remember(self, inode: int, head: bytes) -> None:
        self._known.pop(inode, None)
        self._known[inode] = head
        if len(self._known) > MAX_KNOWN_FILES:
            del self._known[next(iter(self._known))]

    def _reset_line(self) -> None:
        if self._partial:
            self.on_skip("truncated", f"unterminated last line in {self.path}")
        self._partial = b""
        self._skipping = False

    def _open_next(self) -> bool:
        if self._fh is not None:  # what it holds now: known as read
            self._remember(self._inode, os.pread(self._fh.fileno(), HEAD_BYTES, 0))
        if any(target is self._fh for target, _ in self._pending_files):
            self._fh = None  # queued: read again after the files before it
        else:
            self.close()
        if self._first_open:
            self._first_open = False
            return self._open_first()
        if self._pending_files:
            target, offset = self._pending_files.pop(0)
            return self._open(target, offset) if isinstance(target, Path) else self._adopt(target, offset)
        return self._open(self.path, 0)

    def _adopt(self, fh: os.FileIO, offset: int) -> bool:
        st = os.fstat(fh.fileno())
        fh.seek(offset)
        self._fh, self._inode, self._offset = fh, st.st_ino, offset
        self._head = os.pread(fh.fileno(), HEAD_BYTES, 0)
        self._remember(st.st_ino, self._head)
        return True

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
        self._head = os.pread(fh.fileno(), HEAD_BYTES, 0)
        self._remember(st.st_ino, self._head)
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
        if saved is None:
            return self._open(self.path, st.st_size if self.start_at_end else 0)
        siblings = self._siblings()
        if saved.inode == st.st_ino:
            with open(self.path, "rb", buffering=0) as fh:
                head = fh.read(HEAD_BYTES)
            if st.st_size >= saved.offset and head.startswith(saved.head):
                return self._open(self.path, saved.offset)
        else:
            for path, sst, shead in siblings:
                if sst.st_ino == saved.inode and shead.startswith(saved.head):
                    return self._queue(siblings, {path: saved.offset})  # rotated while stopped
        if saved.offset == 0:
            return self._queue(siblings, {})
        # Truncated (and maybe renamed or deleted) while stopped: the rest is in its copy, the
        # sibling that starts with the same bytes, if there is one.
        self.truncations += 1
        for path, sst, shead in siblings:
            if saved.head and sst.st_size >= saved.offset and shead.startswith(saved.head):
                return self._queue(siblings, {path: saved.offset})
        self.on_skip(
            "truncated_file", f"{self.path}: the file read before the stop is gone or truncated; no copy"
        )
        return self._queue(siblings, {})

    def _queue(self, siblings: list[tuple[Path, os.stat_result, bytes]], offsets: dict[Path, int]) -> bool:
        """Read the rotated files never read and those in ``offsets`` (from there), oldest
        first, then the current file; opens the first."""
        order = sorted(
            (-_suffix_number(p), st.st_mtime_ns, p)
            for p, st, head in siblings
            if p in offsets or (head and not self._is_known(st.st_ino, head))
        )
        self._pending_files = [*((p, offsets.get(p, 0)) for _, _, p in order), (self.path, 0)]
        target, offset = self._pending_files.pop(0)
        return self._open(target, offset)  # type: ignore[arg-type]

    def _load_position(self) -> Position | None:
        if self.position_file is None:
            return None
        try:
            raw = json.loads(self.position_file.read_text())
            known = raw.get("known")
            return Position(
                int(raw["inode"]),
                int(raw["offset"]),
                bytes.fromhex(raw.get("head", "")),
                None if known is None else tuple((int(i), bytes.fromhex(h)) for i, h in known),
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def _suffix_number(path: Path) -> int:
    """``kafka-request.log.3`` -> 3 (log4j2's ``%i``: higher is older); 0 for other suffixes."""
    tail = path.name.rsplit(".", 1)[-1]
    return int(tail) if tail.isdigit() else 0
