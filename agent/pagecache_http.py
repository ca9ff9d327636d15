"""``GET /page-cache``: the broker-side cold-read confirmation, served by the agent.

The lag collector (``cold_read.confirm: agent``) asks the agent of a partition's leader whether
the bytes a lagging group reads next are in that broker's page cache::

    GET /page-cache?topic=orders&partition=3&offset=368800
    200 {"topic": "orders", "partition": 3, "offset": 368800, "broker": 2,
         "segment": "00000000000000368769.log", "position": 4100,
         "resident_pages": 12, "total_pages": 256, "resident_fraction": 0.047,
         "confirmed": true, "reason": "confirmed: mostly not in the page cache (...)"}

The work is :func:`linkwatch.pagecache.check_cold_read` on the agent's own log dirs: the segment by
binary search over the sorted segment base offsets, the position by binary search in its
``.index`` (the ``.log`` is not read), then ``mincore`` on a read-only mapping of at most
``max_span_bytes``. It is served by :class:`agent.exporters.http.AgentHttpServer` (aiohttp:
sizes, deadline and non-GET methods are handled there). Optional ``span_bytes`` / ``skip_bytes`` parameters override the defaults
within bounds.

Every parameter is validated: a missing, repeated, unknown or malformed one is ``400`` with a
message naming it; a partition this broker has no directory for (or an offset below its first
segment) is ``404``; more than ``max_concurrent`` requests at once is ``503``. Nothing here
writes or keeps a file open.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from linkwatch.pagecache import check_cold_read

PATH = "/page-cache"
TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")  # Kafka's legal topic names
INT_PARAM = re.compile(r"^[0-9]{1,19}$")
MAX_PARTITION = 2**31 - 1
MAX_OFFSET = 2**63 - 1
ALLOWED = ("topic", "partition", "offset", "span_bytes", "skip_bytes")
NOT_FOUND_REASONS = ("no_partition_dir", "before_log_start", "no_segments")


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class PageCacheLimits:
    span_bytes: int = 1024 * 1024
    skip_bytes: int = 256 * 1024
    resident_ratio_below: float = 0.5
    max_span_bytes: int = 16 * 1024 * 1024
    max_skip_bytes: int = 64 * 1024 * 1024
    max_concurrent: int = 4


def _int(q: dict[str, list[str]], name: str, low: int, high: int, default: int | None = None) -> int:
    values = q.get(name)
    if values is None:
        if default is None:
            raise BadRequest(f"missing parameter {name!r}")
        return default
    (raw,) = values
    if not INT_PARAM.match(raw):
        raise BadRequest(f"{name}={raw[:40]!r} is not a non-negative integer")
    value = int(raw)
    if not low <= value <= high:
        raise BadRequest(f"{name}={value} is out of range [{low}, {high}]")
    return value


def parse_query(query: str, limits: PageCacheLimits) -> tuple[str, int, int, int, int]:
    """(topic, partition, offset, span_bytes, skip_bytes) from a query string, or BadRequest."""
    if len(query) > 2048:
        raise BadRequest("query string longer than 2048 characters")
    try:
        q = parse_qs(query, keep_blank_values=True, strict_parsing=bool(query), max_num_fields=10)
    except ValueError as e:
        raise BadRequest(f"malformed query string: {e}") from None
    unknown = sorted(set(q) - set(ALLOWED))
    if unknown:
        raise BadRequest(f"unknown parameter(s) {unknown}; allowed: {list(ALLOWED)}")
    repeated = sorted(k for k, v in q.items() if len(v) > 1)
    if repeated:
        raise BadRequest(f"parameter(s) {repeated} given more than once")
    if "topic" not in q:
        raise BadRequest("missing parameter 'topic'")
    topic = q["topic"][0]
    if not TOPIC_NAME.match(topic) or topic in (".", ".."):
        raise BadRequest(f"topic={topic[:60]!r} is not a legal Kafka topic name")
    partition = _int(q, "partition", 0, MAX_PARTITION)
    offset = _int(q, "offset", 0, MAX_OFFSET)
    span = _int(q, "span_bytes", 4096, limits.max_span_bytes, limits.span_bytes)
    skip = _int(q, "skip_bytes", 0, limits.max_skip_bytes, limits.skip_bytes)
    return topic, partition, offset, span, skip


class PageCacheEndpoint:
    """The handler, independent of the HTTP server: ``handle(query) -> (status, body)``."""

    def __init__(self, log_dirs: Iterable[str | Path], broker: int, limits: PageCacheLimits) -> None:
        self.log_dirs = [str(d) for d in log_dirs]
        self.broker = broker
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.max_concurrent)
        self.requests = 0
        self.rejected = 0

    def handle(self, query: str) -> tuple[int, dict[str, Any]]:
        self.requests += 1
        try:
            topic, partition, offset, span, skip = parse_query(query, self.limits)
        except BadRequest as e:
            self.rejected += 1
            return 400, {"error": "bad_request", "message": str(e)}
        if not self.log_dirs:
            return 404, {"error": "no_log_dirs", "message": "this agent has no log_dirs.paths configured"}
        if not self._slots.acquire(blocking=False):
            return 503, {
                "error": "busy",
                "message": f"more than {self.limits.max_concurrent} requests at once",
            }
        try:
            check = check_cold_read(
                self.log_dirs, topic, partition, offset, span, self.limits.resident_ratio_below, skip
            )
        finally:
            self._slots.release()
        if check.segment is None:
            reason = check.reason.split(":", 1)[0]
            status = 404 if reason in NOT_FOUND_REASONS else 500
            return status, {
                "error": reason,
                "message": f"broker {self.broker}: {check.reason}",
                "topic": topic,
                "partition": partition,
                "offset": offset,
            }
        return 200, {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "broker": self.broker,
            "segment": check.segment,
            "position": check.position,
            "resident_pages": check.resident_pages,
            "total_pages": check.total_pages,
            "resident_fraction": (
                round(check.resident_pages / check.total_pages, 4) if check.total_pages else None
            ),
            "confirmed": check.confirmed,
            "reason": check.reason,
        }
