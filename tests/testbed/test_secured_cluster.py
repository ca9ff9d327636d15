"""linkwatch against a secured broker: one broker whose only client listener linkwatch uses is
SASL_SSL (SCRAM-SHA-512, a CA made at test time), reached through the shared ``kafka:`` section
alone — admin, producer and consumer, the lag collector's pass, the probe's window — and a
wrong password that fails with an error naming authentication, quickly."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic

from lag.runner import LagConfig, LagService
from linkwatch.errors import KafkaConnectError
from linkwatch.kafka_client import KafkaClientConfig, kafka_python_kwargs
from probe.config import ProbeConfig
from probe.service import ProbeService
from testbed.alert_stack import Process, binary, free_port, prometheus_query
from testbed.cluster import ClusterSpec, ClusterState, LocalCluster, find_free_base_port

pytestmark = [pytest.mark.minutes(1), pytest.mark.cluster]

USER, PASSWORD = "lw-monitor", "pw-" + uuid.uuid4().hex[:12]


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterState]:
    root = tmp_path_factory.mktemp("secured") / "kafka"
    spec = ClusterSpec(
        brokers=1, root=root, base_port=find_free_base_port(1, start=41000), secured=True,
        scram_users={USER: PASSWORD},
    )  # fmt: skip
    cluster = LocalCluster(spec)
    state = cluster.up()
    try:
        yield state
    finally:
        cluster.down()


@pytest.fixture(scope="module")
def section(secured: ClusterState, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The ``kafka:`` section an operator writes: the password from a file, the test CA."""
    password_file = tmp_path_factory.mktemp("secrets") / "kafka.password"
    password_file.write_text(PASSWORD + "\n")
    return {
        "bootstrap_servers": secured.secure_bootstrap,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": USER,
        "sasl_password_file": str(password_file),
        "ssl_cafile": secured.ca_file,
    }


def _topic(section: dict[str, Any], partitions: int = 1) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(**kafka_python_kwargs(KafkaClientConfig(**section), "test-admin"))
    try:
        admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        admin.close()
    return name


def _produce(cfg: KafkaClientConfig, topic: str, n: int) -> None:
    producer = KafkaProducer(**kafka_python_kwargs(cfg, "test-producer"), acks="all")
    try:
        for i in range(n):
            producer.send(topic, f"m{i}".encode())
        producer.flush(30)
    finally:
        producer.close()


def test_admin_producer_and_consumer_through_the_shared_section(section: dict[str, Any]) -> None:
    cfg = KafkaClientConfig(**section)
    topic = _topic(section)
    _produce(cfg, topic, 5)
    consumer = KafkaConsumer(
        topic,
        **kafka_python_kwargs(cfg, "test-consumer"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=15_000,
    )
    try:
        values = [r.value for _, r in zip(range(5), consumer, strict=False)]
    finally:
        consumer.close()
    assert values == [f"m{i}".encode() for i in range(5)]


def test_the_analyzers_window_feed_reads_samples_through_the_shared_section(section: dict[str, Any]) -> None:
    """The analyzer's driver-side window feed (``analyzer/window_feed.py``) connects with the
    same ``kafka:`` section as every other component."""
    from collections import Counter

    from aggregation.window_state import KINDS
    from analyzer.window_feed import WindowFeed
    from tests.aggregation.window_records import stage

    cfg = KafkaClientConfig(**section)
    topic = _topic(section)
    now = int(time.time() * 1000)
    rec = stage(1, now, [1.0, 2.0])
    producer = KafkaProducer(**kafka_python_kwargs(cfg, "test-producer"), acks="all")
    try:
        producer.send(topic, rec.to_json())
        producer.flush(30)
    finally:
        producer.close()
    got: list = []
    feed = WindowFeed(
        cfg, topic, got.extend, now - 60_000, KINDS, Counter(), 3_600_000, 30_000, 1 << 20
    ).start()
    try:
        deadline = time.monotonic() + 60
        while not got and feed.isActive and time.monotonic() < deadline:
            time.sleep(0.2)
        assert got == [rec], feed.exception()
    finally:
        feed.stop()


def test_the_lag_collectors_pass_sees_a_group_behind(section: dict[str, Any]) -> None:
    cfg = KafkaClientConfig(**section)
    topic, group = _topic(section), f"sec-group-{uuid.uuid4().hex[:6]}"
    _produce(cfg, topic, 10)
    consumer = KafkaConsumer(
        topic, **kafka_python_kwargs(cfg, "test-group"), group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False, max_poll_records=4,
    )  # fmt: skip
    try:
        deadline, polled = time.monotonic() + 20, {}
        while not polled and time.monotonic() < deadline:
            polled = consumer.poll(timeout_ms=500)
        consumer.commit()
    finally:
        consumer.close()
    consumed = sum(len(records) for records in polled.values())
    assert 0 < consumed <= 4
    service = LagService(_lag_config(section, group))
    try:
        result, _ = service.step()
    finally:
        service.close()
    assert result.errors == []
    assert result.groups[group].lag_sum == 10 - consumed


def _lag_config(section: dict[str, Any], group: str) -> LagConfig:
    return LagConfig.model_validate(
        {
            "kafka": section,
            "collector": {"include": [f"^{group}$"]},
            "metrics": {"enabled": False},
            "publish": {"samples": False, "findings": False},
            "cold_read": {"enabled": False},
        }
    )


def test_the_probes_window_measures_the_broker(section: dict[str, Any], secured: ClusterState) -> None:
    cfg = ProbeConfig.model_validate(
        {
            "kafka": section,
            "window_s": 2,
            "interval_ms": 50,
            "publish_samples": False,
            "metrics": {"enabled": False},
            "topic": {"name": f"sec-probe-{uuid.uuid4().hex[:6]}"},
        }
    )
    service = ProbeService(cfg)
    stop, windows = threading.Event(), []

    def on_window(_start: int, ws: dict) -> None:
        windows.append(ws)
        if len(windows) >= 3:  # the first is partial (connection set-up)
            stop.set()

    runner = threading.Thread(target=service.run, args=(stop, on_window), daemon=True)
    runner.start()
    runner.join(40)
    stop.set()
    runner.join(10)
    service.close()
    assert len(windows) >= 3
    assert windows[-1][secured.nodes[0].node_id].ok > 0  # probes produced and read back over SASL_SSL


# Timing: the reason is known only once one SASL exchange has failed within the service's 10 s
# bootstrap budget; until then kafka-python has only its timeout to say (clean-clone runs ended
# with "no broker answered in time" on a loaded machine, twice in a row once). Every attempt's
# message is one line naming the address and never the password; up to three attempts, one
# must name the authentication.
@pytest.mark.timing
def test_a_wrong_password_is_one_line_naming_authentication(section: dict[str, Any], tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.password"
    wrong.write_text("not-" + PASSWORD)
    messages = []
    for _ in range(3):
        with pytest.raises(KafkaConnectError) as e:
            LagService(_lag_config({**section, "sasl_password_file": str(wrong)}, "any"))
        message = str(e.value)
        messages.append(message)
        assert message.startswith(
            f"cannot use Kafka at {section['bootstrap_servers']} (SASL_SSL, SCRAM-SHA-512 as {USER}): "
        )
        assert PASSWORD not in message and "\n" not in message
        if "no broker answered in time" not in message:
            break
    assert "authentication failed (SaslAuthenticationFailedError" in messages[-1], messages


# --- docs/quickstart.md, walked as written --------------------------------------------------------

QUICKSTART = Path(__file__).resolve().parents[2] / "docs/quickstart.md"
ETC = "/etc/linkwatch"
# The commands of the walk, in its order: a step added to the doc is added here too.
WALK = [
    ["init"],
    ["topics", "-c"],
    ["topics", "-c", "--create"],
    ["lag", "check", "-c"],
    ["probe", "check", "-c"],
    ["agent", "check", "-c"],
]


def _walk(etc: Path) -> list[list[str]]:
    """The ``linkwatch`` lines of the quickstart's ``sh`` blocks in order, ``/etc/linkwatch``
    replaced by ``etc``."""
    blocks = re.findall(r"```sh\n(.*?)```", QUICKSTART.read_text(), re.S)
    lines = [line for block in blocks for line in block.splitlines() if line.startswith("linkwatch ")]
    return [shlex.split(line.replace(ETC, str(etc)))[1:] for line in lines]


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.timing
@pytest.mark.skipif(shutil.which("prometheus") is None, reason="Debian prometheus missing")
def test_the_quickstart_walk_reaches_prometheus(
    secured: ClusterState, section: dict[str, Any], tmp_path: Path
) -> None:
    """docs/quickstart.md on a broker whose only client listener is SASL_SSL and which creates
    no topic on use: every ``linkwatch`` command of the doc run as written (init, the topics
    plan and its creation, the three checks), the configs edited as step 2 says, the three
    processes started by their units' ExecStart, and the doc's Prometheus example (targets
    pointed here) scraping them: every job up, each one's metrics there, no secret in any
    output."""
    etc = tmp_path / "etc"
    walk = _walk(etc)
    assert [[a for a in argv if not a.startswith("/")] for argv in walk] == WALK
    linkwatch = Path(sys.executable).with_name("linkwatch")

    def run(argv: list[str], code: int = 0) -> str:
        done = subprocess.run([str(linkwatch), *argv], capture_output=True, text=True, timeout=120)
        out = done.stdout + done.stderr
        assert done.returncode == code, f"linkwatch {' '.join(argv)} exited {done.returncode}:\n{out}"
        assert PASSWORD not in out
        return out

    run(walk[0])  # init
    (etc / "kafka.password").write_text(PASSWORD + "\n")
    kafka = {**section, "sasl_password_file": str(etc / "kafka.password")}
    ports = {job: free_port() for job in ("agent", "lag", "probe")}
    node = secured.nodes[0]

    def lag(doc: dict[str, Any]) -> None:
        doc["kafka"].update(kafka)
        doc["metrics"]["port"] = ports["lag"]

    def probe(doc: dict[str, Any]) -> None:
        doc["kafka"].update(kafka)
        doc["metrics"]["port"] = ports["probe"]

    def agent(doc: dict[str, Any]) -> None:
        doc["broker_id"] = node.node_id
        doc["request_log"].update(path=str(node.request_log), position_file=str(tmp_path / "position"))
        doc["jmx"]["jolokia_url"] = node.jolokia_url
        doc["log_dirs"]["paths"] = node.log_dirs
        doc["kafka"].update(kafka, enabled=True, spool_dir=str(tmp_path / "spool"))
        doc["capture"]["kafka"].update(kafka)
        doc["metrics"]["port"] = ports["agent"]

    _edit(etc / "lag.yaml", lag)
    _edit(etc / "probe.yaml", probe)
    _edit(etc / "agent.yaml", agent)

    plan = run(walk[1], code=1)  # a dry run exits 1 while topics are missing
    assert "would create linkwatch.samples, linkwatch.findings" in plan, plan
    assert "created linkwatch.samples" in run(walk[2])
    again = run(walk[1])
    assert "would create" not in again, again
    for argv in walk[3:]:
        out = run(argv)
        assert "✓" in out and "✗" not in out, out

    procs: list[Process] = []
    try:
        for unit in ("agent", "lag", "probe"):
            text = (etc / f"systemd/linkwatch-{unit}.service").read_text()
            exec_start = re.search(r"^ExecStart=(.*)$", text, re.M)
            assert exec_start, text
            argv = shlex.split(exec_start.group(1))
            procs.append(Process(unit, [str(linkwatch), *argv[1:]], tmp_path / f"{unit}.log"))
        prom, url = _doc_prometheus(etc, ports, tmp_path)
        procs.append(prom)
        prom.wait_http(f"{url}/-/ready", 60)
        wanted = {
            'up{job="linkwatch-agent"}': 1,
            'up{job="linkwatch-lag"}': 1,
            'up{job="linkwatch-probe"}': 1,
            "linkwatch_agent_lines_read_total > 0": 1,
            'linkwatch_kafka_up{process="lag"} == 1': 1,
            'linkwatch_kafka_up{process="probe"} == 1': 1,
            "linkwatch_probe_sent_total > 0": 1,
        }
        deadline, missing = time.monotonic() + 120, dict(wanted)
        while missing and time.monotonic() < deadline:
            for expr in list(missing):
                if [s for s in prometheus_query(url, expr) if s["value"][1] != "0"]:
                    del missing[expr]
            time.sleep(1)
        assert not missing, f"no answer to {sorted(missing)} in Prometheus; logs under {tmp_path}"
    finally:
        for p in reversed(procs):
            p.stop()
    for unit in ("agent", "lag", "probe"):
        log = (tmp_path / f"{unit}.log").read_text()
        assert PASSWORD not in log and "Traceback" not in log, f"{unit}:\n{log[-3000:]}"


def _doc_prometheus(etc: Path, ports: dict[str, int], tmp_path: Path) -> tuple[Process, str]:
    """The Prometheus example ``init`` wrote (its rules included), with its targets pointed at
    this host's ports and a 1 s scrape, started; ``promtool check config`` passes on it first.
    Returns the process and its URL."""
    doc = yaml.safe_load((etc / "prometheus.yml").read_text())
    doc["global"]["scrape_interval"] = "1s"
    doc.pop("alerting", None)  # no Alertmanager in this walk
    for job in doc["scrape_configs"]:
        name = job["job_name"].removeprefix("linkwatch-")
        if name not in ports:
            continue
        static = job["static_configs"][:1]
        static[0]["targets"] = [f"127.0.0.1:{ports[name]}"]
        job["static_configs"] = static
    doc["scrape_configs"] = [
        j for j in doc["scrape_configs"] if j["job_name"].removeprefix("linkwatch-") in ports
    ]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    check = subprocess.run([binary("promtool"), "check", "config", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    port = free_port()
    prom = Process(
        "prometheus",
        [
            binary("prometheus"),
            f"--config.file={path}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp_path / "prometheus.log",
    )
    return prom, f"http://127.0.0.1:{port}"
