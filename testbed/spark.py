"""A real Spark standalone cluster on loopback: one master and N workers, for submitting to.

The daemons are started from the pyspark installation's own ``bin/spark-class``
(``org.apache.spark.deploy.master.Master`` and ``…deploy.worker.Worker``), so the cluster runs
exactly the Spark the analyzer's driver runs. Each worker offers ``cores_per_worker`` cores
and ``memory_mb_per_worker`` MB to executors (1 core and 1 GiB by default: two workers fit a
2-core machine beside a Kafka test cluster); each daemon's own heap is ``daemon_heap_mb``.

Ports: the master listens on ``base_port`` (RPC, ``spark://127.0.0.1:<base_port>``) and
``base_port + 1`` (its web UI, whose ``/json/`` says which workers are registered); worker i
on ``base_port + 10*i`` (RPC) and ``+1`` (web UI). Everything binds 127.0.0.1: the RPC
endpoints by ``--host``, the web UIs and the executors (which inherit the workers'
environment) by ``SPARK_LOCAL_IP``; the master's REST submission server is off.

State lives in ``<root>/spark.json``; ``down`` reads it, so it works from another process and
is safe to run twice. Every daemon is started in its own session, and the executors a worker
launches stay in its process group, so ``down`` stops them all (and checks by pid that none
is left). Logs: ``<root>/master/master.log``, ``<root>/worker-<i>/worker.log``; executors'
stdout/stderr under ``<root>/worker-<i>/work/<app>/<executor>/``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from linkwatch.errors import SetupError
from testbed.cluster import (
    HOST,
    free_base_port,
    pid_alive,
    port_in_use,
    refuse_stale_root,
    require_java,
)

DEFAULT_ROOT = Path(os.environ.get("LINKWATCH_SPARK_DIR", "/tmp/linkwatch-spark"))
DEFAULT_BASE_PORT = 17070
STATE_FILE = "spark.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# Read by the daemons through --properties-file. Spark's own defaults for everything else.
DAEMON_PROPERTIES = {
    "spark.master.rest.enabled": "false",  # no submission server on 6066
    "spark.ui.reverseProxy": "false",
    "spark.worker.cleanup.enabled": "false",  # the work dirs hold the executors' logs
}


def daemon_ports(base_port: int, index: int) -> tuple[int, int]:
    """(RPC port, web UI port) of the master (index 0) or of worker ``index``."""
    start = base_port + 10 * index
    return start, start + 1


@dataclass
class DaemonState:
    name: str  # "master", "worker-1", …
    pid: int
    port: int
    ui_port: int
    log: str

    def alive(self) -> bool:
        return pid_alive(self.pid)


@dataclass
class SparkClusterSpec:
    root: Path = DEFAULT_ROOT
    base_port: int = DEFAULT_BASE_PORT
    workers: int = 2
    cores_per_worker: int = 1
    memory_mb_per_worker: int = 1024
    daemon_heap_mb: int = 256
    # JVM arguments of the master and the workers (SPARK_DAEMON_JAVA_OPTS; split like a shell line,
    # never run by one). The executors' are the application's (spark.executor.extraJavaOptions).
    daemon_jvm_args: str = ""
    start_timeout_s: float = 120.0

    def validate(self) -> None:
        if not 1 <= self.workers <= 4:
            raise SetupError(f"workers={self.workers}: the local Spark cluster runs 1 to 4 workers")
        cpus = os.cpu_count() or 1
        if not 1 <= self.cores_per_worker <= cpus:
            raise SetupError(
                f"cores_per_worker={self.cores_per_worker}: choose 1 to {cpus} (this machine's cores)"
            )
        if not 512 <= self.memory_mb_per_worker <= 8192:
            raise SetupError(
                f"memory_mb_per_worker={self.memory_mb_per_worker}: choose 512 to 8192 MB "
                f"(an executor takes 1024 MB unless spark.executor.memory says less)"
            )
        if not 128 <= self.daemon_heap_mb <= 1024:
            raise SetupError(f"daemon_heap_mb={self.daemon_heap_mb}: choose 128 to 1024 MB")
        if not 1024 <= self.base_port <= 65535 - 10 * (self.workers + 1):
            raise SetupError(f"base_port={self.base_port}: choose a port between 1024 and 65000")


@dataclass
class SparkClusterState:
    root: str
    spark_version: str
    master: DaemonState
    workers: list[DaemonState]
    started_at: float

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.master.port}"

    @property
    def master_ui(self) -> str:
        return f"http://{HOST}:{self.master.ui_port}"

    @property
    def daemons(self) -> list[DaemonState]:
        return [self.master, *self.workers]

    def save(self) -> None:
        path = Path(self.root) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, root: Path) -> SparkClusterState | None:
        path = root / STATE_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        master = DaemonState(**raw.pop("master"))
        workers = [DaemonState(**w) for w in raw.pop("workers")]
        return cls(master=master, workers=workers, **raw)


def find_free_base_port(workers: int = 2, start: int = 30000, stop: int = 60000) -> int:
    """A base port whose whole block of daemon ports is free now (tests running side by side)."""
    return free_base_port(
        lambda base: [p for i in range(workers + 1) for p in daemon_ports(base, i)], start, stop
    )


def spark_home() -> Path:
    """The pyspark installation: its ``bin/spark-class`` and ``jars/`` are the cluster's Spark."""
    import pyspark

    return Path(pyspark.__file__).parent


def master_json(ui_port: int, timeout_s: float = 2.0) -> dict[str, Any] | None:
    """The master's view (``/json/``: status, workers, applications), or None if it does not
    answer yet."""
    try:
        with urllib.request.urlopen(f"http://{HOST}:{ui_port}/json/", timeout=timeout_s) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def alive_worker_ports(view: dict[str, Any] | None) -> set[int]:
    """RPC ports of the workers the master lists as ALIVE."""
    if not view or view.get("status") != "ALIVE":
        return set()
    return {int(w["port"]) for w in view.get("workers", []) if w.get("state") == "ALIVE"}


class SparkStandalone:
    """Start, stop and inspect a local standalone cluster rooted at ``spec.root``."""

    def __init__(self, spec: SparkClusterSpec | None = None) -> None:
        self.spec = spec or SparkClusterSpec()
        self.root = Path(self.spec.root)

    # -- public -----------------------------------------------------------------------------
    def state(self) -> SparkClusterState | None:
        return SparkClusterState.load(self.root)

    def up(self) -> SparkClusterState:
        """Start the master and the workers; return once the master lists every worker ALIVE."""
        import pyspark

        spec = self.spec
        spec.validate()
        self._refuse_stale()
        home = spark_home()
        if not os.environ.get("JAVA_HOME"):
            require_java("Spark")
        if not (home / "bin" / "spark-class").exists():
            raise SetupError(f"{home}/bin/spark-class is missing: reinstall pyspark")
        self._check_ports()
        self.root.mkdir(parents=True, exist_ok=True)
        conf = self.root / "conf"
        conf.mkdir()
        (conf / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in DAEMON_PROPERTIES.items()))
        master = self._start("master", 0, MASTER_CLASS, [])
        state = SparkClusterState(
            root=str(self.root),
            spark_version=pyspark.__version__,
            master=master,
            workers=[],
            started_at=time.time(),
        )
        state.save()
        try:
            for i in range(1, spec.workers + 1):
                work = self.root / f"worker-{i}" / "work"
                work.mkdir(parents=True)
                args = [
                    "--cores",
                    str(spec.cores_per_worker),
                    "--memory",
                    f"{spec.memory_mb_per_worker}m",
                    "--work-dir",
                    str(work),
                    state.master_url,
                ]
                state.workers.append(self._start(f"worker-{i}", i, WORKER_CLASS, args))
                state.save()
            self._wait_ready(state)
        except BaseException:
            self.down(keep_logs=True)  # keep the logs the error message points to
            raise
        return state

    def down(self, keep_logs: bool = False, timeout_s: float = 20.0) -> list[int]:
        """Stop the workers (with the executors they launched), then the master: TERM to each
        daemon's process group, KILL after ``timeout_s``; then every pid seen before the stop is
        checked gone. Removes the directory unless ``keep_logs``. Returns the daemon pids stopped.
        Safe to run when nothing is running."""
        state = self.state()
        stopped: list[int] = []
        if state is not None:
            for group in (state.workers, [state.master]):
                live = [d for d in group if d.alive() and _is_spark_daemon(d.pid)]
                _stop_groups([d.pid for d in live], timeout_s)
                stopped += [d.pid for d in live]
        if not keep_logs and self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        elif state is not None:
            (self.root / STATE_FILE).unlink(missing_ok=True)
        return stopped

    # -- steps ------------------------------------------------------------------------------
    def _refuse_stale(self) -> None:
        state = self.state()
        running = None if state is None else [d.pid for d in state.daemons if d.alive()]
        refuse_stale_root(self.root, running, "Spark cluster", "daemons", "spark")

    def _check_ports(self) -> None:
        for i in range(self.spec.workers + 1):
            who = "the master" if i == 0 else f"worker {i}"
            for role, port in zip(("RPC", "web UI"), daemon_ports(self.spec.base_port, i), strict=True):
                if port_in_use(port):
                    raise SetupError(
                        f"port {port} ({role} port of {who}) is already in use: stop what holds it "
                        f"or choose another --base-port"
                    )

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            SPARK_HOME=str(spark_home()),
            SPARK_CONF_DIR=str(self.root / "conf"),  # no spark-env.sh / defaults from elsewhere
            SPARK_LOCAL_IP=HOST,  # web UIs and executors bind loopback
            SPARK_PUBLIC_DNS=HOST,
            SPARK_DAEMON_MEMORY=f"{self.spec.daemon_heap_mb}m",
        )
        if self.spec.daemon_jvm_args:
            env["SPARK_DAEMON_JAVA_OPTS"] = shlex.join(shlex.split(self.spec.daemon_jvm_args))
        return env

    def _start(self, name: str, index: int, main_class: str, args: list[str]) -> DaemonState:
        port, ui_port = daemon_ports(self.spec.base_port, index)
        home = self.root / name
        home.mkdir(parents=True, exist_ok=True)
        log = home / f"{name.split('-')[0]}.log"
        cmd = [
            str(spark_home() / "bin" / "spark-class"),
            main_class,
            "--host",
            HOST,
            "--port",
            str(port),
            "--webui-port",
            str(ui_port),
            "--properties-file",
            str(self.root / "conf" / "spark-defaults.conf"),
            *args,
        ]
        out = open(log, "ab")  # noqa: SIM115 - handed to the child
        # A new session per daemon: its process group holds the executors it launches, and
        # Ctrl-C in the terminal reaches linkwatch only.
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=home,
            env=self._env(),
        )
        out.close()
        # spark-class execs the JVM, so this pid is the daemon itself.
        return DaemonState(name=name, pid=proc.pid, port=port, ui_port=ui_port, log=str(log))

    def _wait_ready(self, state: SparkClusterState) -> None:
        deadline = time.monotonic() + self.spec.start_timeout_s
        want = {w.port for w in state.workers}
        while True:
            for d in state.daemons:
                if not d.alive():
                    raise SetupError(f"the Spark {d.name} exited during start-up: see {d.log}")
            registered = alive_worker_ports(master_json(state.master.ui_port))
            if want <= registered:
                return
            if time.monotonic() > deadline:
                missing = sorted(w.name for w in state.workers if w.port not in registered)
                raise SetupError(
                    f"{', '.join(missing)} did not register with the master within "
                    f"{self.spec.start_timeout_s:.0f}s: see the logs under {self.root}"
                )
            time.sleep(0.5)


def _is_spark_daemon(pid: int) -> bool:
    """Whether ``pid`` is still one of our daemons (not a pid the system gave to another process
    since the state was written)."""
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return any(c in (MASTER_CLASS, WORKER_CLASS) for c in cmdline)


def _stop_groups(pids: list[int], timeout_s: float) -> None:
    """TERM each daemon's process group (the daemon and the executors it launched), wait, KILL
    what is left. Every process seen in those groups before the stop is waited for by pid."""
    members: set[int] = set()
    for pid in pids:
        members.add(pid)
        with contextlib.suppress(psutil.Error):
            members |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        _killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in members):
        _reap(pids)
        time.sleep(0.2)
    if any(pid_alive(p) for p in members):
        for pid in pids:
            _killpg(pid, signal.SIGKILL)
    for pid in members:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    _reap(pids, block=True)
    left = sorted(p for p in members if pid_alive(p))
    if left:
        raise SetupError(f"Spark processes {left} are still running after SIGKILL")


def _killpg(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _reap(pids: list[int], block: bool = False) -> None:
    """Collect the exit status of daemons that are our own children (no zombies left)."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0 if block else os.WNOHANG)
