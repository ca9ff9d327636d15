"""One wheel built from this tree per test session, for the tests that install it in fresh
environments (tests/test_install.py, tests/analyzer/test_spark_cluster.py)."""

from __future__ import annotations

import atexit
import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UV = shutil.which("uv")


@functools.cache
def built_wheel() -> Path:
    """The wheel ``uv build --wheel`` makes of this tree (the compiled scanner in it), built on
    first use and removed when the session ends."""
    assert UV is not None, "uv is not installed (make bootstrap installs it)"
    out = Path(tempfile.mkdtemp(prefix="linkwatch-wheel-"))
    atexit.register(shutil.rmtree, out, True)
    subprocess.run(
        [UV, "build", "--wheel", "-q", "-o", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = out.glob("*.whl")
    return wheel


def uv_install(python: Path, requirements: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
    """``uv pip install`` into the environment of ``python``: from uv's cache alone first
    (``--offline``), from the index only if something is not cached there. An index that sends
    no caching headers makes every online install revalidate, and an sdist-only package (pyspark)
    is then downloaded and built again each time: 80 s and 2 GB more in uv's cache per install,
    which filled this machine's disk. ``make bootstrap`` has cached what the lock file names."""
    assert UV is not None, "uv is not installed (make bootstrap installs it)"
    argv = [UV, "pip", "install", "-q", "--python", str(python), *requirements]
    offline = subprocess.run(
        [*argv, "--offline"], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )
    if offline.returncode == 0:
        return
    online = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if online.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} failed:\n{online.stderr[-3000:]}")
