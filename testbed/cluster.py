"""A real Apache Kafka cluster on loopback: KRaft, 1 or 3 combined broker+controller nodes.

Every node gets distinct ports (``base_port + 10*node_id + {0: client, 1: controller,
2: Jolokia, 3: secured client}``), two log dirs (so disk balance can be observed), a ``broker.rack``, a heap of at
most 512 MB, ``kafka.request.logger`` at DEBUG into ``<node>/logs/kafka-request.log`` and the
Jolokia JVM agent on loopback. With ``ClusterSpec(secured=True)`` every broker also has a
SASL_SSL listener (SCRAM-SHA-512 users of ``scram_users``, created at format time; a CA and
broker certificate made by :mod:`testbed.tls` under ``<root>/tls``); brokers talk to each
other on the plain listener.

State lives in ``<root>/cluster.json``; ``down`` reads it, so it works from another process and
is safe to run twice. Nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from linkwatch.errors import SetupError
from testbed import class_archive, jars, tls

HOST = "127.0.0.1"
DEFAULT_ROOT = Path(os.environ.get("LINKWATCH_CLUSTER_DIR", "/tmp/linkwatch-cluster"))
DEFAULT_BASE_PORT = 19000
STATE_FILE = "cluster.json"
RACKS = ("rack-a", "rack-b", "rack-c")

REQUEST_LOG = "kafka-request.log"

# JVM arguments added to every broker this module starts (split like a shell line, never run
# by one), after the spec's own; unset by default. ``-XX:TieredStopAtLevel=1`` suits short-lived
# lightly loaded test brokers, where the C2 compiler's work is never paid back (a 3-broker start
# measured 19.4 -> 10.4 CPU-s); brokers with the SASL_SSL listener never get them (see
# ``LocalCluster._env_jvm_args``).
# Not LINKWATCH_*: every variable with that prefix is read as a config key by the commands.
JVM_ARGS_ENV = "TESTBED_BROKER_JVM_ARGS"
# Broker properties added to every broker this module starts, ``key=value`` pairs split like a
# shell line; after the testbed's own, before the spec's ``extra_properties``; unset by default.
# The test suite sets two that halve an idle broker's CPU (tests/conftest.py).
PROPERTIES_ENV = "TESTBED_BROKER_PROPERTIES"


def env_properties() -> dict[str, str]:
    """The properties of PROPERTIES_ENV; a word without ``=`` or with an empty key is a
    SetupError that names the variable."""
    props: dict[str, str] = {}
    for word in shlex.split(os.environ.get(PROPERTIES_ENV, "")):
        key, eq, value = word.partition("=")
        if not eq or not key.strip():
            raise SetupError(
                f"{PROPERTIES_ENV}: {word!r} is not key=value (e.g. replica.fetch.wait.max.ms=2000)"
            )
        props[key.strip()] = value
    return props


# Stock Kafka 4.x log4j2 layout, with the request logger at DEBUG in its own rolling file.
# Size-capped so a busy test never fills the disk: 100 MB x 5 files per broker at most.
LOG4J2_TEMPLATE = """\
Configuration:
  Properties:
    Property:
      - name: "logPattern"
        value: "[%d] %p %m (%c)%n"
  Appenders:
    RollingFile:
      - name: ServerAppender
        fileName: "${{sys:kafka.logs.dir}}/server.log"
        filePattern: "${{sys:kafka.logs.dir}}/server.log.%i"
        PatternLayout: {{ pattern: "${{logPattern}}" }}
        SizeBasedTriggeringPolicy: {{ size: "50MB" }}
        DefaultRolloverStrategy: {{ max: 2 }}
      - name: RequestAppender
        fileName: "${{sys:kafka.logs.dir}}/{request_log}"
        filePattern: "${{sys:kafka.logs.dir}}/{request_log}.%i"
        PatternLayout: {{ pattern: "${{logPattern}}" }}
        SizeBasedTriggeringPolicy: {{ size: "{request_log_max}" }}
        DefaultRolloverStrategy: {{ max: 5 }}
{request_filter}
  Loggers:
    Root:
      level: INFO
      AppenderRef: [{{ ref: ServerAppender }}]
    Logger:
      - name: kafka.request.logger
        level: {request_level}
        additivity: false
        AppenderRef: [{{ ref: RequestAppender }}]
      - name: org.apache.kafka.controller
        level: INFO
      - name: state.change.logger
        level: WARN
"""


@dataclass(frozen=True)
class NodePorts:
    client: int
    controller: int
    jolokia: int
    secure: int = 0  # the SASL_SSL listener (listening only when the cluster is secured)


def node_ports(base_port: int, node_id: int) -> NodePorts:
    start = base_port + 10 * node_id
    return NodePorts(client=start, controller=start + 1, jolokia=start + 2, secure=start + 3)


@dataclass
class NodeState:
    node_id: int
    rack: str
    pid: int
    ports: NodePorts
    dir: str
    log_dirs: list[str]

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.ports.client}"

    @property
    def secure_bootstrap(self) -> str:
        return f"{HOST}:{self.ports.secure}"

    @property
    def logs_dir(self) -> Path:
        return Path(self.dir) / "logs"

    @property
    def request_log(self) -> Path:
        return self.logs_dir / REQUEST_LOG

    @property
    def jolokia_url(self) -> str:
        return f"http://{HOST}:{self.ports.jolokia}/jolokia"

    def alive(self) -> bool:
        return pid_alive(self.pid)


@dataclass
class ClusterSpec:
    """What to start. ``request_log_level`` is the initial level of ``kafka.request.logger``."""

    brokers: int = 3
    root: Path = DEFAULT_ROOT
    base_port: int = DEFAULT_BASE_PORT
    heap_mb: int = 512
    request_log_level: str = "DEBUG"
    request_log_max: str = "100MB"
    # Optional log4j2 filter block (YAML, indented under Appenders) for slow-only capture.
    request_filter_yaml: str = ""
    extra_properties: dict[str, str] = field(default_factory=dict)
    # Extra JVM arguments per broker, e.g. another -javaagent (a Prometheus JMX exporter).
    extra_jvm_args: list[str] = field(default_factory=list)
    start_timeout_s: float = 60.0
    # A SASL_SSL listener on every broker: SCRAM-SHA-512, these users (name -> password).
    secured: bool = False
    scram_users: dict[str, str] = field(default_factory=lambda: {"linkwatch": "linkwatch-secret"})
    # auto.create.topics.enable. Off, as in production: a topic is created before it is used
    # (a test's own with testbed.load.ensure_topic, linkwatch's with ensure_own_topics, as
    # `linkwatch topics --create` does), so a component that would depend on creation on use fails
    # here as it would there.
    auto_create_topics: bool = False

    @property
    def creates_topics_on_use(self) -> bool:
        return self.auto_create_topics

    def validate(self) -> None:
        if self.brokers not in (1, 3):
            raise SetupError(f"brokers={self.brokers}: the local cluster runs 1 or 3 nodes")
        if not 128 <= self.heap_mb <= 512:
            raise SetupError(f"heap_mb={self.heap_mb}: keep each broker between 128 and 512 MB")
        if not 1024 <= self.base_port <= 65535 - 10 * (self.brokers + 1):
            raise SetupError(f"base_port={self.base_port}: choose a port between 1024 and 65000")


@dataclass
class ClusterState:
    cluster_id: str
    root: str
    base_port: int
    kafka_version: str
    nodes: list[NodeState]
    started_at: float
    ca_file: str = ""  # the CA that signed the secured listener's certificate ("" if not secured)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def secure_bootstrap(self) -> str:
        """The SASL_SSL listeners (SCRAM-SHA-512, TLS signed by ``ca_file``); "" if not secured."""
        return ",".join(n.secure_bootstrap for n in self.nodes) if self.ca_file else ""

    def node(self, node_id: int) -> NodeState:
        for n in self.nodes:
            if n.node_id == node_id:
                return n
        raise KeyError(f"no broker {node_id} in this cluster (have {[n.node_id for n in self.nodes]})")

    def save(self) -> None:
        path = Path(self.root) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, root: Path) -> ClusterState | None:
        path = root / STATE_FILE
        if not path.exists():
            return None
        raw = json.loads(path.read_text())
        nodes = [NodeState(**{**n, "ports": NodePorts(**n["ports"])}) for n in raw.pop("nodes")]
        return cls(nodes=nodes, **raw)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return True
    return False


def ephemeral_port_range() -> tuple[int, int]:
    """The kernel's range of source ports for outgoing connections (inclusive)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


LOWEST_BASE_PORT = 10000

# Blocks of 100 ports this process has reserved (an open file with an exclusive ``flock`` each):
# held until the process exits, so no other process (a parallel test worker, a worktree's suite,
# an operator's ``linkwatch cluster up``) picks a block whose broker is only stopped for a while
# by the test that owns it and rebinds its ports later. The kernel drops the locks of a process
# that dies, so a crash leaves nothing reserved.
PORT_LOCK_DIR = Path(tempfile.gettempdir()) / "linkwatch-port-blocks"
_reserved: dict[int, int] = {}


def try_lock(path: Path) -> int | None:
    """An exclusive ``flock`` on ``path`` (created if missing): the open descriptor, held until
    it is closed or the process exits, or None when another open file holds the lock now."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _reserve(blocks: set[int]) -> bool:
    """Reserve every block in ``blocks`` for this process; False (nothing kept) when another
    live process holds one of them."""
    taken: list[int] = []
    for block in sorted(blocks - _reserved.keys()):
        fd = try_lock(PORT_LOCK_DIR / f"{block * 100}.lock")
        if fd is None:
            for t in taken:
                os.close(_reserved.pop(t))  # closing the file drops its lock
            return False
        _reserved[block] = fd
        taken.append(block)
    return True


def free_base_port(ports_of: Callable[[int], Iterable[int]], start: int, stop: int) -> int:
    """The first base port (in steps of 100, from ``start`` up to ``stop``, then from
    :data:`LOWEST_BASE_PORT` up to ``start``) all of whose ``ports_of(base)`` are free now and
    outside the kernel's ephemeral range. A port in that range can be taken at any moment as the
    source port of an outgoing connection (a client of another test, a package download), and a
    broker then fails to bind it between this check and its start (seen: "Socket server failed to
    bind to 127.0.0.1:37610: Address already in use"). The block is reserved for this process
    until it exits (see :data:`PORT_LOCK_DIR`), so another process never picks it."""
    low, high = ephemeral_port_range()
    for base in [*range(start, stop, 100), *range(LOWEST_BASE_PORT + start % 100, start, 100)]:
        ports = list(ports_of(base))
        if any(low <= p <= high for p in ports):
            continue
        if not any(port_in_use(p) for p in ports) and _reserve({p // 100 for p in ports}):
            return base
    raise SetupError(
        f"no free block of ports between {LOWEST_BASE_PORT} and {stop} outside the ephemeral range {low}-{high}"
    )


def find_free_base_port(brokers: int = 3, start: int = 20000, stop: int = 60000) -> int:
    """A base port whose whole block of node ports is free now (for tests running side by side)."""
    return free_base_port(
        lambda base: [p for i in range(1, brokers + 1) for p in asdict(node_ports(base, i)).values()],
        start,
        stop,
    )


def new_cluster_id() -> str:
    # Kafka's Uuid.toString: URL-safe base64 without padding; avoid a leading '-'.
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cid.startswith("-"):
            return cid


def refuse_stale_root(root: Path, running: list[int] | None, kind: str, parts: str, command: str) -> None:
    """Refuse to start in ``root`` when it holds a ``kind`` already (``running``: the pids of its
    live processes, None when ``root`` has no state file) or anything else; ``parts`` names its
    processes and ``command`` the ``linkwatch`` command that removes it."""
    if running is not None:
        if running:
            raise SetupError(
                f"a {kind} is already running from {root} (pids {running}): run `linkwatch {command} down` first"
            )
        raise SetupError(
            f"stale {kind} directory {root} from an earlier run whose {parts} are gone: "
            f"run `linkwatch {command} down` to remove it"
        )
    if root.exists() and any(root.iterdir()):
        raise SetupError(
            f"{root} exists and is not a linkwatch {kind} directory: remove it or choose another with --dir"
        )


def require_java(who: str = "Kafka 4.x") -> str:
    """The ``java`` on PATH, or a SetupError saying ``who`` needs it."""
    java = shutil.which("java")
    if java is None:
        raise SetupError(
            f"Java is not installed: {who} needs Java 17+ (apt-get install openjdk-17-jre-headless)"
        )
    return java


class LocalCluster:
    """Start, stop and inspect a local KRaft cluster rooted at ``spec.root``."""

    def __init__(self, spec: ClusterSpec | None = None) -> None:
        self.spec = spec or ClusterSpec()
        self.root = Path(self.spec.root)

    # -- public -----------------------------------------------------------------------------
    def state(self) -> ClusterState | None:
        return ClusterState.load(self.root)

    def up(self) -> ClusterState:
        """Start every node and return once each broker answers metadata listing all brokers."""
        spec = self.spec
        spec.validate()
        env_props = env_properties()
        self._refuse_stale()
        java = require_java()
        runtime = jars.resolve()
        self._check_ports()
        self.root.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        certs = tls.make_certificates(self.root / "tls") if spec.secured else None
        nodes = [self._write_node(i, runtime, certs, env_props) for i in range(1, spec.brokers + 1)]
        self._format(java, runtime, cluster_id, nodes)
        self._start_nodes(java, runtime, nodes)
        state = ClusterState(
            cluster_id=cluster_id,
            root=str(self.root),
            base_port=spec.base_port,
            kafka_version=runtime.version,
            nodes=nodes,
            started_at=time.time(),
            ca_file=str(certs.ca_file) if certs else "",
        )
        state.save()
        try:
            self._wait_ready(state)
        except BaseException:
            self.down(keep_data=True)  # keep the logs the error message points to
            raise
        return state

    def start_existing(self, state: ClusterState) -> ClusterState:
        """Start again the nodes of ``state`` after ``down(keep_data=True)``: same ids, dirs,
        ports and data (a broker restart). Returns the state with the new pids, saved."""
        java = require_java()
        runtime = jars.resolve()
        self._check_ports()
        self._start_nodes(java, runtime, state.nodes)
        state.started_at = time.time()
        state.save()
        try:
            self._wait_ready(state)
        except BaseException:
            self.down(keep_data=True)
            raise
        return state

    def stop_node(self, node_id: int, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 20.0) -> int:
        """Stop one broker of the running cluster (``SIGKILL`` for a crash); returns its pid.

        The other nodes keep running; :meth:`start_node` starts it again with the same data."""
        state = self.state()
        if state is None:
            raise SetupError(f"no cluster under {self.root}")
        node = state.node(node_id)
        pid = node.pid
        exited_cleanly = False
        if pid and node.alive():
            exited_cleanly = not _stop_pids([pid], timeout_s, sig) and sig != signal.SIGKILL
        class_archive.adopt(Path(node.dir), exited_cleanly)
        return pid

    def start_node(self, node_id: int) -> ClusterState:
        """Start one stopped broker again (same id, dirs, ports, data) and wait until every
        broker answers metadata listing all of them. Returns the saved state with its new pid."""
        state = self.state()
        if state is None:
            raise SetupError(f"no cluster under {self.root}")
        node = state.node(node_id)
        if node.alive():
            raise SetupError(f"broker {node_id} is running (pid {node.pid})")
        self._start_nodes(require_java(), jars.resolve(), [node])
        state.save()
        self._wait_ready(state)
        return state

    def down(self, keep_data: bool = False, timeout_s: float = 20.0) -> list[int]:
        """Stop every node (TERM, then KILL after ``timeout_s``); remove the data unless asked.

        Returns the pids that were stopped. Safe to run when nothing is running.
        """
        state = self.state()
        stopped: list[int] = []
        if state is not None:
            live = [n for n in state.nodes if n.pid and n.alive()]
            # A broker writing the class archive at its exit is slower to stop: stopped together
            # with the others, it found the controller quorum gone and hung in its controlled
            # shutdown until killed (the archive lost). It goes first, alone.
            dumping = [n for n in live if class_archive.is_dumping(Path(n.dir))]
            killed = _stop_pids([n.pid for n in dumping], timeout_s)
            killed += _stop_pids([n.pid for n in live if n not in dumping], timeout_s)
            stopped = [n.pid for n in live]
            for node in state.nodes:
                class_archive.adopt(Path(node.dir), node.pid in stopped and node.pid not in killed)
        if not keep_data and self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        elif state is not None:
            (self.root / STATE_FILE).unlink(missing_ok=True)
        return stopped

    # -- steps ------------------------------------------------------------------------------
    def _refuse_stale(self) -> None:
        state = self.state()
        running = None if state is None else [n.pid for n in state.nodes if n.alive()]
        refuse_stale_root(self.root, running, "cluster", "brokers", "cluster")

    def _check_ports(self) -> None:
        for i in range(1, self.spec.brokers + 1):
            for role, port in asdict(node_ports(self.spec.base_port, i)).items():
                if port_in_use(port):
                    raise SetupError(
                        f"port {port} ({role} port of broker {i}) is already in use: stop what holds "
                        f"it or choose another --base-port"
                    )

    def _write_node(
        self,
        node_id: int,
        runtime: jars.KafkaRuntime,
        certs: tls.Certificates | None = None,
        env_props: dict[str, str] | None = None,
    ) -> NodeState:
        spec = self.spec
        ports = node_ports(spec.base_port, node_id)
        node_dir = self.root / f"broker-{node_id}"
        log_dirs = [node_dir / "data-a", node_dir / "data-b"]
        for d in [*log_dirs, node_dir / "logs"]:
            d.mkdir(parents=True, exist_ok=True)
        voters = ",".join(
            f"{i}@{HOST}:{node_ports(spec.base_port, i).controller}" for i in range(1, spec.brokers + 1)
        )
        rf = min(3, spec.brokers)
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{ports.client},CONTROLLER://{HOST}:{ports.controller}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{ports.client}",
            "inter.broker.listener.name": "PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "log.dirs": ",".join(str(d) for d in log_dirs),
            "broker.rack": RACKS[(node_id - 1) % len(RACKS)],
            "num.partitions": "3",
            "default.replication.factor": str(rf),
            "min.insync.replicas": str(max(1, rf - 1)),
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "12",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(max(1, rf - 1)),
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(max(1, rf - 1)),
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": str(spec.creates_topics_on_use).lower(),
            "num.io.threads": "4",
            "num.network.threads": "2",
            "log.retention.check.interval.ms": "30000",
            **(_secured_listener(ports, certs) if certs else {}),
            **(env_props or {}),
            **spec.extra_properties,
        }
        (node_dir / "server.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()))
        (node_dir / "log4j2.yaml").write_text(
            LOG4J2_TEMPLATE.format(
                request_log=REQUEST_LOG,
                request_log_max=spec.request_log_max,
                request_level=spec.request_log_level,
                request_filter=spec.request_filter_yaml,
            )
        )
        return NodeState(
            node_id=node_id,
            rack=props["broker.rack"],
            pid=0,
            ports=ports,
            dir=str(node_dir),
            log_dirs=[str(d) for d in log_dirs],
        )

    def _format(self, java: str, runtime: jars.KafkaRuntime, cid: str, nodes: list[NodeState]) -> None:
        procs = [
            (
                n,
                subprocess.Popen(
                    [
                        java,
                        "-Xmx256m",
                        *class_archive.use_args(class_archive.archive_path(java, runtime.cache_dir)),
                        "-cp",
                        runtime.classpath,
                        "kafka.tools.StorageTool",
                        "format",
                        "-t",
                        cid,
                        "-c",
                        str(Path(n.dir) / "server.properties"),
                        *self._scram_args(),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
            )
            for n in nodes
        ]
        for node, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                last = out.strip().splitlines()[-1] if out.strip() else "no output"
                raise SetupError(f"formatting broker {node.node_id} storage failed: {last}")

    def _scram_args(self) -> list[str]:
        if not self.spec.secured:
            return []
        return [
            arg
            for name, password in self.spec.scram_users.items()
            for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")
        ]

    def _env_jvm_args(self) -> list[str]:
        # The arguments of JVM_ARGS_ENV; not for a secured cluster: its SCRAM (PBKDF2, 4096 rounds) and TLS handshakes are hot
        # crypto loops that run several times slower without C2 (a wrong password's refusal
        # then came after the client's bootstrap timeout, and the test saw only the timeout).
        return [] if self.spec.secured else shlex.split(os.environ.get(JVM_ARGS_ENV, ""))

    def _start_nodes(self, java: str, runtime: jars.KafkaRuntime, nodes: list[NodeState]) -> None:
        """Start ``nodes`` with the class archive mapped; without one yet, the first of them
        writes it at its exit (testbed.class_archive)."""
        archive = class_archive.archive_path(java, runtime.cache_dir)
        mapped = class_archive.use_args(archive)
        for i, node in enumerate(nodes):
            cds = mapped
            if archive is not None and not mapped and i == 0:
                cds = class_archive.dump_args(archive, Path(node.dir))
            node.pid = self._start(java, runtime, node, cds)

    def _start(self, java: str, runtime: jars.KafkaRuntime, node: NodeState, cds: list[str]) -> int:
        node_dir = Path(node.dir)
        cmd = [
            java,
            f"-Xmx{self.spec.heap_mb}m",
            f"-Xms{min(256, self.spec.heap_mb)}m",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={node.logs_dir}",
            f"-Dlog4j2.configurationFile={node_dir / 'log4j2.yaml'}",
            f"-javaagent:{runtime.jolokia_jar}=port={node.ports.jolokia},host={HOST}",
            *cds,
            *self.spec.extra_jvm_args,
            *self._env_jvm_args(),
            "-cp",
            runtime.classpath,
            "kafka.Kafka",
            str(node_dir / "server.properties"),
        ]
        out = open(node.logs_dir / "stdout.log", "ab")  # noqa: SIM115 - handed to the child
        # A new session: Ctrl-C in the terminal reaches linkwatch, which stops the brokers itself.
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=node_dir,
        )
        out.close()
        return proc.pid

    def _wait_ready(self, state: ClusterState) -> None:
        deadline = time.monotonic() + self.spec.start_timeout_s
        pending = {n.node_id for n in state.nodes}
        while pending:
            for node in state.nodes:
                if not node.alive():
                    raise SetupError(
                        f"broker {node.node_id} exited during start-up: see {node.logs_dir / 'server.log'}"
                    )
            for node_id in sorted(pending):
                node = state.node(node_id)
                if len(metadata_brokers(node.bootstrap)) == len(state.nodes):
                    pending.discard(node_id)
            if pending and time.monotonic() > deadline:
                raise SetupError(
                    f"brokers {sorted(pending)} did not answer metadata within "
                    f"{self.spec.start_timeout_s:.0f}s: see their logs under {self.root}"
                )
            if pending:
                time.sleep(0.5)


def _secured_listener(ports: NodePorts, certs: tls.Certificates) -> dict[str, str]:
    """Broker properties adding a SASL_SSL listener (SCRAM-SHA-512) beside the plain one."""
    plain = f"PLAINTEXT://{HOST}:{ports.client}"
    secured = f"SASL_SSL://{HOST}:{ports.secure}"
    prefix = "listener.name.sasl_ssl."
    return {
        "listeners": f"{plain},{secured},CONTROLLER://{HOST}:{ports.controller}",
        "advertised.listeners": f"{plain},{secured}",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        f"{prefix}scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{prefix}ssl.keystore.type": "PKCS12",
        f"{prefix}ssl.keystore.location": str(certs.keystore),
        f"{prefix}ssl.keystore.password": certs.keystore_password,
        f"{prefix}ssl.key.password": certs.keystore_password,
    }


def metadata_brokers(bootstrap: str, timeout_s: float = 2.0) -> list[int]:
    """Broker ids listed by one broker's metadata, or [] if it does not answer yet."""
    from kafka.errors import KafkaError

    from linkwatch.kafka_client import admin_client

    try:
        admin = admin_client(
            bootstrap_servers=bootstrap,
            request_timeout_ms=int(timeout_s * 1000),
            bootstrap_timeout_ms=int(timeout_s * 1000),
            client_id="linkwatch-readiness",
        )
    except (KafkaError, OSError):
        return []
    try:
        cluster = admin.describe_cluster()
        return sorted(b["broker_id"] for b in cluster.get("brokers", []) if not b.get("is_fenced"))
    except (KafkaError, OSError):
        return []
    finally:
        admin.close()


def _stop_pids(pids: list[int], timeout_s: float, sig: signal.Signals = signal.SIGTERM) -> list[int]:
    """Send ``sig`` to ``pids`` together, then KILL those still alive after ``timeout_s``;
    returns those."""
    for pid in pids:
        _signal(pid, signal.SIGCONT)  # a paused JVM cannot handle SIGTERM
        _signal(pid, sig)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
        _reap(pids)
        time.sleep(0.2)
    killed = [pid for pid in pids if pid_alive(pid)]
    for pid in killed:
        _signal(pid, signal.SIGKILL)
    _reap(pids, block=True)
    return killed


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(pids: list[int], block: bool = False) -> None:
    """Collect exit status of brokers that are our own children, so they do not linger as zombies."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0 if block else os.WNOHANG)


def iter_request_log_files(node: NodeState) -> Iterator[Path]:
    """The request log and its rolled-over files, oldest first."""
    rolled = sorted(node.logs_dir.glob(f"{REQUEST_LOG}.*"), key=lambda p: -int(p.suffix[1:]))
    yield from rolled
    if node.request_log.exists():
        yield node.request_log
