"""Installing and starting linkwatch as an operator does: the command answers ``--help`` without
importing any subsystem, the agent's code path imports none of the analysis stack, ``linkwatch
init`` writes the shipped files (never over existing ones without ``--force``) and its units pass
``systemd-analyze verify``, and the wheel installed in fresh environments: ``linkwatch[agent]``
small and without Spark, pandas, pyarrow, plotly or a Grafana client; ``linkwatch[all]``
changing no file of any other package, also after an interpreter has started.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.requestlog import scanner
from cli.main import main
from tests.wheelkit import built_wheel, uv_install

ROOT = Path(__file__).resolve().parents[1]
UV = shutil.which("uv")
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
# What the agent on a broker host must never load (nor have installed).
# numpy too: the request log's compiled path reads into the standard library's arrays.
HEAVY = (
    "pyspark",
    "pandas",
    "pyarrow",
    "plotly",
    "grafana_client",
    "grafana_foundation_sdk",
    "py4j",
    "numpy",
)
# The agent's environment on a broker host (docs/install.md): 80 MB at most, the size aimed at.
AGENT_ENV_MAX_MB = 80
# Every long-running process has a unit.
UNITS = {
    "linkwatch-agent.service": "agent",
    "linkwatch-lag.service": "lag run",
    "linkwatch-probe.service": "probe run",
    "linkwatch-analyzer.service": "analyze",
    "linkwatch-alerts.service": "alerts serve",
    "linkwatch-remediator.service": "remediate run",
}


def _python(code: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, **kw
    )


# --- the command -----------------------------------------------------------------------------


def test_help_lists_every_command_and_imports_no_subsystem() -> None:
    done = _python(
        """
        import contextlib, io, json, sys
        from cli.main import main
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["--help"])
        print(json.dumps({"code": code, "help": out.getvalue(), "modules": sorted(sys.modules)}))
        """
    )
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["code"] == 0, done.stderr
    from cli.main import SUBCOMMANDS

    for name, _, _ in SUBCOMMANDS:
        assert f" {name} " in got["help"], name
    roots = {m.split(".")[0] for m in got["modules"]}
    subsystems = {"agent", "analyzer", "lag", "probe", "remediation", "alerts", "consumer", "testbed"}
    assert not roots & {*subsystems, *HEAVY, "kafka", "aiohttp", "numpy", "pydantic", "opentelemetry"}, (
        sorted(roots & {*subsystems, *HEAVY, "kafka", "aiohttp", "numpy", "pydantic", "opentelemetry"})
    )


def test_a_subcommand_runs_after_help_in_the_same_process(tmp_path: Path) -> None:
    # main() builds the command line per call: the subcommand named is the real one.
    assert main(["--help"]) == 0
    assert main(["init", str(tmp_path / "a")]) == 0
    assert (tmp_path / "a" / "agent.yaml").is_file()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--log-level", "LOUD", "init", "x"], "--log-level: 'LOUD' is not one of DEBUG"),
        (["--client-log-level", "chatty", "init", "x"], "--client-log-level: 'chatty'"),
    ],
)
def test_a_bad_log_level_is_named(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_client_libraries_log_at_warning_unless_asked() -> None:
    done = _python(
        """
        import logging
        from cli.logs import configure, use_config_level
        configure(None, "WARNING"); use_config_level("DEBUG")
        a = [logging.getLogger(n).getEffectiveLevel() for n in ("linkwatch.agent", "kafka.conn", "aiohttp.access", "py4j.clientserver")]
        configure("ERROR", "INFO"); use_config_level("DEBUG")
        b = [logging.getLogger(n).getEffectiveLevel() for n in ("linkwatch.agent", "kafka.conn", "aiohttp.access", "py4j.clientserver")]
        print(a, b)
        """
    )
    assert done.stdout.split("\n")[0] == "[10, 30, 30, 30] [40, 20, 20, 20]", done.stderr


# --- the agent's code path ---------------------------------------------------------------------

GUARD = """
import sys
REFUSED = {refused!r}
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in REFUSED:
            raise ImportError(f"the agent imported {{name}}")
        return None
sys.meta_path.insert(0, Refuse())
"""


def test_the_agent_code_path_imports_none_of_the_analysis_stack(tmp_path: Path) -> None:
    """Every module of the agent imported, its command checked, an agent built from the sample
    config started, stepped over a real request-log fixture and stopped, under an import hook
    that refuses the analysis stack."""
    log = tmp_path / "kafka-request.log"
    shutil.copy(ROOT / "tests/agent/fixtures/kafka-request.log", log)
    cfg = yaml.safe_load((ROOT / "config/agent.sample.yaml").read_text())
    cfg["request_log"].update(path=str(log), position_file=str(tmp_path / "pos"), start_at="beginning")
    cfg["kafka"]["enabled"] = False
    cfg["kafka"]["spool_dir"] = str(tmp_path / "spool")
    cfg["metrics"]["port"] = 0
    cfg["jmx"] = {"jolokia_url": None}
    cfg["capture"] = {"policy": "broker"}
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(cfg))
    code = GUARD.format(refused=HEAVY) + textwrap.dedent(
        f"""
        import importlib, pkgutil, agent
        for m in pkgutil.walk_packages(agent.__path__, "agent."):
            if not m.name.endswith("._scan"):  # the scanner's C library (ctypes), not a module
                importlib.import_module(m.name)
        from cli.main import main
        assert main(["agent", "--config", {str(path)!r}, "--check"]) == 0
        from agent.config import load_agent_config
        from agent.runner import Agent
        a = Agent(load_agent_config({str(path)!r})).start()
        try:
            a.step()
        finally:
            a.stop()
        from agent.requestlog import scanner
        print("scanner", scanner.STATUS, "lines", a.health.lines_read)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split("lines")[-1]) > 0, done.stdout
    if scanner.block_scan() is not None:  # built here: the agent read the fixture through it
        assert "scanner compiled " in done.stdout, done.stdout


# --- linkwatch init and the units ----------------------------------------------------------------


def test_init_writes_every_shipped_file_and_never_overwrites_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "etc"
    assert main(["init", str(target), "--command", "/usr/bin/true"]) == 0
    names = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert {
        "agent.yaml",
        "lag.yaml",
        "probe.yaml",
        "analyzer.yaml",
        "remediation.yaml",
        "alerts.yml",
    } <= names
    assert {"prometheus.yml", "alertmanager.yml", "rules/brokers.yml", "dashboards/slow-nodes.json"} <= names
    assert {f"systemd/{u}" for u in UNITS} <= names
    lag_unit = (target / "systemd/linkwatch-lag.service").read_text()
    assert f"ExecStart=/usr/bin/true lag run --config {target}/lag.yaml" in lag_unit
    assert f"{target}/rules/*.yml" in (target / "prometheus.yml").read_text()
    # A file edited by the operator is kept: nothing is written, and the error says why.
    (target / "lag.yaml").write_text("edited\n")
    capsys.readouterr()
    assert main(["init", str(target)]) == 2
    err = capsys.readouterr().err
    assert "already there" in err and "nothing written: use --force" in err
    assert (target / "lag.yaml").read_text() == "edited\n"
    assert main(["init", str(target), "--force"]) == 0
    assert (target / "lag.yaml").read_text() != "edited\n"


def test_every_long_running_process_has_a_unit_that_runs_it() -> None:
    units = {p.name: p.read_text() for p in (ROOT / "deploy").glob("*.service")}
    assert set(units) == set(UNITS)
    for name, command in UNITS.items():
        exec_start = [line for line in units[name].splitlines() if line.startswith("ExecStart=")]
        assert len(exec_start) == 1 and f"/opt/linkwatch/bin/linkwatch {command} " in exec_start[0], name


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (Debian: systemd)")
def test_the_units_init_writes_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    """``systemd-analyze verify`` reads each unit as systemd would (keys, values, the commands
    it runs exist and are executable) and needs no running systemd."""
    assert main(["init", str(tmp_path)]) == 0
    units = sorted((tmp_path / "systemd").glob("*.service"))
    assert len(units) == len(UNITS)
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", *map(str, units)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr.strip() and not done.stdout.strip(), done.stderr
    # And it is not a check that passes anything: a bad key and a missing command are caught.
    bad = tmp_path / "systemd" / "linkwatch-bad.service"
    bad.write_text(units[0].read_text().replace("Restart=", "Restrat=").replace(str(sys.executable), "/nope"))
    done = subprocess.run([SYSTEMD_ANALYZE, "verify", str(bad)], capture_output=True, text=True, timeout=60)
    assert "Unknown key" in done.stderr


# --- the wheel in fresh environments -----------------------------------------------------------


@pytest.fixture(scope="module")
def wheel() -> Path:
    if UV is None:
        pytest.skip("uv is not installed (make bootstrap installs it)")
    return built_wheel()


def _venv(where: Path, requirement: str) -> Iterator[Path]:
    assert UV is not None
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run(
        [UV, "venv", "-q", "--python", sys.executable, str(where)], check=True, env=env, timeout=120
    )
    python = where / "bin" / "python"
    uv_install(python, [requirement], env)
    yield python
    shutil.rmtree(where, ignore_errors=True)


def _site(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip())


def _installed(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, json, re; "
            "print(json.dumps({re.sub('[-_.]+', '-', d.metadata['Name']).lower(): d.version for d in m.distributions()}))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def _size_mb(site: Path) -> float:
    return sum(p.stat().st_size for p in site.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


@pytest.fixture(scope="module")
def agent_env(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    yield from _venv(tmp_path_factory.mktemp("agent-env") / "venv", f"linkwatch[agent] @ {wheel.as_uri()}")


def test_the_agent_environment_is_small_and_has_no_analysis_stack(agent_env: Path, tmp_path: Path) -> None:
    installed = _installed(agent_env)
    for dist in (
        "pyspark",
        "pyarrow",
        "pandas",
        "plotly",
        "grafana-client",
        "grafana-foundation-sdk",
        "py4j",
        "numpy",
    ):
        assert dist not in installed, dist
    assert {"linkwatch", "msgspec", "aiohttp", "kafka-python", "psutil"} <= installed.keys()
    size = _size_mb(_site(agent_env))
    assert size <= AGENT_ENV_MAX_MB, f"the agent's environment is {size:.0f} MB"
    if scanner.block_scan() is not None:  # the wheel carries the scanner built here; it loads there
        status = subprocess.run(
            [str(agent_env), "-c", "import agent.requestlog.scanner as s; print(s.STATUS)"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert status.stdout.strip() == "compiled", status.stdout + status.stderr
    # The command from the wheel: its help, and init writing the shipped files.
    linkwatch = agent_env.parent / "linkwatch"
    assert subprocess.run([str(linkwatch), "--help"], capture_output=True, timeout=60).returncode == 0
    done = subprocess.run(
        [str(linkwatch), "init", str(tmp_path / "etc")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    written = {p.name for p in (tmp_path / "etc" / "systemd").glob("*.service")}
    assert written == set(UNITS)
    assert (
        f"ExecStart={linkwatch} agent --config {tmp_path / 'etc'}/agent.yaml"
        in (tmp_path / "etc/systemd/linkwatch-agent.service").read_text()
    )
    done = subprocess.run(
        [str(linkwatch), "agent", "--config", str(tmp_path / "etc/agent.yaml"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr


def _record_mismatches(site: Path) -> list[str]:
    """Every installed file whose content no longer has the hash its package's RECORD gives."""
    bad = []
    for record in site.glob("*.dist-info/RECORD"):
        with record.open(newline="") as f:
            for row in csv.reader(f):
                # Scripts (outside site-packages) are written by the installer, not as packed.
                if len(row) < 2 or not row[1].startswith("sha256=") or row[0].startswith(".."):
                    continue
                path = (site / row[0]).resolve()
                if not path.is_file():
                    bad.append(f"{record.parent.name}: {row[0]} missing")
                    continue
                digest = base64.urlsafe_b64encode(hashlib.sha256(path.read_bytes()).digest()).rstrip(b"=")
                if row[1] != "sha256=" + digest.decode():
                    bad.append(f"{record.parent.name}: {row[0]} changed")
    return bad


def test_installing_everything_changes_no_other_package(wheel: Path, tmp_path: Path) -> None:
    """``linkwatch[all]``: after two interpreter starts (a ``.pth`` file acts at start) every
    file of every installed package is as its RECORD says, ``urllib3`` is urllib3's own, and no
    top-level ``test`` package or foreign ``.pth`` file is installed."""
    for python in _venv(tmp_path / "venv", f"linkwatch[all] @ {wheel.as_uri()}"):
        site = _site(python)
        for _ in range(2):
            done = subprocess.run(
                [
                    str(python),
                    "-c",
                    "import urllib3, importlib.metadata as m; print(urllib3.__file__, urllib3.__version__, m.version('urllib3'))",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
        where, version, dist_version = done.stdout.split()
        assert Path(where) == site / "urllib3" / "__init__.py" and version == dist_version, done.stdout
        assert _record_mismatches(site) == []
        assert not (site / "test").exists() and not (site / "tests").exists()
        pth = sorted(p.name for p in site.glob("*.pth"))
        assert set(pth) <= {"_virtualenv.pth", "distutils-precedence.pth"}, pth
        assert {"pyspark", "plotly", "grafana-foundation-sdk"} <= _installed(python).keys()
