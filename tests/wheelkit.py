"""One wheel built from this tree per test session, for the tests that install it in fresh
environments (tests/test_install.py, tests/analyzer/test_spark_from_wheel.py)."""

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
