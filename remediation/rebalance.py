"""``rebalance_disks``: a free-disk-first planner and a pipelined executor.

**Planner** (:func:`plan_moves`, pure): while some log dir is above ``high_ratio`` of its
capacity, take the fullest one and bring it down to ``target_ratio`` with the fewest bytes
moved — the smallest replica that alone covers the excess, else the largest, repeated. Each
replica goes to the emptiest destination with headroom (the destination stays at or under
``target_ratio`` after the move, checked against the usage with every earlier planned move
applied): another log dir of the same broker first (no network traffic), else another broker
whose rack holds no other replica of the partition (rack spread is never broken). Empty
replicas are never moved (they free nothing). A cluster under ``high_ratio`` everywhere gets an
empty plan.

**Executor** (:meth:`RebalanceDisksRemediation.execute_plan`): a pipeline with a sliding window
of ``window`` moves in flight; the moment one completes its slot is refilled (no batches that
wait for their slowest move, KIP-236). Inter-broker moves run under a replication throttle set
only for their replicas and cleared at the end. A move past ``move_deadline_s`` is cancelled
(KIP-455; intra-broker: moved back to its dir). The window halves when the injected latency
signal (the brokers' Produce p99, :mod:`remediation.latency`) is above ``backoff_p99_ms`` and
grows by one after ``recover_s`` below it (additive increase, multiplicative decrease), never
above ``window``; an unknown signal holds it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from kafka import TopicPartitionReplica
from pydantic import Field, model_validator

from linkwatch.records import Finding
from remediation.base import Context, Plan, Remediation, RemediationConfig, Step
from remediation.throttle import apply_throttle, clear_throttle
from remediation.view import ClusterView, ReplicaDir, submit_reassignments

log = logging.getLogger(__name__)


class RebalanceConfig(RemediationConfig):
    high_ratio: float = Field(0.85, gt=0, le=1)
    target_ratio: float = Field(0.75, gt=0, le=1)
    capacity_bytes: int | None = Field(None, ge=1)  # override the filesystem size (shared disks)
    max_moves: int = Field(50, ge=1)
    window: int = Field(2, ge=1, le=100)
    move_deadline_s: float = Field(1800.0, gt=0)
    throttle_bytes_per_s: int | None = Field(10 << 20, ge=1024)
    backoff_p99_ms: float = Field(500.0, gt=0)
    recover_s: float = Field(30.0, ge=0)
    poll_s: float = Field(1.0, gt=0)
    allow_inter_broker: bool = True
    # Only replicas of these topics are moved (None: any); usage still counts everything on disk.
    topics: list[str] | None = None
    # Log dirs sharing one device free nothing by moving between them: then set this false.
    allow_intra_broker: bool = True

    @model_validator(mode="after")
    def _order(self) -> RebalanceConfig:
        if self.target_ratio > self.high_ratio:
            raise ValueError(f"target_ratio={self.target_ratio} must not exceed high_ratio={self.high_ratio}")
        return self


@dataclass(frozen=True)
class DiskMove:
    topic: str
    partition: int
    size_bytes: int
    src_broker: int
    src_dir: str
    dst_broker: int
    dst_dir: str
    replicas_before: tuple[int, ...]
    replicas_after: tuple[int, ...]

    @property
    def intra(self) -> bool:
        return self.src_broker == self.dst_broker

    def to_params(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "size_bytes": self.size_bytes,
            "src": [self.src_broker, self.src_dir],
            "dst": [self.dst_broker, self.dst_dir],
            "before": list(self.replicas_before),
            "after": list(self.replicas_after),
        }


def _pick(candidates: list[ReplicaDir], excess: int) -> list[ReplicaDir]:
    """Preference order: the smallest replica covering ``excess`` alone, then largest first."""
    covering = sorted((r for r in candidates if r.size_bytes >= excess), key=lambda r: r.size_bytes)
    rest = sorted((r for r in candidates if r.size_bytes < excess), key=lambda r: -r.size_bytes)
    return covering[:1] + rest + covering[1:]


def _destination(
    r: ReplicaDir,
    view: ClusterView,
    used: dict[tuple[int, str], int],
    cap: dict[tuple[int, str], int],
    replicas: tuple[int, ...],
    cfg: RebalanceConfig,
) -> tuple[int, str] | None:
    def fits(key: tuple[int, str]) -> bool:
        return (used[key] + r.size_bytes) / cap[key] <= cfg.target_ratio

    def emptiest(keys: list[tuple[int, str]]) -> tuple[int, str] | None:
        ok = [k for k in keys if fits(k)]
        return min(ok, key=lambda k: (used[k] / cap[k], k)) if ok else None

    same = (
        emptiest([k for k in used if k[0] == r.broker and k[1] != r.log_dir])
        if cfg.allow_intra_broker
        else None
    )
    if same is not None or not cfg.allow_inter_broker:
        return same
    others = [b for b in replicas if b != r.broker]
    taken_racks = {view.brokers.get(b) for b in others}
    brokers = [
        b
        for b in view.brokers
        if b not in replicas and (view.brokers.get(b) is None or view.brokers.get(b) not in taken_racks)
    ]
    return emptiest([k for k in used if k[0] in brokers])


def plan_moves(view: ClusterView, cfg: RebalanceConfig) -> tuple[list[DiskMove], list[str]]:
    """The moves, fullest dir first, and the notes (dirs that could not be brought down)."""
    cap = {(d.broker, d.path): cfg.capacity_bytes or d.capacity_bytes for d in view.log_dirs}
    used = {(d.broker, d.path): d.used_bytes for d in view.log_dirs}
    in_dir: dict[tuple[int, str], list[ReplicaDir]] = {k: [] for k in used}
    for r in view.replicas:
        if (
            not r.future
            and (r.broker, r.log_dir) in in_dir
            and (r.topic, r.partition) not in view.reassigning
        ):
            in_dir[(r.broker, r.log_dir)].append(r)
    replicas = {k: s.replicas for k, s in view.partitions.items()}
    moves: list[DiskMove] = []
    notes: list[str] = []
    done: set[tuple[int, str]] = set()
    moved: set[tuple[str, int]] = set()
    draining: set[tuple[int, str]] = set()  # above high_ratio once: drained down to target_ratio
    while len(moves) < cfg.max_moves:
        draining |= {k for k in used if used[k] / cap[k] > cfg.high_ratio}
        over = [k for k in draining if k not in done and used[k] / cap[k] > cfg.target_ratio]
        if not over:
            break
        src = max(over, key=lambda k: (used[k] / cap[k], k))
        excess = used[src] - int(cfg.target_ratio * cap[src])
        candidates = [
            r
            for r in in_dir[src]
            if r.size_bytes > 0
            and (r.topic, r.partition) not in moved
            and (cfg.topics is None or r.topic in cfg.topics)
        ]
        move = None
        for r in _pick(candidates, excess):
            current = replicas.get((r.topic, r.partition))
            if current is None:
                continue
            dst = _destination(r, view, used, cap, current, cfg)
            if dst is not None:
                after = (
                    current if dst[0] == r.broker else tuple(dst[0] if b == r.broker else b for b in current)
                )
                move = DiskMove(
                    r.topic, r.partition, r.size_bytes, r.broker, r.log_dir, dst[0], dst[1], current, after
                )
                break
        if move is None:
            done.add(src)
            notes.append(
                f"log dir {src[1]} of broker {src[0]} stays at {used[src] / cap[src]:.0%}: no destination with headroom"
            )
            continue
        moves.append(move)
        moved.add((move.topic, move.partition))
        in_dir[src] = [r for r in in_dir[src] if (r.topic, r.partition) != (move.topic, move.partition)]
        used[src] -= move.size_bytes
        used[(move.dst_broker, move.dst_dir)] += move.size_bytes
        replicas[(move.topic, move.partition)] = move.replicas_after
    return moves, notes


class Window:
    """The sliding window's size: AIMD on a latency signal, bounded by [1, limit]."""

    def __init__(self, limit: int, backoff_ms: float, recover_s: float) -> None:
        self.limit, self.size = limit, limit
        self.backoff_ms, self.recover_s = backoff_ms, recover_s
        self._calm_since: float | None = None
        self._last_cut = float("-inf")

    def update(self, p99_ms: float | None, now: float) -> int:
        if p99_ms is None:  # unknown: hold (neither grow nor cut on a signal we cannot read)
            return self.size
        if p99_ms > self.backoff_ms:
            self._calm_since = None
            if now - self._last_cut >= self.recover_s or self._last_cut == float("-inf"):
                self.size = max(1, self.size // 2)
                self._last_cut = now
        else:
            if self._calm_since is None:
                self._calm_since = now
            if self.size < self.limit and now - self._calm_since >= self.recover_s:
                self.size += 1
                self._calm_since = now
        return self.size


class RebalanceDisksRemediation(Remediation):
    NAME = "rebalance_disks"
    Config = RebalanceConfig
    config: RebalanceConfig

    def plan(self, finding: Finding, view: ClusterView) -> Plan:
        moves, notes = plan_moves(view, self.config)
        steps = tuple(
            Step(
                "move", f"topic-partition:{m.topic}-{m.partition}", m.to_params(), self.config.move_deadline_s
            )
            for m in moves
        )
        moved = sum(m.size_bytes for m in moves)
        reason = f"{len(moves)} moves, {moved} bytes, fullest log dir first" + (
            f"; {'; '.join(notes)}" if notes else ""
        )
        return Plan(self.NAME, finding.subject, reason, steps)

    # -- one move -------------------------------------------------------------------------------

    def execute(self, step: Step, ctx: Context) -> None:
        p = step.params
        dst_broker, dst_dir = p["dst"]
        tpr = TopicPartitionReplica(p["topic"], p["partition"], dst_broker)
        if p["src"][0] == dst_broker:
            _alter_dir(ctx.admin, tpr, dst_dir)
            return
        # Placing the future replica's dir first is best effort: a broker may pick its own dir.
        try:
            ctx.admin.alter_replica_log_dirs({tpr: dst_dir})
        except Exception as e:
            log.info("could not pre-place %s in %s: %s", tpr, dst_dir, e)
        submit_reassignments(ctx.admin, {(p["topic"], p["partition"]): p["after"]})

    def verify(self, step: Step, view: ClusterView) -> bool:
        p = step.params
        tp = (p["topic"], p["partition"])
        if p["src"][0] != p["dst"][0]:
            s = view.partitions.get(tp)
            return tp not in view.reassigning and s is not None and list(s.replicas) == p["after"]
        here = [r for r in view.replicas if (r.topic, r.partition, r.broker) == (*tp, p["dst"][0])]
        return any(r.log_dir == p["dst"][1] and not r.future for r in here) and not any(
            r.future for r in here
        )

    def abandon(self, step: Step, ctx: Context) -> None:
        p = step.params
        if p["src"][0] != p["dst"][0]:
            submit_reassignments(ctx.admin, {(p["topic"], p["partition"]): None})
        else:
            _alter_dir(ctx.admin, TopicPartitionReplica(p["topic"], p["partition"], p["src"][0]), p["src"][1])

    # -- the pipeline ---------------------------------------------------------------------------

    def execute_plan(self, plan: Plan, ctx: Context) -> str:
        """Sliding window over the plan's moves; see the module docstring. Returns the outcome."""
        window = Window(self.config.window, self.config.backoff_p99_ms, self.config.recover_s)
        queue = list(enumerate(plan.steps))
        inflight: dict[int, float] = {}  # step index -> deadline
        outcome = "done"
        while queue or inflight:
            ctx.checkpoint()  # harm or an operator's cancel raise; a lost lease raises at the next write
            size = window.update(ctx.latency_ms(), ctx.clock())
            view = ctx.view()
            for i in list(inflight):
                step = plan.steps[i]
                if self.verify(step, view):
                    inflight.pop(i)
                    ctx.step_status(i, "done")
                    ctx.audit.write("move_done", action=plan.id, step=i, subject=step.subject)
                elif ctx.clock() >= inflight[i]:
                    inflight.pop(i)
                    self.abandon(step, ctx)
                    ctx.step_status(i, "cancelled")
                    ctx.audit.write(
                        "move_cancelled",
                        action=plan.id,
                        step=i,
                        subject=step.subject,
                        reason="past move_deadline_s",
                    )
                    outcome = "partial"
            started = []
            while queue and len(inflight) < size:
                i, step = queue.pop(0)
                self._start(plan, i, step, ctx, view, list(inflight))
                inflight[i] = ctx.clock() + step.deadline_s
                started.append(i)
            if started:
                ctx.audit.write(
                    "window", action=plan.id, size=size, inflight=sorted(inflight), started=started
                )
            if queue or inflight:
                ctx.sleep(self.config.poll_s)
        return outcome

    def _start(
        self, plan: Plan, i: int, step: Step, ctx: Context, view: ClusterView, running: list[int]
    ) -> None:
        """Persist intent, throttle the replicas of every move running (the view may predate the
        ones started in this round, so all of them are listed, never only the new one), send."""
        p = step.params
        ctx.step_status(i, "intent")
        if p["src"][0] != p["dst"][0] and self.config.throttle_bytes_per_s:
            moves = [
                (q["topic"], q["partition"], q["before"], q["after"])
                for q in (plan.steps[j].params for j in [*running, i])
                if q["src"][0] != q["dst"][0]
            ]
            apply_throttle(ctx.admin, view, self.config.throttle_bytes_per_s, moves, ctx.owned(), ctx.record)
        self.execute(step, ctx)
        ctx.step_status(i, "sent")

    def finish(self, action: dict[str, Any], ctx: Context) -> None:
        owned = ctx.owned()
        if owned:
            cleared = clear_throttle(ctx.admin, owned)
            ctx.audit.write("throttle_cleared", action=action["id"], resources=cleared)

    def recover(self, action: dict[str, Any], ctx: Context) -> str:
        """Moves left ``intent``/``sent``: wait for them (``finish``) or cancel them. Moves never
        started: with ``finish``, those still valid (the partition's replicas are still the
        move's ``before``) run through the pipeline now, the others are ``skipped``; with
        ``cancel`` all are ``skipped`` (audited: the next finding plans again). Then this action's
        throttles are cleared."""
        steps = [Step.from_dict(s) for s in action["plan"]["steps"]]
        open_ = [i for i, s in enumerate(action["steps"]) if s["status"] in ("intent", "sent")]
        view = ctx.view()
        notes = []
        for i in open_:
            step = steps[i]
            tp = (step.params["topic"], step.params["partition"])
            if self.verify(step, view):
                ctx.step_status(i, "done")
                notes.append(f"{tp[0]}-{tp[1]} done")
            elif ctx.on_restart == "cancel" or (
                tp not in view.reassigning and step.params["src"][0] != step.params["dst"][0]
            ):
                self.abandon(step, ctx)
                ctx.step_status(i, "cancelled")
                notes.append(f"{tp[0]}-{tp[1]} cancelled")
            elif self.await_step(step, ctx):
                ctx.step_status(i, "done")
                notes.append(f"{tp[0]}-{tp[1]} finished")
            else:
                self.abandon(step, ctx)
                ctx.step_status(i, "cancelled")
                notes.append(f"{tp[0]}-{tp[1]} cancelled at its deadline")
        notes += self._rest(action, steps, ctx)
        self.finish(action, ctx)
        return "; ".join(notes) or "no move was in flight"

    def _rest(self, action: dict[str, Any], steps: list[Step], ctx: Context) -> list[str]:
        """The moves a killed run never started: run the valid ones (``finish``), skip the rest."""
        never = [i for i, s in enumerate(action["steps"]) if s["status"] == "planned"]
        if not never:
            return []
        view = ctx.view()
        valid = []
        for i in never:
            p = steps[i].params
            s = view.partitions.get((p["topic"], p["partition"]))
            if ctx.on_restart == "finish" and s is not None and list(s.replicas) == p["before"]:
                valid.append(i)
            else:
                ctx.step_status(i, "skipped")
        if not valid:
            return [f"{len(never)} moves never started: skipped"]
        rest = Plan(
            self.NAME,
            action["subject"],
            "the moves a killed run never started",
            tuple(steps[i] for i in valid),
            id=action["id"],
        )

        def status(j: int, st: str, **extra: Any) -> None:
            ctx.step_status(valid[j], st, **extra)

        outcome = self.execute_plan(rest, replace(ctx, step_status=status))
        skipped = len(never) - len(valid)
        return [f"{len(valid)} moves never started: run ({outcome})"] + (
            [f"{skipped} skipped"] if skipped else []
        )


def _alter_dir(admin: Any, tpr: TopicPartitionReplica, log_dir: str) -> None:
    result = admin.alter_replica_log_dirs({tpr: log_dir})
    errors = [f"{k}: {v.__name__}" for k, v in result.items() if getattr(v, "errno", 0)]
    if errors:
        from remediation.view import AdminError

        raise AdminError("log dir move refused: " + "; ".join(errors))
