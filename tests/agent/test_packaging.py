"""The wheel carries the compiled request-log scanner (hatch_build.py): built with the real build
backend (``uv build``), unpacked, and the agent's scanner imported from the unpacked tree in a
fresh interpreter, not from this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
UV = shutil.which("uv")
pytestmark = pytest.mark.skipif(UV is None, reason="uv is not installed (make bootstrap installs it)")

PROBE = """
import json, agent.requestlog.scanner as s
print(json.dumps({"file": s.__file__, "status": s.STATUS, "scan": s.block_scan() is not None}))
"""


def build_wheel(out: Path, **env: str) -> Path:
    assert UV is not None
    done = subprocess.run(
        [UV, "build", "--wheel", "-o", str(out), str(ROOT)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode:
        raise BuildFailed(done.stderr)
    [wheel] = out.glob("*.whl")
    return wheel


class BuildFailed(Exception):
    pass


def scanner_in(wheel: Path, where: Path) -> dict:
    """Import the scanner from the unpacked wheel, run from ``where`` (PYTHONPATH comes before
    the checkout's editable install, and the working directory is not the checkout)."""
    tree = where / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(tree)
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=where,
        env={**os.environ, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_wheel_carries_the_compiled_scanner_for_its_platform(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist")
    assert wheel.name.startswith("linkwatch-") and "-py3-none-linux_" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert names.count("agent/requestlog/_scan.so") == 1
    got = scanner_in(wheel, tmp_path)
    assert Path(got["file"]).is_relative_to(tmp_path / "unpacked"), got
    assert got["status"] == "compiled" and got["scan"], got


def test_a_pure_wheel_is_asked_for_and_reads_by_the_python_path(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "dist", LINKWATCH_PURE_WHEEL="1")
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    assert not [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith(".so")]
    got = scanner_in(wheel, tmp_path)
    assert got["status"].startswith("python (no ") and not got["scan"], got


def test_without_a_compiler_the_build_fails_and_names_the_way_out(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-cc"
    with pytest.raises(BuildFailed) as info:
        build_wheel(tmp_path / "dist", CC=str(missing))
    assert f"no C compiler ({missing})" in str(info.value) and "LINKWATCH_PURE_WHEEL=1" in str(info.value)
    assert not list((tmp_path / "dist").glob("*.whl"))
