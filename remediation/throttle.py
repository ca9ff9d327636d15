"""Replication throttles (KIP-73): set, adjust and clear — only for the replicas that move.

A throttle has two halves: a rate on each broker involved
(``leader/follower.replication.throttled.rate``) and, per topic, the replicas it applies to
(``leader.replication.throttled.replicas`` = the current replicas the data is read from,
``follower.replication.throttled.replicas`` = the new replicas being built, as
``partition:broker`` lists). Only moving replicas are listed, so ordinary replication is never
slowed.

Ownership: :func:`apply_throttle` records, through ``record``, every key it touches with the
value it replaced (the first time only), so :func:`clear_throttle` — also after a restart, from
the persisted action — restores exactly what was there and touches nothing it did not set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kafka.admin import ConfigResourceType
from pydantic import Field

from linkwatch.records import Finding
from remediation.base import Context, Plan, PlanError, Remediation, RemediationConfig, Step
from remediation.guardrails import broker_of
from remediation.view import BROKER_THROTTLE_KEYS, ClusterView, set_configs

Move = tuple[str, int, list[int], list[int]]  # topic, partition, replicas before, after


def throttled_replicas(moves: Iterable[Move]) -> dict[str, dict[str, set[str]]]:
    """topic -> {"leader": {"p:b", ...}, "follower": {...}} for these moves only."""
    out: dict[str, dict[str, set[str]]] = {}
    for topic, partition, before, after in moves:
        entry = out.setdefault(topic, {"leader": set(), "follower": set()})
        entry["leader"].update(f"{partition}:{b}" for b in before)
        entry["follower"].update(f"{partition}:{b}" for b in after if b not in before)
    return out


def moving_brokers(moves: Iterable[Move]) -> set[int]:
    return {b for _, _, before, after in moves for b in (*before, *after)}


def _merge(current: str | None, add: set[str]) -> str:
    if (current or "").strip() == "*":  # an operator throttles every replica: never narrow it
        return "*"
    have = {x for x in (current or "").split(",") if x}
    return ",".join(sorted(have | add, key=lambda s: tuple(int(x) for x in s.split(":"))))


def apply_throttle(
    admin: Any,
    view: ClusterView,
    rate_bytes_per_s: int,
    moves: list[Move],
    owned: Mapping[str, Mapping[str, str | None]],
    record: Callable[[str, dict[str, str | None]], None],
) -> None:
    """Set the rate on the moving brokers and add the moving replicas to their topics' lists.

    ``owned`` is what this action already owns (``"broker:1"`` / ``"topic:t"`` -> key -> the
    value before us); ``record(resource, originals)`` persists new ownership *before* the change.
    """
    for broker in sorted(moving_brokers(moves)):
        res = f"broker:{broker}"
        current = view.broker_configs.get(broker, {})
        if res not in owned:
            record(res, {k: current.get(k) for k in BROKER_THROTTLE_KEYS})
        set_configs(
            admin,
            ConfigResourceType.BROKER,
            str(broker),
            dict.fromkeys(BROKER_THROTTLE_KEYS, str(rate_bytes_per_s)),
        )
    for topic, sides in throttled_replicas(moves).items():
        res = f"topic:{topic}"
        current = view.topic_configs.get(topic, {})
        keys = {
            "leader.replication.throttled.replicas": sides["leader"],
            "follower.replication.throttled.replicas": sides["follower"],
        }
        if res not in owned:
            record(res, {k: current.get(k) for k in keys})
        set_configs(
            admin, ConfigResourceType.TOPIC, topic, {k: _merge(current.get(k), v) for k, v in keys.items()}
        )


def clear_throttle(admin: Any, owned: Mapping[str, Mapping[str, str | None]]) -> list[str]:
    """Put back every key this action touched; returns the resources restored."""
    done = []
    for res, originals in owned.items():
        kind, _, name = res.partition(":")
        rtype = ConfigResourceType.BROKER if kind == "broker" else ConfigResourceType.TOPIC
        set_configs(admin, rtype, name, dict(originals))
        done.append(res)
    return done


def set_rate(admin: Any, brokers: Iterable[int], rate_bytes_per_s: int) -> None:
    """Adjust the rate of a running throttle (the replica lists stay)."""
    for broker in brokers:
        set_configs(
            admin,
            ConfigResourceType.BROKER,
            str(broker),
            dict.fromkeys(BROKER_THROTTLE_KEYS, str(rate_bytes_per_s)),
        )


class ThrottleConfig(RemediationConfig):
    rate_bytes_per_s: int = Field(10 << 20, ge=1024)


class ThrottleRemediation(Remediation):
    """Throttle the reassignments in flight that involve the finding's broker (or all, for a
    ``cluster:`` subject) at ``rate_bytes_per_s``; undo restores what was there before."""

    NAME = "throttle"
    Config = ThrottleConfig
    config: ThrottleConfig

    def plan(self, finding: Finding, view: ClusterView) -> Plan:
        broker = broker_of(finding.subject)
        if broker is None and not finding.subject.startswith("cluster:"):
            raise PlanError(f"throttle acts on broker:<id> or cluster:<name>, not {finding.subject}")
        moves = [
            [t, p, [b for b in r["replicas"] if b not in r["adding_replicas"]], r["replicas"]]
            for (t, p), r in sorted(view.reassigning.items())
            if broker is None or broker in r["replicas"]
        ]
        if not moves:
            return Plan(self.NAME, finding.subject, "no reassignment in flight to throttle")
        step = Step(
            "set_throttle",
            finding.subject,
            {"rate_bytes_per_s": self.config.rate_bytes_per_s, "moves": moves},
            30.0,
        )
        return Plan(self.NAME, finding.subject, f"throttle {len(moves)} moving partitions", (step,))

    def execute(self, step: Step, ctx: Context) -> None:
        if step.kind == "clear_throttle":
            clear_throttle(ctx.admin, step.params["owned"])
            return
        moves = [(t, p, list(b), list(a)) for t, p, b, a in step.params["moves"]]
        apply_throttle(ctx.admin, ctx.view(), step.params["rate_bytes_per_s"], moves, ctx.owned(), ctx.record)

    def undo(self, action: dict[str, Any], view: ClusterView) -> Plan:
        owned = action.get("throttles") or {}
        step = Step("clear_throttle", action["subject"], {"owned": owned}, 30.0)
        return Plan(
            self.NAME,
            action["subject"],
            f"clear the throttles of action {action['id']}",
            (step,) if owned else (),
        )

    def recover(self, action: dict[str, Any], ctx: Context) -> str:
        return "throttle left as set (undo clears it)"
