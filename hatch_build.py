"""Wheel build hook: the request log's compiled block scanner goes into the wheel.

A wheel built from this tree carries ``agent/requestlog/_scan.so`` compiled for the machine that
builds it, and is tagged for that platform (``py3-none-linux_x86_64``, not ``py3-none-any``), so an agent installed from it
reads the log by the compiled path exactly as one run from the repository after
``make build-ext``. Without a C compiler the build fails and says so;
``LINKWATCH_PURE_WHEEL=1`` builds a pure-Python wheel instead (the agent then reads by the
Python path and reports ``scanner: python`` in its health).

Editable installs (``uv sync`` in the repository) are left alone: ``make build-ext`` builds the
library in place there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("agent/requestlog/_scan.c")
LIBRARY = "agent/requestlog/_scan.so"
# The same flags as the Makefile's build-ext.
CFLAGS = ["-O2", "-Wall", "-Wextra", "-shared", "-fPIC"]


class ScannerBuildHook(BuildHookInterface):
    PLUGIN_NAME = "linkwatch-scanner"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or version == "editable":
            return
        if os.environ.get("LINKWATCH_PURE_WHEEL") == "1":
            self.app.display_warning("LINKWATCH_PURE_WHEEL=1: wheel without the compiled scanner")
            return
        named = os.environ.get("CC")
        cc = shutil.which(named) if named else shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise RuntimeError(
                f"no C compiler ({named or 'cc'}) to build the request log's scanner into the wheel; install one "
                "(Debian: gcc libc6-dev) or set LINKWATCH_PURE_WHEEL=1 for a pure-Python wheel"
            )
        out_dir = Path(tempfile.mkdtemp(prefix="linkwatch-scan-"))
        out = out_dir / "_scan.so"
        # An argument list, no shell: the compiler path comes from the environment.
        subprocess.run([cc, *CFLAGS, "-o", str(out), str(Path(self.root) / SOURCE)], check=True)
        build_data["force_include"][str(out)] = LIBRARY
        build_data["pure_python"] = False
        # ctypes loads the library: any Python 3, no ABI, but this platform only.
        build_data["tag"] = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
