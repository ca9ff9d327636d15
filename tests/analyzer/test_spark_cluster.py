"""The analyzer on a real Spark standalone cluster gives the same findings as in local mode.

A master and two workers (1 core, 1 GiB each) run on loopback from pyspark's own
``spark-class`` (:mod:`testbed.spark`); Kafka is the real 3-broker test cluster. The
input is one fixed set of samples on a fresh samples topic: three brokers over 12 windows of
10 s, broker 2 slow in its ``local`` stage in the last six, and a topic whose partition 0 takes
eight times the bytes of the others. Every Spark run is its own process, as an operator runs it:

* the batch report (``--source kafka``): ``linkwatch report`` in local mode, and the report as a
  site runs it on the cluster: ``spark-submit --master spark://… --jars <connector jars>
  --archives <linkwatch spark package> cli/main.py report`` from a fresh install of the wheel,
  executors whose Python has nothing of linkwatch's, the master from spark-submit
  (``spark_master: ""`` in the config); the JSON outputs are equal.
* the streaming analyzer: ``linkwatch analyze`` with ``spark_master: local[2]`` and with
  ``spark_master: spark://127.0.0.1:<port>`` (the driver in the linkwatch process, executors
  on the workers reading the samples topic with the connector jars ``spark.jars`` ships). Each
  publishes to its own findings topic; the first evaluation's findings (the stream's first
  micro-batch holds every sample, as they are on the topic before it starts) are equal apart
  from their decision time.

The local and the cluster run of each pair go side by side (separate processes, applications
and output files): the comparison does not depend on the order, and the pair takes less wall
time than one run after the other.

Then ``down`` leaves no daemon or executor process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import yaml

from linkwatch import records as R
from linkwatch.sketch import LatencySketch
from testbed.load import ensure_topic
from testbed.spark import (
    SparkClusterSpec,
    SparkClusterState,
    SparkStandalone,
    alive_worker_ports,
    find_free_base_port,
    master_json,
)
from tests.wheelkit import built_wheel, uv_install

pytestmark = [pytest.mark.minutes(2), pytest.mark.cluster]

WINDOW_S = 10
WINDOWS = 12
SLOW_FROM = 6  # broker 2 is slow in windows 6..11
CLUSTER = "sparkcluster"
BROKERS = (1, 2, 3)
FINDINGS_WITHIN_S = 300.0
# The suite's Spark JVM arguments (tests/conftest.py: C1 only, unless SPARK_SUBMIT_OPTS is set) for
# every JVM of this module: the drivers inherit the variable, the daemons and the executors get
# them here. Each application's executors live a minute on a few hundred records, where C2's
# compiling is never paid back (the module's executors: 63 busy CPU-s with it).
SPARK_JVM_ARGS = os.environ.get("SPARK_SUBMIT_OPTS", "")
REPORT_TIMEOUT_S = 300.0


# --- the input ---------------------------------------------------------------------------


def _sketch(p99_ms: float, n: int = 60) -> dict:
    """n values from 1 ms up to about ``p99_ms`` (the top two at it, so p99 lands there)."""
    sk = LatencySketch()
    for i in range(n - 2):
        sk.add(1.0 + (p99_ms / 4) * i / n)
    sk.add(p99_ms)
    sk.add(p99_ms)
    return sk.to_dict()


def _stage_records(t0: int) -> list[R.Record]:
    out: list[R.Record] = []
    for i in range(WINDOWS):
        ts = t0 + i * WINDOW_S * 1000
        for b in BROKERS:
            slow = b == 2 and i >= SLOW_FROM
            total = 600.0 if slow else 20.0 + b + i % 3
            for stage in R.STAGES:
                if stage == "total":
                    p99 = total
                elif stage == "local":
                    p99 = total - 15.0 if slow else 3.0 + b
                else:
                    p99 = 2.0 + (b + i) % 3
                out.append(
                    R.StageSketch(
                        cluster=CLUSTER,
                        source=f"broker-{b}",
                        ts_ms=ts,
                        broker=b,
                        request=R.PRODUCE,
                        stage=stage,
                        window_s=WINDOW_S,
                        sketch=_sketch(p99),
                    )
                )
    return out


def _partition_records(t0: int) -> list[R.Record]:
    out: list[R.Record] = []
    for i in range(WINDOWS):
        ts = t0 + i * WINDOW_S * 1000
        for p in range(6):
            rate = 400_000 if p == 0 else 50_000  # bytes per second
            size = 2_000_000 + rate * WINDOW_S * i
            b = BROKERS[p % 3]
            out.append(
                R.PartitionSize(
                    cluster=CLUSTER,
                    source=f"broker-{b}",
                    ts_ms=ts,
                    broker=b,
                    log_dir="/data/a",
                    topic="orders",
                    partition=p,
                    size_bytes=size,
                    segments=1,
                    oldest_segment_ms=t0,
                    newest_segment_ms=ts,
                    log_end_offset=size // 100,
                )
            )
    return out


@dataclass(frozen=True)
class Samples:
    topic: str
    from_ms: int
    to_ms: int


@pytest.fixture(scope="module")
def samples(cluster3, tmp_path_factory: pytest.TempPathFactory) -> Samples:
    """The fixed input on a fresh samples topic; its windows end before now, so every run sees
    all of them complete."""
    from kafka import KafkaAdminClient, KafkaProducer

    topic = f"samples-spark-{tmp_path_factory.mktemp('s').name[-6:]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster3.bootstrap, client_id="spark-cluster-test")
    ensure_topic(admin, topic, 3, 1)
    admin.close()
    end = (int(time.time()) // WINDOW_S) * WINDOW_S * 1000
    t0 = end - WINDOWS * WINDOW_S * 1000
    producer = KafkaProducer(bootstrap_servers=cluster3.bootstrap, acks="all")
    for rec in _stage_records(t0) + _partition_records(t0):
        producer.send(topic, key=rec.dedup_key().encode(), value=rec.to_json())
    producer.flush(30)
    producer.close(10)
    # --source kafka reads records whose Kafka timestamp (now) and ts_ms both fall in the range.
    return Samples(topic, t0, int(time.time() * 1000) + 5_000)


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkClusterState]:
    root = tmp_path_factory.mktemp("spark") / "standalone"
    cluster = SparkStandalone(
        SparkClusterSpec(
            root=root,
            base_port=find_free_base_port(2, start=_start_port()),
            daemon_jvm_args=SPARK_JVM_ARGS,
        )
    )
    state = cluster.up()
    try:
        yield state
    finally:
        cluster.down()


def _start_port() -> int:
    return 30000 + (os.getpid() % 250) * 100


# --- running linkwatch as separate processes ---------------------------------------------


def _config(
    path: Path, cluster3, samples: Samples, master: str, state_dir: Path, findings_topic: str
) -> Path:
    cfg = {
        "cluster": CLUSTER,
        "bootstrap": cluster3.bootstrap,
        "samples_topic": samples.topic,
        "findings_topic": findings_topic,
        "window_s": WINDOW_S,
        # Wide enough that the fixed windows stay in range for every run of the module.
        "lookback_windows": 180,
        "interval_s": 2.0,
        "trigger_s": 2.0,
        "state_dir": str(state_dir),
        "spark_master": master,
        "spark_log": str(state_dir.parent / f"{state_dir.name}-spark.log"),
        "spark_conf": {
            "spark.ui.showConsoleProgress": "false",
            "spark.executor.extraJavaOptions": SPARK_JVM_ARGS,
        },
        "prometheus": {"enabled": False},
    }
    path.write_text(yaml.safe_dump(cfg))
    return path


def _env() -> dict[str, str]:
    # The driver's Python and the executors' are this interpreter (the same host).
    return {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _linkwatch(*args: str) -> list[str]:
    return [sys.executable, "-m", "cli.main", *args]


@dataclass(frozen=True)
class Run:
    """One report as its own process: its command, its JSON output and its log; by default
    this checkout's environment from the current directory."""

    cmd: list[str]
    out: Path
    log: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None


def _start(
    cmd: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env or _env(), cwd=cwd, start_new_session=True
        )


def _finish(proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    try:
        rc = proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise AssertionError(f"{proc.args[:4]} did not finish within {timeout_s:.0f}s: {log}") from None
    assert rc == 0, f"{proc.args[:4]}… exited {rc}: {log.read_text()[-3000:]}"


def _reports(runs: list[Run]) -> list[dict]:
    """Run the reports side by side (each its own process and Spark application) and return
    their outputs in order. None is left running, whatever happens."""
    procs = [(_start(r.cmd, r.log, r.env, r.cwd), r.log) for r in runs]
    try:
        for proc, log in procs:
            _finish(proc, log, REPORT_TIMEOUT_S)
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return [json.loads(r.out.read_text()) for r in runs]


# --- 1. the helper ------------------------------------------------------------------------


def test_workers_registered_with_bounded_resources_on_loopback(spark_cluster: SparkClusterState) -> None:
    view = master_json(spark_cluster.master.ui_port)
    assert alive_worker_ports(view) == {w.port for w in spark_cluster.workers}
    assert sorted((w["cores"], w["memory"]) for w in view["workers"]) == [(1, 1024), (1, 1024)]
    for d in spark_cluster.daemons:
        listening = {
            (c.laddr.ip, c.laddr.port)
            for c in psutil.Process(d.pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN
        }
        assert {port for _, port in listening} >= {d.port, d.ui_port}, d
        assert {ip for ip, _ in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, (d.name, listening)
        # The daemons run with the spec's JVM arguments (SPARK_DAEMON_JAVA_OPTS).
        cmdline = psutil.Process(d.pid).cmdline()
        assert all(arg in cmdline for arg in shlex.split(SPARK_JVM_ARGS)), (d.name, cmdline)


# --- 2. the batch report: local mode, and from an installed wheel on the cluster ---------------
#
# The cluster run is the report as a site runs it (docs/analyzer.md): the driver's environment
# a fresh virtualenv with ``linkwatch[analyzer]`` installed from the wheel built from this tree,
# run from a directory outside the tree without ``PYTHONPATH``; the executors' environment a
# fresh virtualenv with pyspark, pyarrow, numpy and pandas only (``import ddsketch`` and
# ``import orjson`` fail there). ``linkwatch spark package`` packs linkwatch and its dependencies
# for them; the driver environment's ``spark-submit`` ships it with the options it prints, with
# the connector jars, and runs the installed ``cli/main.py report --source kafka`` on this
# module's two workers. Its JSON equals the local-mode ``linkwatch report`` of this checkout on
# the same samples (the two run side by side), and the master lists the finished application:
# the executors imported ``ddsketch`` and ``orjson`` from the archive.

ROOT = Path(__file__).resolve().parents[2]
UV = shutil.which("uv")
PYSPARK = "pyspark==4.0.1"


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, (
        f"{cmd[:3]}… exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    )
    return done.stdout


@dataclass(frozen=True)
class WheelDriver:
    """A fresh ``linkwatch[analyzer]`` install from the wheel and its bare executors."""

    python: Path
    linkwatch: Path
    main: str  # the installed cli/main.py
    spark_submit: str  # the installed pyspark's
    executors_python: Path
    env: dict[str, str]
    work: Path  # the directory outside the tree everything runs from


def _wheel_driver(tmp_path: Path) -> WheelDriver:
    assert UV is not None
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "SPARK_HOME")}
    work = tmp_path / "work"  # outside the source tree
    work.mkdir()
    wheel = built_wheel()
    driver, executors = tmp_path / "driver", tmp_path / "executors"
    for venv, requirement in (
        (driver, [f"linkwatch[analyzer] @ {wheel.as_uri()}"]),
        (executors, [PYSPARK, "pyarrow", "numpy", "pandas"]),
    ):
        _run([UV, "venv", "-q", "--python", sys.executable, str(venv)], work, env)
        uv_install(venv / "bin/python", requirement, env, work)
    bare = subprocess.run([str(executors / "bin/python"), "-c", "import ddsketch"], capture_output=True)
    assert bare.returncode != 0, "the executors' Python must not have ddsketch of its own"
    py = str(driver / "bin/python")
    main = _run([py, "-c", "import cli.main; print(cli.main.__file__)"], work, env).strip()
    assert Path(main).is_relative_to(driver) and not Path(main).is_relative_to(ROOT)
    pyspark = _run([py, "-c", "import pyspark; print(pyspark.__file__)"], work, env).strip()
    return WheelDriver(
        python=driver / "bin/python",
        linkwatch=driver / "bin/linkwatch",
        main=main,
        spark_submit=str(Path(pyspark).parent / "bin/spark-submit"),
        executors_python=executors / "bin/python",
        env=env,
        work=work,
    )


@pytest.mark.skipif(UV is None, reason="uv is not installed (make bootstrap installs it)")
@pytest.mark.timeout(1200)
def test_report_from_the_wheel_on_the_cluster_with_bare_executors_equals_local_mode(
    cluster3, spark_cluster: SparkClusterState, samples: Samples, tmp_path: Path
) -> None:
    from spark_metrics.jars import kafka_connector_jars

    wheel = _wheel_driver(tmp_path)
    out = _run(
        [str(wheel.linkwatch), "spark", "package", str(tmp_path / "executor-env.tar.gz")],
        wheel.work,
        wheel.env,
    )
    options = out.split("spark-submit options: ", 1)[1].split()
    assert options[0] == "--archives" and "ddsketch==" in out and "orjson==" in out

    rng = [
        "--from",
        str(samples.from_ms),
        "--to",
        str(samples.to_ms),
        "--source",
        "kafka",
        "--format",
        "json",
    ]
    local_cfg = _config(
        tmp_path / "local.yaml", cluster3, samples, "local[2]", tmp_path / "local", "f-unused"
    )
    # The module's cluster (the testbed's, from this checkout's pyspark 4.0.1) stands for the
    # site's; the master comes from spark-submit.
    cluster_cfg = _config(
        wheel.work / "analyzer.yaml", cluster3, samples, "", tmp_path / "cluster", "f-unused"
    )
    on_cluster_cmd = [
        wheel.spark_submit,
        "--master",
        spark_cluster.master_url,
        "--deploy-mode",
        "client",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        f"spark.pyspark.python={wheel.executors_python}",
        "--conf",
        f"spark.pyspark.driver.python={wheel.python}",
        "--conf",
        f"spark.executor.extraJavaOptions={SPARK_JVM_ARGS}",
        *options,
        "--jars",
        ",".join(str(p) for p in kafka_connector_jars()),
        wheel.main,
        "report",
        *rng,
        "-c",
        str(cluster_cfg),
        "--out",
        str(tmp_path / "cluster.json"),
    ]
    before = {a["id"] for a in master_json(spark_cluster.master.ui_port)["completedapps"]}
    started = time.monotonic()
    local, on_cluster = _reports(
        [
            Run(
                _linkwatch("report", *rng, "-c", str(local_cfg), "--out", str(tmp_path / "local.json")),
                tmp_path / "local.json",
                tmp_path / "local.log",
            ),
            Run(on_cluster_cmd, tmp_path / "cluster.json", tmp_path / "cluster.log", wheel.env, wheel.work),
        ]
    )
    print(f"the report locally and from the wheel on the cluster: {time.monotonic() - started:.0f} s")
    rules = sorted((f["rule"], f["subject"]) for f in local["findings"])
    assert ("slow_broker", "broker:2") in rules and ("skewed_partitions", "topic:orders") in rules, rules
    slow = next(f for f in local["findings"] if f["subject"] == "broker:2")
    assert slow["evidence"]["stage"] == "local"
    assert local["read"]["brokers"] == [1, 2, 3]
    assert on_cluster == local
    # The cluster run's executors were on the workers: the master lists the finished app.
    apps = [a for a in master_json(spark_cluster.master.ui_port)["completedapps"] if a["id"] not in before]
    assert "linkwatch-report" in [a["name"] for a in apps], apps


# --- 3. the streaming analyzer ------------------------------------------------------------


def _first_evaluation(bootstrap: str, topic: str, proc: subprocess.Popen, log: Path) -> list[dict]:
    """The findings of the first evaluation that published any: those with the smallest
    decision time, once a later evaluation shows that group is complete."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=1000
    )
    seen: list[dict] = []
    deadline = time.monotonic() + FINDINGS_WITHIN_S
    try:
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"the analyzer exited {proc.returncode}: {log.read_text()[-3000:]}"
            seen += [json.loads(m.value) for m in consumer]
            times = sorted({f["ts_ms"] for f in seen})
            if len(times) >= 2:
                return [f for f in seen if f["ts_ms"] == times[0]]
    finally:
        consumer.close()
    raise AssertionError(f"no two evaluations published findings within {FINDINGS_WITHIN_S}s: {log}")


@dataclass(frozen=True)
class Analyzer:
    proc: subprocess.Popen
    findings_topic: str
    log: Path


def _start_analyzer(cluster3, samples: Samples, master: str, tmp: Path, name: str) -> Analyzer:
    from kafka import KafkaAdminClient

    findings_topic = f"findings-{name}-{tmp.name[-6:]}"
    admin = KafkaAdminClient(bootstrap_servers=cluster3.bootstrap, client_id="spark-cluster-test")
    ensure_topic(admin, findings_topic, 1, 1)
    admin.close()
    cfg = _config(tmp / f"{name}.yaml", cluster3, samples, master, tmp / name, findings_topic)
    log = tmp / f"{name}-analyze.log"
    return Analyzer(_start(_linkwatch("analyze", "-c", str(cfg)), log), findings_topic, log)


def _analyze_side_by_side(cluster3, samples: Samples, masters: dict[str, str], tmp: Path) -> list[list[dict]]:
    """Start ``linkwatch analyze`` once per ``name: master`` at the same time (each its own
    process, Spark application and findings topic), then return each one's first evaluation, in
    order. Every analyzer is stopped, whatever happens."""
    started: list[Analyzer] = []
    try:
        for name, master in masters.items():
            started.append(_start_analyzer(cluster3, samples, master, tmp, name))
        out = []
        for a in started:
            found = _first_evaluation(cluster3.bootstrap, a.findings_topic, a.proc, a.log)
            _stop(a.proc)
            out.append(
                sorted(({k: v for k, v in f.items() if k != "ts_ms"} for f in found), key=lambda f: f["key"])
            )
        return out
    finally:
        for a in started:
            _stop(a.proc)


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C to linkwatch (the service stops its queries; its Spark JVM ends with it), then
    nothing of its process group may be left."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _comparable(findings: list[dict]) -> list[dict]:
    # The record key carries the decision time; everything else must be equal.
    return [{k: v for k, v in f.items() if k != "key"} for f in findings]


@pytest.mark.timeout(900)
def test_streaming_analyzer_same_findings_local_and_on_the_cluster(
    cluster3, spark_cluster: SparkClusterState, samples: Samples, tmp_path: Path
) -> None:
    local, on_cluster = _analyze_side_by_side(
        cluster3, samples, {"local": "local[2]", "cluster": spark_cluster.master_url}, tmp_path
    )
    subjects = [(f["rule"], f["subject"]) for f in local]
    assert ("slow_broker", "broker:2") in subjects, subjects
    assert _comparable(on_cluster) == _comparable(local)
    view = master_json(spark_cluster.master.ui_port)
    apps = view["activeapps"] + view["completedapps"]
    assert any(a["name"] == "linkwatch-analyze" for a in apps), apps


# --- 4. down -------------------------------------------------------------------------------


def test_down_leaves_no_spark_process(spark_cluster: SparkClusterState) -> None:
    groups = {d.pid for d in spark_cluster.daemons}
    started = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) in groups]
    assert {d.pid for d in spark_cluster.daemons} <= {p.pid for p in started}
    stopped = SparkStandalone(SparkClusterSpec(root=Path(spark_cluster.root))).down(keep_logs=True)
    assert sorted(stopped) == sorted(groups)
    left = [p.pid for p in started if _running(p)]
    assert left == [], f"processes left after down: {left}"
    assert SparkStandalone(SparkClusterSpec(root=Path(spark_cluster.root))).down() == []


def _running(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None
