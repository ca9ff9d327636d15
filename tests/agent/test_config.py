"""The agent config: the sample loads, bad keys and values stop start-up naming them."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config import load_agent_config
from cli.main import main
from linkwatch.errors import ConfigError

SAMPLE = Path(__file__).parents[2] / "config" / "agent.sample.yaml"


def test_sample_config_is_valid() -> None:
    cfg = load_agent_config(SAMPLE)
    assert cfg.broker_id == 1
    assert cfg.metrics.host == "127.0.0.1"


BAD = [
    ("unknown key", "broker_id: 1\nrequest_log: {pth: /x}\n", "request_log.pth: unknown key"),
    ("missing broker id", "cluster: a\n", "broker_id: required"),
    ("negative window", "broker_id: 1\nrequest_log: {window_s: -1}\n", "request_log.window_s=-1"),
    ("bad start_at", "broker_id: 1\nrequest_log: {start_at: middle}\n", "request_log.start_at='middle'"),
    ("kafka without servers", "broker_id: 1\nkafka: {enabled: true}\n", "bootstrap_servers is required"),
    ("cluster with slash", "broker_id: 1\ncluster: a/b\n", "cluster='a/b'"),
]


@pytest.mark.parametrize(("name", "text", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_the_key(name: str, text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_agent_config(path)
    assert message in str(err.value)


def test_cli_check_exits_2_with_the_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "agent.yaml"
    path.write_text("broker_id: x\n")
    assert main(["agent", "--config", str(path), "--check"]) == 2
    assert "broker_id='x'" in capsys.readouterr().err
    assert main(["agent", "--config", str(SAMPLE), "--check"]) == 0


# Paths that cannot work fail `--check` naming the key (they used to fail only at run time).
PATHS = [
    ("request log empty", "request_log: {path: ''}", "request_log.path='': Value error, must not be empty"),
    ("request log a directory", "request_log: {path: {tmp}}", "request_log.path="),
    ("position file empty", "request_log: {position_file: ''}", "request_log.position_file"),
    ("position file a directory", "request_log: {position_file: {tmp}}", "is a directory"),
    ("position file under a file", "request_log: {position_file: {tmp}/f/pos}", "is not a directory"),
    ("spool dir a file", "kafka: {spool_dir: {tmp}/f}", "kafka.spool_dir="),
    ("log dir empty", "log_dirs: {paths: ['']}", "log_dirs.paths.0=''"),
    ("log dir with NUL", 'log_dirs: {paths: ["a\\0b"]}', "NUL"),
]


@pytest.mark.parametrize(("name", "text", "message"), PATHS, ids=[p[0] for p in PATHS])
def test_paths_that_cannot_work_fail_check(
    name: str, text: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "f").write_text("a file")
    path = tmp_path / "agent.yaml"
    path.write_text("broker_id: 1\n" + text.replace("{tmp}", str(tmp_path)) + "\n")
    assert main(["agent", "--config", str(path), "--check"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
