"""What ``linkwatch remediate status`` shows, read where the acting remediator keeps it: the shared
state topic (read-committed, nothing written) or the state file. Read-only; any host may run it."""

from __future__ import annotations

import time
from typing import Any

from remediation.config import RemediatorConfig
from remediation.state import FileStateStore, from_documents, read_documents


def read_state(cfg: RemediatorConfig) -> dict[str, Any]:
    from remediation.service import shared

    if shared(cfg):
        return from_documents(read_documents(cfg.kafka, cfg.lease.state_topic))
    return FileStateStore(cfg.state_dir / "state.json").data


def _verdict(a: dict[str, Any]) -> str:
    if a.get("harm"):
        return f"harm: {a['harm']}"
    ev = a.get("evidence") or {}
    if ev.get("verdict"):
        return str(ev["verdict"])
    if a["status"] == "settling":
        until = (a.get("watch") or {}).get("settle_until")
        return f"watching {max(0.0, (until or 0) - time.time()):.0f} s more" if until else "watching"
    return str(a.get("error") or a.get("recovery") or "")


def render(data: dict[str, Any]) -> str:
    breaker = data.get("breaker")
    lines = [
        f"breaker: {'OPEN — ' + str(breaker.get('reason')) + ' (linkwatch remediate reset)' if breaker else 'closed'}",
        f"paused: {data['paused']} ({len(data['pending'])} findings kept)",
        f"demoted brokers: {data['demoted'] or 'none'}",
        f"findings dropped at the boundary: {data['dropped'] or 'none'}",
        f"findings judged up to: {data['offsets'] or 'none yet'}",
    ]
    for a in sorted(data["actions"].values(), key=lambda a: a.get("started") or 0):
        done = sum(1 for s in a["steps"] if s["status"] == "done")
        lines.append(
            f"{a['id']}  {a['status']:<10} {a['remediation']:<18} {a['subject']:<24} "
            f"{done}/{len(a['steps'])} steps  {_verdict(a)}"
        )
    return "\n".join(lines)
