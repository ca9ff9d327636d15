"""The ``linkwatch`` command's own error handling: every usage error ends in the usage
message and exit code 2, never a traceback (it used to end in ``ModuleNotFoundError: click``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cli.main import main

USAGE_ERRORS = [
    # (argv, text the error output must contain)
    (["alerts", "serve", "--port", "abc"], "Invalid value for '--port'"),
    (["agent"], "Missing option '--config'"),
    (["agent", "--config"], "Option '--config' requires an argument"),
    (["lag", "check"], "Missing option '--config'"),
    (["lag", "once", "--config", "x.yaml", "--passes", "0"], "--passes"),
    (["nosuch"], "No such command 'nosuch'"),
    (["alerts", "serve", "--bogus"], "No such option: --bogus"),
    (["alerts", "nosuch"], "No such command"),
    (["consume"], "Missing"),
]


@pytest.mark.parametrize(("argv", "message"), USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_print_the_usage_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_config_error_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lag", "check", "--config", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("linkwatch: error: ") and "cannot read the file" in err
    assert err.count("\n") == 1


def test_the_installed_command_exits_2_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "cli.main", "alerts", "serve", "--port", "abc"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "Usage:" in done.stderr and "Traceback" not in done.stderr
