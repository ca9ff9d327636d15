"""A finding shaped like the analyzer's (a slow broker, stage in the evidence), for the
findings tests."""

from __future__ import annotations

from linkwatch.records import Finding


def finding(
    rule: str = "slow_broker",
    subject: str = "broker:2",
    severity: str = "warning",
    stage: str | None = "local",
    active: bool = True,
    ts_ms: int = 1000,
    follower: int | None = None,
    families: list | None = None,
) -> Finding:
    return Finding(
        cluster="c",
        source="test",
        ts_ms=ts_ms,
        rule=rule,
        subject=subject,
        severity=severity,
        summary=f"{rule} {subject}",
        evidence={"stage": stage}
        | ({"slow_follower": follower} if follower is not None else {})
        | ({"families": families} if families is not None else {}),
        action="look",
        active=active,
    )
