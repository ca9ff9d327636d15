"""What the probe says about a broker a detector suspects: corroborates, contradicts, or nothing.

The probe (``probe/``) measures each leader broker from the outside — a record produced to the
partition it leads and read back — so it can confirm a slow-broker finding drawn from the
brokers' own request times, or say the clients do not feel it. Pure: rows and thresholds in,
a JSON-ready dict out (it goes into the finding's ``evidence["probe"]``).

Rule — over the finding's windows, the broker's probe rows are merged (end-to-end p99: the
median of its windows' p99s; availability: summed ok / summed decided) and so is every peer's.
The broker is *bad* when its end-to-end p99 exceeds both ``min_latency_ms`` and
``peer_ratio`` × the peers' median, or its availability is more than ``availability_gap``
below the peers' median. Bad → ``corroborates``; not bad → ``contradicts``. No probe row for
the broker, or none for any peer, in those windows → ``no probe data`` (with the reason).

Commit latency (the probe group's offset commits, per *coordinator* broker) is reported beside
the verdict, never part of it: ``values.commit_p99_ms`` is the median of the broker's windows'
commit p99s, the peers' median beside it, and the reason names it when present. A broker may
coordinate no probe commit (the group's coordinator is another broker), so its absence says
nothing about the broker; when absent the keys are ``None`` and the reason does not mention it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from linkwatch.aggregates import Aggregates, ProbeBrokerWindow

CORROBORATES = "corroborates"
CONTRADICTS = "contradicts"
NO_DATA = "no probe data"


@dataclass(frozen=True)
class ProbeThresholds:
    """Defaults: the slow-broker model's (``probe_ratio``, ``probe_floor_ms``,
    ``probe_availability_gap``); :func:`analyzer.slow_broker.probe_thresholds` maps a
    configured model's."""

    peer_ratio: float = 3.0
    min_latency_ms: float = 100.0
    availability_gap: float = 0.05


@dataclass(frozen=True)
class _Merged:
    windows: int
    end_to_end_p99_ms: float | None
    availability: float | None
    commit_p99_ms: float | None


def _merge(rows: Sequence[ProbeBrokerWindow]) -> _Merged:
    decided = sum(r.decided for r in rows)
    return _Merged(
        windows=len(rows),
        end_to_end_p99_ms=_median(r.end_to_end_p99_ms for r in rows),
        availability=sum(r.ok for r in rows) / decided if decided else None,
        commit_p99_ms=_median(r.commit_p99_ms for r in rows),
    )


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def probe_evidence(
    data: Aggregates, broker: int, windows: Sequence[int], t: ProbeThresholds | None = None
) -> dict[str, Any]:
    """The probe's verdict on ``broker`` over ``windows`` (window start ms, the finding's)."""
    t = t or ProbeThresholds()
    wanted = set(windows)
    by_broker: dict[int, list[ProbeBrokerWindow]] = defaultdict(list)
    for r in data.probes:
        if r.window_start_ms in wanted:
            by_broker[r.broker].append(r)
    out: dict[str, Any] = {"baseline": asdict(t), "windows": sorted(wanted)}
    if broker not in by_broker:
        return out | {"verdict": NO_DATA, "reason": f"no probe sample for broker {broker} in these windows"}
    peers = {b: _merge(rows) for b, rows in by_broker.items() if b != broker}
    if not peers:
        return out | {"verdict": NO_DATA, "reason": "no probe sample of any peer to compare with"}
    own = _merge(by_broker[broker])
    peer_p99 = _median(m.end_to_end_p99_ms for m in peers.values())
    peer_avail = _median(m.availability for m in peers.values())
    slow = own.end_to_end_p99_ms is not None and own.end_to_end_p99_ms > max(
        t.min_latency_ms, t.peer_ratio * (peer_p99 or 0.0)
    )
    unavailable = (
        own.availability is not None
        and peer_avail is not None
        and own.availability < peer_avail - t.availability_gap
    )
    reasons = []
    if slow:
        reasons.append("end-to-end p99 above its peers'")
    if unavailable:
        reasons.append("availability below its peers'")
    peer_commit = _median(m.commit_p99_ms for m in peers.values())
    reason = " and ".join(reasons) or "probe latency and availability in line with its peers"
    return out | {
        "verdict": CORROBORATES if slow or unavailable else CONTRADICTS,
        "reason": reason + _commit_note(own.commit_p99_ms, peer_commit),
        "values": asdict(own),
        "peers": {
            "brokers": sorted(peers),
            "median_end_to_end_p99_ms": peer_p99,
            "median_availability": peer_avail,
            "median_commit_p99_ms": peer_commit,
        },
    }


def _commit_note(own: float | None, peers: float | None) -> str:
    """The commit p99 as a clause of the reason ("" when the broker coordinated no commit)."""
    if own is None:
        return ""
    versus = f" (peers' median {peers:.1f} ms)" if peers is not None else ""
    return f"; offset commit p99 {own:.1f} ms{versus}"
