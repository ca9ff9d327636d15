"""Transactional SQLite sink: the output rows and the next offset per partition in one transaction.

After a crash at any point, either a record's output *and* its offset were written, or
neither was; on restart the consumer starts each partition at the stored offset (the sink is
its :class:`~consumer.fetch_loop.OffsetStore`). A record delivered again anyway (a
rebalance moved the partition, an ack raced a revoke) is skipped because its offset is below the
stored one — so the output holds every record exactly once.

The ``output`` table deliberately has no uniqueness constraint on (topic, partition, offset): a
duplicate would show, which is how the tests check the guarantee.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

from consumer.async_fetch import TP, Delivery

SCHEMA = """
CREATE TABLE IF NOT EXISTS output (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    "offset" INTEGER NOT NULL,
    timestamp_ms INTEGER,
    key BLOB,
    value BLOB
);
CREATE TABLE IF NOT EXISTS offsets (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (topic, partition)
);
"""


class SqliteSink:
    """Write deliveries (or what the application made of them) with their offsets, atomically."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.executescript(SCHEMA)
        self._lock = threading.Lock()
        self._next = self._load()
        self.skipped_duplicates = 0

    def _load(self) -> dict[TP, int]:
        rows = self._conn.execute("SELECT topic, partition, next_offset FROM offsets").fetchall()
        return {(t, p): o for t, p, o in rows}

    def offsets(self) -> dict[TP, int]:
        with self._lock:
            return dict(self._next)

    def write(
        self,
        deliveries: Sequence[Delivery],
        values: Sequence[bytes | None] | None = None,
    ) -> list[Delivery]:
        """Write each delivery's output row (``values[i]``, default its raw value; ``None`` in
        ``values`` means "no output, only advance the offset") and its next offset in one
        transaction. Returns the deliveries written; those below the stored offset are skipped.
        """
        written: list[Delivery] = []
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                nxt = dict(self._next)
                for i, d in enumerate(deliveries):
                    if d.offset < nxt.get(d.tp, -1):
                        self.skipped_duplicates += 1
                        continue
                    value = d.raw_value if values is None else values[i]
                    if values is None or value is not None:
                        cur.execute(
                            'INSERT INTO output (topic, partition, "offset", timestamp_ms, key, value)'
                            " VALUES (?, ?, ?, ?, ?, ?)",
                            (d.topic, d.partition, d.offset, d.timestamp_ms, d.raw_key, value),
                        )
                    nxt[d.tp] = d.offset + 1
                    written.append(d)
                cur.executemany(
                    "INSERT INTO offsets (topic, partition, next_offset) VALUES (?, ?, ?)"
                    " ON CONFLICT (topic, partition) DO UPDATE SET next_offset = excluded.next_offset",
                    [(t, p, o) for (t, p), o in nxt.items() if self._next.get((t, p)) != o],
                )
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            self._next = nxt
        return written

    def close(self) -> None:
        with self._lock:
            self._conn.close()
