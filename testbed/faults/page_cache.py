"""A cold segment: a file written back and its pages dropped from the page cache
(``POSIX_FADV_DONTNEED``), so the next read of it comes from disk. Linux only."""

from __future__ import annotations

import os


def evict_page_cache(path: os.PathLike[str] | str) -> None:
    """Write ``path`` back and drop its pages from the page cache (``POSIX_FADV_DONTNEED``), so
    the next read of it comes from disk: how the cold-read tests make a segment cold. Linux only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
