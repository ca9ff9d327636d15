"""Jars from Maven Central in a local cache, resolved by Maven itself (``mvn``).

Maven does the resolving, so mirrors and proxies configured in ``~/.m2/settings.xml`` apply.
Each set of jars lives in its own directory under :data:`DEFAULT_CACHE_DIR` and is reused
without network afterwards. Used for the testbed's Kafka broker jars
(:mod:`testbed.jars`) and the Spark Kafka connector (:mod:`spark_metrics.jars`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from linkwatch.errors import SetupError

DEFAULT_CACHE_DIR = Path(os.environ.get("LINKWATCH_CACHE_DIR", Path.home() / ".cache" / "linkwatch"))
_COMPLETE_MARKER = ".complete"


def cached(root: Path, resolve: Callable[[], None], stamp: str) -> Path:
    """``root`` holding a finished resolve. Without its completion marker (never resolved, or
    an earlier resolve was interrupted) whatever is there is removed, ``resolve()`` fills the
    fresh directory, and the marker (holding ``stamp``) is written last."""
    if not (root / _COMPLETE_MARKER).exists():
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        resolve()
        (root / _COMPLETE_MARKER).write_text(stamp)
    return root


def mvn(args: list[str], cwd: Path, what: str) -> None:
    """Run ``mvn -B -q <args>`` in ``cwd``. No Maven, or a failed resolve of ``what``, is one
    :class:`SetupError` line saying what to do (the first ``[ERROR]`` line of Maven's output,
    else its last lines)."""
    found = shutil.which("mvn")
    if found is None:
        raise SetupError("Maven (mvn) is not installed: run `make bootstrap` or `apt-get install maven`")
    proc = subprocess.run([found, "-B", "-q", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        out = proc.stdout + proc.stderr
        errors = [line for line in out.splitlines() if "[ERROR]" in line]
        detail = errors[0] if errors else " | ".join(out.strip().splitlines()[-3:])
        raise SetupError(
            f"Maven could not resolve {what} ({detail}); check access to Maven Central "
            f"or a mirror in ~/.m2/settings.xml, then retry"
        )
