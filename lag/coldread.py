"""Cold reads: which groups read from disk instead of the page cache.

Per broker, the **page-cache window** = page cache bytes / write rate: roughly how far back in
time the data still in memory reaches (80 GB of cache at 170 MB/s of writes ≈ 8 minutes). A
group whose lag in seconds exceeds the window of its partition's leader reads from disk, and
its reads evict pages real-time readers need: a **cold-read risk**.

Where the windows come from (``windows_from``):

* ``samples`` — the agents' ``HostStats`` records on ``linkwatch.samples`` (latest per broker,
  ignored when older than ``max_host_age_s``); the agent exports the same number as
  ``linkwatch_host_page_cache_window_seconds``.
* ``static`` — ``static_windows_s`` per broker (for a fixed estimate, or tests).
* ``proc`` — this host's ``/proc/meminfo`` ``Cached`` divided by the write rate measured from
  ``/proc/vmstat`` ``pgpgout`` over a second (only when every broker runs on this host).

Confirmation on the broker (the finding says "confirmed", "not confirmed" or why it could not
check, and ``confirmed_by`` which way):

* ``confirm: agent`` — ``GET /page-cache`` on the leader's agent (``agent_urls`` per broker,
  :mod:`agent.pagecache_http`), which runs the check on its own log dirs;
* ``confirm: local`` — the same check (:mod:`linkwatch.pagecache`) in this process with the leader's
  log dirs (``log_dirs`` per broker), when the collector runs on the broker host.
"""

from __future__ import annotations

import logging
import time
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode, urlsplit

import orjson
from pydantic import Field, field_validator, model_validator

from lag.collector import PassResult
from linkwatch.config import StrictModel, rename_keys
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from linkwatch.records import SAMPLES_TOPIC, Finding, HostStats, RecordError, decode

log = logging.getLogger(__name__)
RULE = "cold_read_risk"


class ColdReadConfig(StrictModel):
    enabled: bool = True
    windows_from: Literal["samples", "static", "proc"] = "samples"
    static_windows_s: dict[int, float] = Field(default_factory=dict)
    samples_topic: str = SAMPLES_TOPIC
    kafka: KafkaClientConfig | None = None  # the cluster samples_topic is on; None: the collector's
    max_host_age_s: float = Field(120.0, gt=0)
    confirm: Literal["none", "local", "agent"] = "none"
    log_dirs: dict[int, list[str]] = Field(default_factory=dict)  # confirm: local
    agent_urls: dict[int, str] = Field(default_factory=dict)  # confirm: agent, e.g. http://broker-1:9308
    agent_timeout_s: float = Field(2.0, gt=0, le=30)  # per request
    confirm_budget_s: float = Field(10.0, gt=0)  # all confirmations of one pass
    span_bytes: int = Field(1024 * 1024, ge=4096)
    skip_bytes: int = Field(256 * 1024, ge=0)  # what our own read of the record may have loaded
    resident_ratio_below: float = Field(0.5, gt=0, le=1)
    max_confirmations: int = Field(50, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _old_spellings(cls, data: Any) -> Any:
        return rename_keys(data, {"bootstrap_servers": "kafka.bootstrap_servers"}, "cold_read")

    @field_validator("agent_urls")
    @classmethod
    def _urls(cls, v: dict[int, str]) -> dict[int, str]:
        for broker, url in v.items():
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
                raise ValueError(f"broker {broker}: {url!r} is not an http(s)://host:port[/path] URL")
        return v


@dataclass(frozen=True)
class Confirmation:
    """What the broker side said about one risky partition, and how it was asked."""

    method: str  # "local" (this process read the log dirs) or "agent" (the leader's agent)
    confirmed: bool | None  # None: could not check (reason says why)
    reason: str
    segment: str | None = None
    position: int | None = None
    resident_fraction: float | None = None
    source: str = ""  # the agent URL, or the log dirs


def confirm_via_agent(
    base_url: str,
    topic: str,
    partition: int,
    offset: int,
    span_bytes: int,
    skip_bytes: int,
    timeout_s: float,
) -> Confirmation:
    """``GET <agent>/page-cache`` (:mod:`agent.pagecache_http`); every failure is a reason."""
    query = urlencode(
        {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "span_bytes": span_bytes,
            "skip_bytes": skip_bytes,
        }
    )
    url = f"{base_url.rstrip('/')}/page-cache?{query}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = orjson.loads(resp.read(64 * 1024))
    except urllib.error.HTTPError as e:
        try:
            message = orjson.loads(e.read(64 * 1024)).get("message", "")
        except (orjson.JSONDecodeError, AttributeError, OSError):
            message = ""
        return Confirmation(
            "agent", None, f"agent {base_url} answered {e.code}: {message}".strip(), source=base_url
        )
    except (OSError, orjson.JSONDecodeError) as e:
        return Confirmation("agent", None, f"agent {base_url} not reachable: {e}", source=base_url)
    if not isinstance(body, dict) or not isinstance(body.get("confirmed"), bool | None):
        return Confirmation(
            "agent", None, f"agent {base_url}: unexpected answer {str(body)[:200]}", source=base_url
        )
    return Confirmation(
        "agent",
        body["confirmed"],
        f"{body.get('reason', '')} [agent {base_url}]",
        body.get("segment"),
        body.get("position"),
        body.get("resident_fraction"),
        base_url,
    )


def page_cache_window_s(page_cache_bytes: float, write_bytes_per_s: float) -> float:
    """Seconds of writes the page cache holds; infinite when nothing is written."""
    if write_bytes_per_s <= 0:
        return float("inf")
    return page_cache_bytes / write_bytes_per_s


def proc_page_cache_window(sample_s: float = 1.0) -> tuple[int, float, float]:
    """(cached bytes, write bytes/s, window s) of this host from /proc."""
    cached = _meminfo_kib("Cached") * 1024
    before = _vmstat("pgpgout")
    time.sleep(sample_s)
    rate = (_vmstat("pgpgout") - before) * 1024 / sample_s
    return cached, rate, page_cache_window_s(cached, rate)


def _meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name == key:
            return int(rest.split()[0])
    raise KeyError(key)


def _vmstat(key: str) -> int:
    for line in Path("/proc/vmstat").read_text().splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return int(value)
    raise KeyError(key)


@dataclass(frozen=True)
class ColdReadRisk:
    group: str
    topic: str
    partition: int
    committed: int
    lag_seconds: float
    leader: int
    window_s: float


def cold_read_risks(
    partitions: Iterable[tuple[str, str, int, int, float | None, int | None]], windows: dict[int, float]
) -> list[ColdReadRisk]:
    """Rule: lag seconds > page-cache window of the partition's leader.

    ``partitions``: (group, topic, partition, committed, lag_seconds, leader). Partitions with
    no lag in seconds, no leader or no window for the leader are not judged (no false risk).
    """
    out = []
    for group, topic, partition, committed, secs, leader in partitions:
        if secs is None or leader is None or leader < 0:
            continue
        window = windows.get(leader)
        if window is None or secs <= window:
            continue
        out.append(ColdReadRisk(group, topic, partition, committed, secs, leader, window))
    return out


class HostStatsFeed:
    """Latest ``HostStats`` per broker from the samples topic (bounded poll per pass)."""

    def __init__(self, kafka: KafkaClientConfig | str, topic: str) -> None:
        from kafka import KafkaConsumer

        self._consumer = KafkaConsumer(
            topic,
            **kafka_python_kwargs(kafka, "lag-hoststats"),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
        )
        self.latest: dict[int, HostStats] = {}
        self.dropped = 0

    def poll(self) -> None:
        for records in self._consumer.poll(timeout_ms=100, max_records=5000).values():
            for rec in records:
                self.feed(rec.value)

    def feed(self, raw: bytes) -> None:
        try:
            r = decode(raw)
        except RecordError:
            self.dropped += 1
            return
        if isinstance(r, HostStats):
            prev = self.latest.get(r.broker)
            if prev is None or r.ts_ms >= prev.ts_ms:
                self.latest[r.broker] = r

    def windows(self, now_ms: int, max_age_s: float) -> dict[int, float]:
        return {
            b: page_cache_window_s(h.page_cache_bytes, h.disk_write_bytes_per_s)
            for b, h in self.latest.items()
            if now_ms - h.ts_ms <= max_age_s * 1000
        }

    def close(self) -> None:
        self._consumer.close()


class ColdReadWatch:
    """Risks per pass, optional broker-side confirmation, findings when a group's set changes."""

    def __init__(
        self, cfg: ColdReadConfig, cluster: str, source: str, feed: HostStatsFeed | None = None
    ) -> None:
        self.cfg = cfg
        self.cluster = cluster
        self.source = source
        self.feed = feed
        self.at_risk: dict[tuple[str, str, int], int] = {}
        self.last_risks: list[ColdReadRisk] = []
        self.confirmations: dict[tuple[str, str, int], Confirmation] = {}
        self._last_sets: dict[str, frozenset[tuple[str, int]]] = {}
        self._proc_cache: tuple[float, dict[int, float]] | None = None

    def windows(self, result: PassResult) -> dict[int, float]:
        if self.cfg.windows_from == "static":
            return dict(self.cfg.static_windows_s)
        if self.cfg.windows_from == "proc":
            if self._proc_cache is None or time.monotonic() - self._proc_cache[0] > 60:
                _, _, w = proc_page_cache_window(1.0)
                self._proc_cache = (time.monotonic(), {b["broker_id"]: w for b in result.brokers})
            return self._proc_cache[1]
        if self.feed is None:
            return {}
        self.feed.poll()
        return self.feed.windows(int(result.ts_s * 1000), self.cfg.max_host_age_s)

    def update(self, result: PassResult) -> list[Finding]:
        if not self.cfg.enabled:
            return []
        windows = self.windows(result)
        rows = (
            (g.group, p.topic, p.partition, p.committed, p.lag_seconds, p.leader)
            for g in result.groups.values()
            for p in g.partitions
            if p.committed >= 0  # no committed offset: nobody reads there (yet)
        )
        risks = cold_read_risks(rows, windows)
        self.last_risks = risks
        self.at_risk = {(r.group, r.topic, r.partition): r.leader for r in risks}
        self.confirmations = {}
        if self.cfg.confirm != "none":
            deadline = time.monotonic() + self.cfg.confirm_budget_s
            # One check per (leader, topic, partition, offset): groups at the same offset share it.
            done: dict[tuple[int, str, int, int], Confirmation | None] = {}
            for r in sorted(risks, key=lambda r: -r.lag_seconds)[: self.cfg.max_confirmations]:
                key = (r.leader, r.topic, r.partition, r.committed)
                if key not in done:
                    if time.monotonic() > deadline:
                        done[key] = Confirmation(
                            self.cfg.confirm,
                            None,
                            f"not checked: confirmation budget of {self.cfg.confirm_budget_s:.0f}s spent this pass",
                        )
                    else:
                        done[key] = self.confirm(r)
                check = done[key]
                if check is not None:
                    self.confirmations[(r.group, r.topic, r.partition)] = check
        return self._findings(risks, int(result.ts_s * 1000))

    def confirm(self, r: ColdReadRisk) -> Confirmation | None:
        cfg = self.cfg
        if cfg.confirm == "agent":
            url = cfg.agent_urls.get(r.leader)
            if not url:
                return Confirmation(
                    "agent", None, f"no agent URL for broker {r.leader} in cold_read.agent_urls"
                )
            return confirm_via_agent(
                url, r.topic, r.partition, r.committed, cfg.span_bytes, cfg.skip_bytes, cfg.agent_timeout_s
            )
        from linkwatch.pagecache import check_cold_read

        dirs = cfg.log_dirs.get(r.leader)
        if not dirs:
            return None
        c = check_cold_read(
            dirs, r.topic, r.partition, r.committed, cfg.span_bytes, cfg.resident_ratio_below, cfg.skip_bytes
        )
        return Confirmation(
            "local",
            c.confirmed,
            c.reason,
            c.segment,
            c.position,
            round(c.resident_pages / c.total_pages, 4) if c.total_pages else None,
            ",".join(dirs),
        )

    def _findings(self, risks: list[ColdReadRisk], now_ms: int) -> list[Finding]:
        by_group: dict[str, list[ColdReadRisk]] = {}
        for r in risks:
            by_group.setdefault(r.group, []).append(r)
        out = []
        for group, rs in by_group.items():
            key = frozenset((r.topic, r.partition) for r in rs)
            if self._last_sets.get(group) == key:
                continue
            out.append(self._finding(group, rs, now_ms, True))
        for group in [g for g in self._last_sets if g not in by_group]:
            out.append(self._finding(group, [], now_ms, False))
        self._last_sets = {g: frozenset((r.topic, r.partition) for r in rs) for g, rs in by_group.items()}
        return out

    def _finding(self, group: str, rs: list[ColdReadRisk], now_ms: int, active: bool) -> Finding:
        items = []
        confirmed = 0
        for r in sorted(rs, key=lambda r: -r.lag_seconds)[:20]:
            check = self.confirmations.get((r.group, r.topic, r.partition))
            item: dict[str, Any] = {
                "partition": f"{r.topic}-{r.partition}",
                "leader": r.leader,
                "lag_seconds": round(r.lag_seconds, 1),
                "page_cache_window_s": round(r.window_s, 1),
                "committed": r.committed,
            }
            if check is not None:
                item["confirmation"] = check.reason
                item["confirmed"] = check.confirmed
                item["confirmed_by"] = check.method
                if check.resident_fraction is not None:
                    item["resident_fraction"] = check.resident_fraction
                confirmed += bool(check.confirmed)
            items.append(item)
        worst = max(rs, key=lambda r: r.lag_seconds) if rs else None
        summary = (
            f"group {group} reads {len(rs)} partition(s) older than the leader's page-cache window "
            f"(worst {worst.topic}-{worst.partition}: {worst.lag_seconds:.0f}s behind, window {worst.window_s:.0f}s"
            f" on broker {worst.leader})"
            if worst
            else f"group {group} no longer reads older than the page-cache window"
        )
        if rs and self.confirmations:
            via = "by the leader's agent" if self.cfg.confirm == "agent" else "on the broker's files"
            summary += f"; {confirmed} confirmed {via}"
        return Finding(
            cluster=self.cluster,
            source=self.source,
            ts_ms=now_ms,
            rule=RULE,
            subject=f"group:{group}",
            severity="warning" if active else "info",
            summary=summary,
            evidence={"partitions": items, "count": len(rs), "confirmed": confirmed},
            action=(
                "expect disk reads on the leaders and cache eviction for real-time readers: let the group "
                "catch up off-peak, throttle it, or grow the page cache"
                if active
                else "none"
            ),
            active=active,
        )
