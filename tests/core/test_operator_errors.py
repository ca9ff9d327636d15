"""Mistakes an operator makes, answered in one line, exit code 2, no traceback, within 10 s: a
bootstrap nothing answers on (a closed loopback port), a port already taken by another listener,
a state directory that cannot be one. Run through ``cli.main.main`` as the command runs it."""

from __future__ import annotations

import importlib
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.main import main
from linkwatch import config
from tests.core.test_reach import closed_port


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another process (here: a socket of this test) listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, float]:
    """Exit code, stderr and seconds taken, not counting the command's imports (a loaded test
    machine can take seconds to import Kafka's client; the bound is on the waiting)."""
    importlib.import_module(f"cli.commands.{argv[0]}")
    started = time.monotonic()
    code = main(argv)
    return code, capsys.readouterr().err, time.monotonic() - started


def error_line(err: str) -> str:
    """The error the command ended with: its last line, which must be its only error line."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("linkwatch: error: ")]
    assert len(errors) == 1 and err.rstrip("\n").endswith(errors[0]), err
    return errors[0]


UNREACHABLE = [
    # (argv with {cfg} for a config file, {addr} for the bootstrap; config body)
    (["lag", "once", "-c", "{cfg}"], 'bootstrap_servers: "{addr}"\n'),
    (["probe", "once", "-c", "{cfg}"], 'bootstrap_servers: "{addr}"\n'),
    (["remediate", "plan", "-c", "{cfg}", "--rule", "slow_broker", "--subject", "broker:1"], "REM"),
    (["remediate", "cancel", "-c", "{cfg}"], "REM"),
    (["remediate", "undo", "-c", "{cfg}", "a-1"], "REM"),
    (["consume", "some-topic", "--bootstrap", "{addr}"], None),
    (["load", "--bootstrap", "{addr}", "--duration", "1"], None),
    (["fleet", "--bootstrap", "{addr}", "--duration", "1", "--brokers", "3"], None),
    (["report", "--from", "0", "--to", "1000", "--source", "kafka", "-c", "{cfg}"], 'bootstrap: "{addr}"\n'),
]


@pytest.mark.parametrize(("argv", "body"), UNREACHABLE, ids=[" ".join(a[:2]) for a, _ in UNREACHABLE])
def test_an_unreachable_bootstrap_is_one_line_naming_the_address(
    argv: list[str], body: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    addr = f"127.0.0.1:{closed_port()}"
    cfg = tmp_path / "c.yaml"
    if body == "REM":
        body = f'bootstrap_servers: "{addr}"\nstate_dir: {tmp_path / "state"}\n'
    if body is not None:
        cfg.write_text(body.format(addr=addr))
    code, err, took = run([a.format(cfg=cfg, addr=addr) for a in argv], capsys)
    assert code == 2
    line = error_line(err)
    assert "cannot reach Kafka at" in line and addr in line and "nothing listens on that port" in line
    assert took < 10


def test_a_host_that_does_not_resolve_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    code, err, took = run(["consume", "t", "--bootstrap", "kafka-1.invalid:9092"], capsys)
    assert code == 2 and took < 10
    assert error_line(err).endswith(
        "cannot reach Kafka at --bootstrap kafka-1.invalid:9092: the host name does not resolve "
        "(a typo, or a name only another network knows)"
    )


LISTENERS = [
    # (argv, config body or None); {port} is the taken port; the bootstrap answers nowhere
    (["agent", "-c", "{cfg}"], "AGENT"),
    (["alerts", "serve", "--port", "{port}"], None),
    (
        ["lag", "run", "-c", "{cfg}"],
        'kafka: {{bootstrap_servers: "127.0.0.1:1"}}\nmetrics: {{port: {port}}}\n',
    ),
    (
        ["probe", "run", "-c", "{cfg}"],
        'kafka: {{bootstrap_servers: "127.0.0.1:1"}}\nmetrics: {{port: {port}}}\n',
    ),
    (["trace", "join", "--forward", "http://127.0.0.1:1/v1/traces", "--port", "{port}"], None),
]


@pytest.mark.parametrize(("argv", "body"), LISTENERS, ids=[" ".join(a[:2]) for a, _ in LISTENERS])
def test_a_port_in_use_is_one_line_naming_host_and_port(
    argv: list[str],
    body: str | None,
    taken_port: int,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LINKWATCH_ALERTS_TOKEN", "t0ken")
    cfg = tmp_path / "c.yaml"
    if body == "AGENT":
        body = (
            "cluster: c\nbroker_id: 1\ncapture: {{policy: broker}}\nprometheus: {{port: {port}}}\n"
            f"request_log: {{{{path: {tmp_path / 'r.log'}, position_file: {tmp_path / 'pos'}}}}}\n"
        )
    if body is not None:
        cfg.write_text(body.format(port=taken_port))
    code, err, took = run([a.format(cfg=cfg, port=taken_port) for a in argv], capsys)
    assert code == 2
    line = error_line(err)
    assert f"cannot listen on 127.0.0.1:{taken_port}: the address is already in use" in line
    assert took < 10  # lag and probe say it before they wait for any cluster


STATE_DIRS = [
    # (state_dir relative to tmp_path, what the message says; {dir} as the message shows a value:
    # quoted, and cut short past config.MAX_SHOWN characters with the length said, as a test worker's long tmp
    # path is; the same for the path named in the reason)
    ("a-file", "state_dir={dir}: Value error, exists and is not a directory"),
    ("a-file/below", "state_dir={dir}: Value error, cannot be created: {above} is not a directory"),
]


@pytest.mark.parametrize(("state_dir", "message"), STATE_DIRS)
def test_remediate_status_with_a_state_dir_that_cannot_be_is_a_config_error(
    state_dir: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("")
    cfg = tmp_path / "r.yaml"
    cfg.write_text(f"state_dir: {tmp_path / state_dir}\n")
    code, err, _ = run(["remediate", "status", "-c", str(cfg)], capsys)
    assert code == 2
    assert error_line(err) == f"linkwatch: error: {cfg}: " + message.format(
        dir=config._short_repr(str(tmp_path / state_dir)), above=config._shown(str(tmp_path / "a-file"))
    )


def test_remediate_status_with_a_state_file_that_is_not_state_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "state.json").write_text("{not json")
    cfg = tmp_path / "r.yaml"
    cfg.write_text(f"state_dir: {tmp_path / 'state'}\n")
    code, err, _ = run(["remediate", "status", "-c", str(cfg)], capsys)
    assert code == 2
    line = error_line(err)
    assert line.startswith(f"linkwatch: error: state_dir: {tmp_path / 'state' / 'state.json'} cannot be read")


def test_lag_run_waits_for_an_unreachable_cluster_says_so_once_and_exports_it(tmp_path: Path) -> None:
    """The long-running form: it keeps running and serving /metrics, logs the cause once while
    it retries, and stops cleanly on SIGINT."""
    import signal
    import urllib.request

    port = closed_port()
    metrics_port = closed_port()
    cfg = tmp_path / "lag.yaml"
    cfg.write_text(f'kafka: {{bootstrap_servers: "127.0.0.1:{port}"}}\nmetrics: {{port: {metrics_port}}}\n')
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "lag", "run", "-c", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        scraped = ""
        while time.monotonic() < deadline:
            try:
                scraped = (
                    urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2)
                    .read()
                    .decode()
                )
            except OSError:
                scraped = ""
            failed = [
                float(line.split()[-1])
                for line in scraped.splitlines()
                if line.startswith('linkwatch_kafka_unreachable_total{process="lag"}')
            ]
            if failed and failed[0] >= 3:
                break
            time.sleep(0.5)
        assert 'linkwatch_kafka_up{process="lag"} 0.0' in scraped, scraped[-2000:]
        assert failed and failed[0] >= 3, scraped[-2000:]
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    said = [line for line in err.splitlines() if "cannot reach Kafka" in line]
    assert len(said) == 1, err
    assert f"127.0.0.1:{port}" in said[0] and "retrying with back-off" in said[0]
    assert "Traceback" not in err
    assert not re.search(r"(DEBUG|INFO|WARNING|ERROR) kafka\.", err)  # none of the client's own retry chatter
