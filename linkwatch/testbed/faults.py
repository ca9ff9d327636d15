"""Faults that make a real broker slow, each reversible, for tests and the demo.

* :class:`PauseDutyCycle` — SIGSTOP/SIGCONT the broker JVM in a duty cycle: every stage of every
  request it handles gets slower, like a long GC or a stuck disk.
* :func:`starve_request_handlers` — set the dynamic per-broker ``num.io.threads`` low, so
  requests wait in the request queue (the RequestQueue stage grows).
* :func:`topic_configs` — topic config overrides (``flush.messages=1``: slow log appends on the
  topics' leaders), deleted on exit whatever they read back as.
* :func:`throttle_replication` — ``leader/follower.replication.throttled.rate`` on a broker and
  throttled replicas ``*`` on topics: followers fall behind, acks=all produce waits (Remote).
* :func:`stall_follower` — a broker made a follower (not leader) of topics' partitions and paused
  in a duty cycle: acks=all produce waits on it in the leaders' Remote stage.
* :func:`slow_log_appends` — per-broker ``log.flush.interval.messages=1``: every append on that
  broker only is flushed, like a slow disk (its Local stage grows).
* :func:`throttle_disk_writes` — the broker JVM's writes to its disk capped (cgroup v1 blkio);
  :func:`slow_disk`: both, a slow disk of its own on a machine where the brokers share one.
* :func:`starve_cpu` — the broker JVM pinned to one CPU that spinning processes share: its
  RequestQueue and Local stages grow.
* :class:`SlowClient` — a consumer that stalls before reading each fetch response: the broker's
  Send stage grows for that client id only.

Each is a context manager and also registers itself in :data:`ACTIVE`, so a test teardown (or
Ctrl-C in the demo) calls :func:`revert_all` and nothing stays broken.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType

from linkwatch.errors import SetupError

_lock = threading.Lock()
ACTIVE: dict[int, tuple[str, Callable[[], None]]] = {}
_next_id = 0


def _register(name: str, undo: Callable[[], None]) -> int:
    global _next_id
    with _lock:
        _next_id += 1
        ACTIVE[_next_id] = (name, undo)
        return _next_id


def _unregister(token: int) -> None:
    with _lock:
        ACTIVE.pop(token, None)


def revert_all() -> list[str]:
    """Undo every active fault (newest first); returns their names. Never raises."""
    with _lock:
        items = sorted(ACTIVE.items(), reverse=True)
        ACTIVE.clear()
    for _, (_name, undo) in items:
        with contextlib.suppress(Exception):
            undo()
    return [name for _, (name, _undo) in items]


@dataclass
class PauseDutyCycle:
    """Stop the process for ``pause_ms`` out of every ``period_ms`` until stopped.

    The pause is real: the JVM makes no progress, so requests arriving during it see their
    queue/local/send stages stretched. ``stop`` always leaves the process running (SIGCONT).

    Two ways to run the cycle. ``own_process=True``: in a child process
    (:mod:`linkwatch.testbed.pause_cycle`) on an absolute schedule, so pauses come on time
    whatever the caller does (measured: resumes at most 15-70 ms late under the recovery bench's
    load). The default, a thread of the caller, is what the slow-broker tests and the demo were
    tuned with; its wake-ups wait for the caller's interpreter, so on a busy one its pauses run
    long and some seconds have none (a recovery-bench round had 10 s windows without a pause).
    Those tests move to ``own_process`` once the rules are checked against on-time pauses:
    with them, a broker paused 400 of every 1000 ms while it leads makes every broker wait in
    ``remote`` in some 2 s windows, which the analyzer's e2e test read as cluster-wide.

    After ``stop``, ``cycles`` is the number of pauses completed and ``max_late_ms`` the worst
    lateness of a resume against its schedule.
    """

    pid: int
    pause_ms: int = 400
    period_ms: int = 1000
    own_process: bool = False
    _proc: subprocess.Popen[str] | None = field(default=None, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _token: int = field(default=0, init=False)
    cycles: int = field(default=0, init=False)
    max_late_ms: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        if not 0 < self.pause_ms < self.period_ms:
            raise ValueError(f"pause_ms={self.pause_ms} must be > 0 and < period_ms={self.period_ms}")

    def start(self) -> PauseDutyCycle:
        self._token = _register(f"pause pid {self.pid}", self.stop)
        if self.own_process:
            cmd = [
                sys.executable,
                "-m",
                "linkwatch.testbed.pause_cycle",
                str(self.pid),
                str(self.pause_ms),
                str(self.period_ms),
            ]
            self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        else:
            self._thread = threading.Thread(target=self._run, name=f"pause-{self.pid}", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                os.kill(self.pid, signal.SIGSTOP)
                resume_at = time.monotonic() + self.pause_ms / 1000
                self._stop.wait(self.pause_ms / 1000)
                os.kill(self.pid, signal.SIGCONT)
                self.max_late_ms = max(self.max_late_ms, (time.monotonic() - resume_at) * 1000)
                self.cycles += 1
                self._stop.wait((self.period_ms - self.pause_ms) / 1000)
        except ProcessLookupError:
            pass
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGCONT)

    @property
    def running(self) -> bool:
        """The cycle is running (started and not stopped; its process or thread alive)."""
        if self.own_process:
            return self._proc is not None and self._proc.poll() is None
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        proc, self._proc = self._proc, None
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                out, _ = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            fields = (out or "").split()
            if len(fields) == 4 and fields[0] == "cycles" and fields[2] == "max_late_ms":
                self.cycles, self.max_late_ms = int(fields[1]), float(fields[3])
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGCONT)
        _unregister(self._token)

    def __enter__(self) -> PauseDutyCycle:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _alter(admin, resources: list[ConfigResource]) -> None:
    """Apply config changes; raise SetupError naming the resource if the broker refuses any."""
    # raise_on_unknown=False: the throttle rates are valid dynamic configs kafka-python does not list.
    result = admin.alter_configs(resources, raise_on_unknown=False)  # {"broker": {"2": "OK" | "<error>"}}
    errors = [
        f"{rtype} {name}: {outcome}"
        for rtype, by_name in result.items()
        for name, outcome in by_name.items()
        if outcome != "OK"
    ]
    if errors:
        raise SetupError("the broker refused a config change: " + "; ".join(errors))


def broker_config(admin, broker_id: int, key: str) -> str | None:
    """Current value of one broker config (dynamic overrides included), for checking faults."""
    return _read_config(admin, ConfigResourceType.BROKER, str(broker_id), key)


def topic_config(admin, topic: str, key: str) -> str | None:
    """Current value of one topic config (its own override, else what it inherits)."""
    return _read_config(admin, ConfigResourceType.TOPIC, topic, key)


def _read_config(admin, rtype: ConfigResourceType, name: str, key: str) -> str | None:
    entry = _read_entry(admin, rtype, name, key)
    return entry.get("value") if isinstance(entry, dict) else entry


def _read_entry(admin, rtype: ConfigResourceType, name: str, key: str) -> Any:
    """The describe-configs entry of one key: a dict with ``value`` and ``config_source``."""
    result = admin.describe_configs([ConfigResource(rtype, name, [key])], config_filter="all")
    by_name = next(iter(result.values()), {}) if result else {}
    return by_name.get(name, {}).get(key)


# Where a config set on the resource itself comes from; anything else is a default or inherited.
_OWN_SOURCE = {
    ConfigResourceType.BROKER: "DYNAMIC_BROKER_CONFIG",
    ConfigResourceType.TOPIC: "DYNAMIC_TOPIC_CONFIG",
}


def _in_force(entry: Any, rtype: ConfigResourceType, want: str | None) -> bool:
    """Whether the broker reports ``want`` for a key (None: the override is gone).

    A deleted override reads back as whatever is inherited, which for some keys is a value, not
    None: a topic's ``flush.messages`` reads back as Long.MAX_VALUE. So a deletion is in force
    when the entry's source is no longer the resource's own dynamic config."""
    value = entry.get("value") if isinstance(entry, dict) else entry
    if want is not None:
        return value == want
    if not value:
        return True
    return isinstance(entry, dict) and entry.get("config_source") not in (None, _OWN_SOURCE.get(rtype))


def _apply(admin, rtype: ConfigResourceType, names: list[str], configs: dict[str, str | None]) -> None:
    """Set (or, for None, delete) configs and wait until the brokers report the new values.

    Dynamic configs travel through the metadata log, so an AlterConfigs response comes before
    the change is in force; callers (and the next step of a fault) rely on it being in force.
    """
    ops = {k: (AlterConfigOp.DELETE, None) if v is None else v for k, v in configs.items()}
    _alter(admin, [ConfigResource(rtype, n, ops) for n in names])
    deadline = time.monotonic() + 15
    for name in names:
        for key, want in configs.items():
            while not _in_force(got := _read_entry(admin, rtype, name, key), rtype, want):
                if time.monotonic() > deadline:
                    raise SetupError(
                        f"{rtype.name.lower()} {name} still reports {key}={got!r}, expected "
                        f"{'its default' if want is None else repr(want)}"
                    )
                time.sleep(0.1)


@contextlib.contextmanager
def topic_configs(admin, topics: list[str], configs: dict[str, str]) -> Iterator[None]:
    """Override topic configs (e.g. ``flush.messages=1``: every append is flushed, so log
    appends on the topics' leaders become slow) and delete the overrides on exit."""
    if not topics or not configs:
        raise ValueError(f"topic_configs needs topics and configs, got {topics!r}, {configs!r}")

    def undo() -> None:
        _apply(admin, ConfigResourceType.TOPIC, topics, dict.fromkeys(configs))

    token = _register(f"topic configs {sorted(configs)} on {len(topics)} topics", undo)
    try:
        _apply(admin, ConfigResourceType.TOPIC, topics, dict(configs))
        yield
    finally:
        _unregister(token)
        undo()


def _thread_steps(current: int, target: int) -> list[int]:
    """Kafka accepts a dynamic thread-count change only within [current/2, current*2]."""
    steps = []
    while current != target:
        current = max(target, (current + 1) // 2) if target < current else min(target, current * 2)
        steps.append(current)
    return steps


def _set_io_threads(admin, broker_id: int, current: int, target: int) -> None:
    # The broker validates each step against the value in force, hence _apply's wait.
    for n in _thread_steps(current, target):
        _apply(admin, ConfigResourceType.BROKER, [str(broker_id)], {"num.io.threads": str(n)})


@contextlib.contextmanager
def starve_request_handlers(admin, broker_id: int, threads: int = 1) -> Iterator[None]:
    """Run broker ``broker_id`` with only ``threads`` I/O handler threads; restore on exit.

    Requests then wait for a handler: the RequestQueue stage and RequestHandlerAvgIdlePercent
    show it. The original count is restored step by step (Kafka allows halving/doubling only).
    """
    original = int(broker_config(admin, broker_id, "num.io.threads") or 8)
    _set_io_threads(admin, broker_id, original, threads)

    def undo() -> None:
        _set_io_threads(admin, broker_id, threads, original)

    token = _register(f"starve broker {broker_id}", undo)
    try:
        yield
    finally:
        _unregister(token)
        undo()


@contextlib.contextmanager
def throttle_replication(admin, broker_id: int, rate_bytes_per_s: int, topics: list[str]) -> Iterator[None]:
    """Cap replication into and out of ``broker_id`` at ``rate_bytes_per_s`` for ``topics``."""
    if rate_bytes_per_s <= 0:
        raise ValueError(f"rate_bytes_per_s={rate_bytes_per_s} must be > 0")
    rate = str(rate_bytes_per_s)
    keys = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
    replicas = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")

    broker = [str(broker_id)]

    def undo() -> None:
        _apply(admin, ConfigResourceType.BROKER, broker, dict.fromkeys(keys))
        _apply(admin, ConfigResourceType.TOPIC, topics, dict.fromkeys(replicas))

    token = _register(f"throttle broker {broker_id}", undo)
    try:
        _apply(admin, ConfigResourceType.BROKER, broker, dict.fromkeys(keys, rate))
        _apply(admin, ConfigResourceType.TOPIC, topics, dict.fromkeys(replicas, "*"))
        yield
    finally:
        _unregister(token)
        undo()


class DeleteMidPass:
    """The real admin client with a fault at a real point of a lag pass: right after ListGroups
    the ``groups`` are deleted (they vanish mid-pass); right after the committed offsets are read
    the ``topics`` are deleted (their partitions are committed but gone). Once each; ``groups``
    may be empty."""

    def __init__(self, admin: Any, topics: list[str], groups: list[str]) -> None:
        self._admin, self.topics, self.groups = admin, topics, groups
        self.groups_done = self.topics_done = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)  # everything else is the real client

    def list_groups(self, *a: Any, **kw: Any) -> Any:
        out = self._admin.list_groups(*a, **kw)
        if not self.groups_done:
            self.groups_done = True
            if self.groups:
                self._admin.delete_groups(self.groups)
        return out

    def list_group_offsets(self, *a: Any, **kw: Any) -> Any:
        out = self._admin.list_group_offsets(*a, **kw)
        if not self.topics_done:
            self.topics_done = True
            self._admin.delete_topics(self.topics)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if not {t["name"] for t in self._admin.describe_topics()} & set(self.topics):
                    break
                time.sleep(0.2)
        return out


def evict_page_cache(path: os.PathLike[str] | str) -> None:
    """Write ``path`` back and drop its pages from the page cache (``POSIX_FADV_DONTNEED``), so
    the next read of it comes from disk: how the cold-read tests make a segment cold. Linux only."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def restore_preferred_leaders(admin: Any, topics: list[str], timeout_s: float = 60.0) -> dict[str, list[int]]:
    """Make every partition of ``topics`` led by its preferred (first) replica again and wait for
    it. A fault that stalls a broker long enough (or a restart) moves its leadership to peers, and
    a later fault on that broker would then slow nobody's requests: tests that fault a broker
    twice on one cluster call this first. Returns ``{topic: [leader per partition]}``; raises
    :class:`TimeoutError` naming the partitions still led elsewhere."""
    deadline = time.monotonic() + timeout_s
    elected_at = -1.0
    while True:
        wrong: list[str] = []
        leaders: dict[str, list[int]] = {}
        for meta in admin.describe_topics(topics):
            parts = sorted(meta.get("partitions") or [], key=lambda p: p["partition_index"])
            leaders[meta["name"]] = [p.get("leader_id", -1) for p in parts]
            if not parts:  # no metadata (yet): not "every partition led as preferred"
                wrong.append(f"{meta['name']} (no partitions in the metadata)")
            wrong += [
                f"{meta['name']}-{p['partition_index']} (leader {p.get('leader_id')}, preferred {p['replica_nodes'][0]})"
                for p in parts
                if p.get("replica_nodes") and p.get("leader_id") != p["replica_nodes"][0]
            ]
        if not wrong:
            return leaders
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"not led by their preferred replica after {timeout_s:.0f} s: {', '.join(wrong)}"
            )
        if time.monotonic() - elected_at > 10.0:  # a follower out of the ISR cannot lead yet: ask again
            admin.elect_leaders(0, topics, raise_errors=False)
            elected_at = time.monotonic()
        time.sleep(0.5)


def _partitions(admin: Any, topics: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """``{(topic, partition): metadata}`` of every partition of ``topics``."""
    return {
        (meta["name"], p["partition_index"]): p
        for meta in admin.describe_topics(topics)
        for p in meta.get("partitions") or []
    }


def _reorder_replicas(admin: Any, orders: dict[tuple[str, int], list[int]], timeout_s: float = 30.0) -> None:
    """Give partitions these replica orders (same replica sets: nothing is copied, the change is
    immediate) and wait until the metadata shows them; raise SetupError naming the laggards."""
    from kafka import TopicPartition

    if not orders:
        return
    admin.alter_partition_reassignments({TopicPartition(t, p): r for (t, p), r in orders.items()})
    topics = sorted({t for t, _ in orders})

    def wrong() -> list[str]:
        meta = _partitions(admin, topics)
        return [f"{t}-{p}" for (t, p), r in orders.items() if meta.get((t, p), {}).get("replica_nodes") != r]

    _wait_until_none(
        wrong, timeout_s, lambda left: f"replica order not applied after {timeout_s:.0f} s: {left}"
    )


def _wait_in_sync(admin: Any, broker_id: int, topics: list[str], timeout_s: float) -> None:
    def out() -> list[str]:
        return [
            f"{t}-{p}" for (t, p), m in _partitions(admin, topics).items() if broker_id not in m["isr_nodes"]
        ]

    _wait_until_none(
        out, timeout_s, lambda left: f"broker {broker_id} is not in the ISR of {left} after {timeout_s:.0f} s"
    )


def _wait_until_none(
    laggards: Callable[[], list[str]], timeout_s: float, message: Callable[[str], str]
) -> None:
    """Poll ``laggards`` every 0.2 s until it returns nothing; past ``timeout_s`` raise SetupError
    with ``message`` of the ones left (comma-separated)."""
    deadline = time.monotonic() + timeout_s
    while left := laggards():
        if time.monotonic() > deadline:
            raise SetupError(message(", ".join(left)))
        time.sleep(0.2)


@contextlib.contextmanager
def stall_follower(
    admin: Any,
    broker_id: int,
    pid: int,
    topics: list[str],
    pause_ms: int = 400,
    period_ms: int = 1000,
    timeout_s: float = 60.0,
    own_process: bool = False,
) -> Iterator[dict[str, list[int]]]:
    """Stall broker ``broker_id`` (JVM ``pid``) as a **follower** of every partition of ``topics``.

    Each partition's replicas are reordered (same set, nothing copied) so that ``broker_id`` comes
    last, its new first replica is elected leader, and once ``broker_id`` is in every ISR it is
    paused in a :class:`PauseDutyCycle`: acks=all produce to those partitions then waits on it in
    the leaders' Remote stage, while it leads none of them. Yields ``{topic: [leader per
    partition]}``. On exit the pause stops, the original replica orders come back and the
    preferred leaders are elected again. Keep ``pause_ms`` well under ``replica.lag.time.max.ms``
    (30 s) or the follower leaves the ISR and nobody waits on it any more. ``own_process``: as
    :class:`PauseDutyCycle`'s (pauses on time whatever the caller does).
    """
    if not topics:
        raise ValueError("stall_follower needs topics")
    parts = _partitions(admin, topics)
    for t in topics:
        if not any(key[0] == t for key in parts):
            raise SetupError(f"stall_follower: topic {t} has no partitions in the metadata (does it exist?)")
    original = {key: list(m["replica_nodes"]) for key, m in parts.items()}
    bad = [f"{t}-{p} (replicas {r})" for (t, p), r in original.items() if broker_id not in r or len(r) < 2]
    if bad:
        raise SetupError(
            f"broker {broker_id} cannot be a follower of {', '.join(bad)}: it must be one of 2+ replicas"
        )
    moved = {
        k: [b for b in r if b != broker_id] + [broker_id] for k, r in original.items() if r[-1] != broker_id
    }
    pause = PauseDutyCycle(pid, pause_ms=pause_ms, period_ms=period_ms, own_process=own_process)

    def undo() -> None:
        pause.stop()
        _reorder_replicas(admin, {k: original[k] for k in moved}, timeout_s)
        restore_preferred_leaders(admin, topics, timeout_s)

    token = _register(f"stall follower {broker_id}", undo)
    try:
        _reorder_replicas(admin, moved, timeout_s)
        leaders = restore_preferred_leaders(admin, topics, timeout_s)
        _wait_in_sync(admin, broker_id, topics, timeout_s)
        pause.start()
        yield leaders
    finally:
        _unregister(token)
        undo()


@contextlib.contextmanager
def slow_log_appends(admin: Any, broker_id: int) -> Iterator[None]:
    """Make every log append on broker ``broker_id`` flush to disk (per-broker dynamic
    ``log.flush.interval.messages=1``), like a slow disk on that broker only: its Produce Local
    stage grows, and so do its follower appends (acks=all to peers' partitions waits on it).

    ``log.flush.interval.messages`` is a cluster-wide dynamic config, which Kafka also accepts
    per broker; it reaches every log of that broker whose topic has no ``flush.messages``
    override of its own. The per-broker override is deleted on exit. Costs nothing on tmpfs.
    """
    broker = [str(broker_id)]
    key = "log.flush.interval.messages"

    def undo() -> None:
        _apply(admin, ConfigResourceType.BROKER, broker, {key: None})

    token = _register(f"slow log appends on broker {broker_id}", undo)
    try:
        _apply(admin, ConfigResourceType.BROKER, broker, {key: "1"})
        yield
    finally:
        _unregister(token)
        undo()


BLKIO_ROOT = "/sys/fs/cgroup/blkio"  # the cgroup v1 blkio hierarchy


def block_device(path: os.PathLike[str] | str) -> str:
    """``MAJ:MIN`` of the whole disk that holds ``path`` (a partition's parent disk: the blkio
    throttle takes disks only). SetupError when ``path`` is on no block device (tmpfs, overlay)."""
    dev = os.stat(path).st_dev
    if os.major(dev) == 0:
        raise SetupError(f"{path} is on no block device (tmpfs or overlay?): no disk to throttle")
    sysfs = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}"
    if os.path.exists(f"{sysfs}/partition"):
        with open(f"{sysfs}/../dev") as f:
            return f.read().strip()
    return f"{os.major(dev)}:{os.minor(dev)}"


def blkio_cgroup(pid: int) -> str:
    """The blkio cgroup ``pid`` is in (``/`` for the root), from ``/proc/PID/cgroup``."""
    try:
        with open(f"/proc/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise SetupError(f"no process {pid}: is the broker running?") from None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "blkio" in controllers.split(","):
            return path
    raise SetupError(f"process {pid} is in no cgroup v1 blkio hierarchy (cgroup v2 only?)")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


@contextlib.contextmanager
def throttle_disk_writes(
    pid: int, path: os.PathLike[str] | str, write_iops: int, blkio_root: str = BLKIO_ROOT
) -> Iterator[str]:
    """Cap process ``pid``'s writes to the disk that holds ``path`` at ``write_iops`` a second:
    the process (every thread) moves into a cgroup of its own, below its own blkio cgroup, with
    ``blkio.throttle.write_iops_device``. Its fsyncs wait for their turn, its peers' do not: a
    slow disk of its own on a machine where the brokers share one. Yields the cgroup's folder.

    Buffered writes are written back by the kernel's flusher threads, which cgroup v1 does not
    charge to the process: pair it with :func:`slow_log_appends`, so that appends flush in the
    broker's request handler threads (its Produce Local stage). On exit the process goes back to
    the cgroup it was in and the new one is removed. Needs root and the cgroup v1 blkio controller
    (SetupError otherwise, naming which)."""
    if not 1 <= write_iops <= 1_000_000:
        raise ValueError(f"write_iops={write_iops} must be between 1 and 1000000")
    device = block_device(path)
    parent = f"{blkio_root.rstrip('/')}{blkio_cgroup(pid)}".rstrip("/")
    if not os.access(f"{parent}/cgroup.procs", os.W_OK):
        raise SetupError(f"cannot write {parent}/cgroup.procs: root and cgroup v1 blkio are needed")
    group = f"{parent}/linkwatch-slow-disk-{pid}"

    def undo() -> None:
        if not os.path.isdir(group):
            return
        with contextlib.suppress(OSError):  # ESRCH: the process is gone, nothing to move back
            _write(f"{parent}/cgroup.procs", str(pid))
        for _ in range(50):  # tasks leave asynchronously: rmdir is EBUSY until they have
            try:
                os.rmdir(group)
                return
            except OSError:
                time.sleep(0.1)
        raise SetupError(f"{group} still has tasks after 5 s: remove it by hand")

    token = _register(f"disk writes of pid {pid} capped at {write_iops}/s", undo)
    try:
        os.makedirs(group, exist_ok=True)
        _write(f"{group}/blkio.throttle.write_iops_device", f"{device} {write_iops}")
        _write(f"{group}/cgroup.procs", str(pid))
        yield group
    finally:
        _unregister(token)
        undo()


@contextlib.contextmanager
def slow_disk(
    admin: Any, broker_id: int, pid: int, path: os.PathLike[str] | str, write_iops: int
) -> Iterator[str]:
    """A slow disk of broker ``broker_id``'s own: every append on it flushed
    (:func:`slow_log_appends`) and its JVM ``pid``'s writes to the disk that holds ``path`` (a
    log dir) capped at ``write_iops`` a second (:func:`throttle_disk_writes`), so its Produce
    Local stage grows and its peers' do not, though the brokers share one disk. Yields the
    cap's cgroup folder. Both are undone on exit."""
    with slow_log_appends(admin, broker_id), throttle_disk_writes(pid, path, write_iops) as group:
        yield group


def _thread_ids(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        raise SetupError(f"no process {pid}: is the broker running?") from None


def _set_thread_affinity(pid: int, mask: Callable[[int], set[int]]) -> dict[int, set[int]]:
    """Set ``mask(tid)`` on every thread of ``pid`` (affinity is per thread on Linux, and a JVM is
    many threads), again until no new thread appeared; returns each thread's mask before."""
    before: dict[int, set[int]] = {}
    while todo := [t for t in _thread_ids(pid) if t not in before]:
        for tid in todo:
            try:
                before[tid] = os.sched_getaffinity(tid)
                os.sched_setaffinity(tid, mask(tid))
            except ProcessLookupError:  # the thread ended meanwhile
                before[tid] = set()
    return {t: m for t, m in before.items() if m}


def _burn(cpu: int, parent: int, max_s: float) -> None:
    """Spin on ``cpu`` until the parent is gone or ``max_s`` passed (bounded even if the parent
    is killed before it can stop us). A session of its own: with sched autogroup on (the Linux
    default) CPU time is shared per session first, and a burner in the test's session would take
    the JVM's core only as one group, however many burners there are."""
    os.setsid()
    os.sched_setaffinity(0, {cpu})
    deadline = time.monotonic() + max_s
    while os.getppid() == parent and time.monotonic() < deadline:
        for _ in range(100_000):
            pass


@contextlib.contextmanager
def starve_cpu(
    pid: int, busy_processes: int = 3, cpu: int | None = None, max_s: float = 600.0
) -> Iterator[int]:
    """Pin every thread of the broker JVM ``pid`` to one CPU (``cpu``, default the highest one it
    may use) and run ``busy_processes`` spinning processes pinned to the same CPU, so the broker
    gets about 1/(busy_processes + 1) of one core: its RequestQueue and Local stages grow.
    Yields the CPU. On exit the spinners are killed and every thread gets back the affinity it
    had (threads started meanwhile get the process's original mask). Spinners also stop by
    themselves after ``max_s`` or when this process is gone."""
    import multiprocessing

    if not 1 <= busy_processes <= 8:
        raise ValueError(f"busy_processes={busy_processes} must be between 1 and 8")
    allowed = os.sched_getaffinity(pid) if os.path.exists(f"/proc/{pid}") else set()
    if not allowed:
        raise SetupError(f"no process {pid}: is the broker running?")
    cpu = max(allowed) if cpu is None else cpu
    if cpu not in allowed or cpu not in os.sched_getaffinity(0):
        raise SetupError(f"cpu {cpu} is not usable by both pid {pid} ({sorted(allowed)}) and this process")
    before: dict[int, set[int]] = {}
    procs: list[Any] = []

    def undo() -> None:
        for p in procs:
            p.kill()
        for p in procs:
            p.join(timeout=5)
        with contextlib.suppress(SetupError):
            _set_thread_affinity(pid, lambda tid: before.get(tid, allowed))

    token = _register(f"starve cpu of pid {pid}", undo)
    try:
        before = _set_thread_affinity(pid, lambda tid: {cpu})
        ctx = multiprocessing.get_context("fork")  # the spinner needs nothing of this process
        for i in range(busy_processes):
            proc = ctx.Process(
                target=_burn, args=(cpu, os.getpid(), max_s), name=f"burn-{cpu}-{i}", daemon=True
            )
            proc.start()
            procs.append(proc)
        yield cpu
    finally:
        _unregister(token)
        undo()


@dataclass
class SlowClient:
    """A consumer that fetches from one broker and then does not read its socket for
    ``stall_ms`` before taking the response, again and again until stopped.

    It speaks the Fetch protocol itself over a raw socket with a receive buffer of
    ``recv_buffer_bytes``, so a response larger than that buffer plus the broker's send buffer
    (``socket.send.buffer.bytes``, 100 kB by default) cannot be written out while it stalls: the
    broker's Send stage (``sendTimeMs``) of this client's fetches grows to about ``stall_ms``, and
    nobody else's. The partition must hold that much data from ``offset``; :attr:`response_bytes`
    says what came back. Its ``client_id`` is what the request log shows. ``stop`` closes it.
    """

    host: str
    port: int
    topic: str
    partition: int = 0
    client_id: str = "linkwatch-slow-client"
    stall_ms: int = 500
    max_bytes: int = 1 << 20
    recv_buffer_bytes: int = 4096
    offset: int = 0
    fetches: int = field(default=0, init=False)
    response_bytes: int = field(default=0, init=False)
    error: str = field(default="", init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _sock: Any = field(default=None, init=False)
    _token: int = field(default=0, init=False)

    FETCH_VERSION = 11  # topics by name (v13+ wants topic ids); Kafka 4.x serves v4 and later

    def __post_init__(self) -> None:
        if self.stall_ms <= 0 or self.max_bytes <= 0 or self.recv_buffer_bytes <= 0:
            raise ValueError(
                f"stall_ms={self.stall_ms}, max_bytes={self.max_bytes} and "
                f"recv_buffer_bytes={self.recv_buffer_bytes} must be > 0"
            )

    def start(self) -> SlowClient:
        import socket

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect: the receive window is negotiated at the handshake.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer_bytes)
        sock.settimeout(30)
        try:
            sock.connect((self.host, self.port))
        except OSError as e:
            sock.close()
            raise SetupError(f"slow client cannot connect to broker {self.host}:{self.port}: {e}") from None
        self._sock = sock
        self._token = _register(f"slow client {self.client_id}", self.stop)
        self._thread = threading.Thread(target=self._run, name=f"slow-client-{self.port}", daemon=True)
        self._thread.start()
        return self

    def _request(self, correlation_id: int) -> bytes:
        from kafka.protocol.consumer.fetch import FetchRequest

        part = FetchRequest.FetchTopic.FetchPartition(
            partition=self.partition, fetch_offset=self.offset, partition_max_bytes=self.max_bytes
        )
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session: every fetch asks for the whole range again
            topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[part])],
            forgotten_topics_data=[],
            rack_id="",
        )
        req.API_VERSION = self.FETCH_VERSION
        req.with_header(correlation_id=correlation_id, client_id=self.client_id)
        return bytes(req.encode(header=True, framed=True))

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(min(n - len(buf), 1 << 16))
            if not chunk:
                raise ConnectionError(f"broker {self.host}:{self.port} closed the connection")
            buf += chunk
        return bytes(buf)

    def _run(self) -> None:
        correlation_id = 0
        try:
            while not self._stop.is_set():
                correlation_id += 1
                self._sock.sendall(self._request(correlation_id))
                if self._stop.wait(self.stall_ms / 1000):
                    break
                size = int.from_bytes(self._read_exactly(4), "big")
                self._read_exactly(size)
                self.response_bytes = size
                self.fetches += 1
        except OSError as e:  # closed by stop(), or the broker went away: say which
            if not self._stop.is_set():
                self.error = f"{type(e).__name__}: {e}"

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        _unregister(self._token)

    def __enter__(self) -> SlowClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
