"""Where the shipped rule files and the Alertmanager example are, and running ``promtool`` over the rules."""

from __future__ import annotations

import shutil
import subprocess
from importlib import resources
from pathlib import Path

from linkwatch.errors import LinkwatchError, SetupError

ALERTS_DIR = Path(__file__).resolve().parent
RULES_DIR = ALERTS_DIR / "rules"
RULE_TESTS_DIR = ALERTS_DIR / "tests"
# Package data (read through importlib.resources, so it is found in an installed wheel too).
ALERTMANAGER_EXAMPLE = resources.files("alerts").joinpath("alertmanager.example.yml")


def rule_files() -> list[Path]:
    return sorted(RULES_DIR.glob("*.yml"))


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        raise SetupError("promtool not found: install the Debian package `prometheus` (make bootstrap)")
    return found


def check_rules() -> list[str]:
    """``promtool check rules`` then ``promtool test rules``; raises on the first failure."""
    lines = []
    for args in (
        ["check", "rules", *rule_files()],
        ["test", "rules", *sorted(RULE_TESTS_DIR.glob("*_test.yml"))],
    ):
        done = subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True, timeout=300)
        out = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise LinkwatchError(f"promtool {args[0]} rules failed:\n{out}")
        lines.append(f"promtool {args[0]} rules: ok ({out.count('SUCCESS')} files)")
    return lines
