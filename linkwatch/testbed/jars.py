"""Resolves the Kafka broker jars and the Jolokia agent from Maven Central into a local cache.

Maven does the resolving (so mirrors and proxies configured in ``~/.m2/settings.xml`` apply);
the result is cached under ``<cache>/kafka-<version>/`` and reused without network afterwards.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from linkwatch.errors import SetupError

DEFAULT_CACHE_DIR = Path(os.environ.get("LINKWATCH_CACHE_DIR", Path.home() / ".cache" / "linkwatch"))
JOLOKIA_ARTIFACT = "jolokia-agent-jvm"
_COMPLETE_MARKER = ".complete"


@dataclass(frozen=True)
class KafkaRuntime:
    """Where a resolved Kafka runtime lives: ``lib`` for the classpath, the agent jar beside it."""

    version: str
    lib_dir: Path
    jolokia_jar: Path

    @property
    def classpath(self) -> str:
        return str(self.lib_dir / "*")


def _pom_text() -> str:
    return resources.files("linkwatch.testbed").joinpath("kafka-pom.xml").read_text()


def kafka_version() -> str:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", _pom_text())
    assert match, "kafka-pom.xml lost its kafka.version property"
    return match.group(1)


def _mvn(args: list[str], cwd: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("Maven (mvn) is not installed: run `make bootstrap` or `apt-get install maven`")
    proc = subprocess.run([mvn, "-B", "-q", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise SetupError(
            f"Maven could not resolve the Kafka jars ({tail}); check access to Maven Central "
            f"or a mirror in ~/.m2/settings.xml, then retry"
        )


def resolve(cache_dir: Path = DEFAULT_CACHE_DIR) -> KafkaRuntime:
    """Return the cached runtime, resolving it with Maven on first use."""
    version = kafka_version()
    root = cache_dir / f"kafka-{version}"
    lib_dir, agent_dir = root / "lib", root / "agents"
    if not (root / _COMPLETE_MARKER).exists():
        if root.exists():
            shutil.rmtree(root)  # a half-finished earlier resolve
        root.mkdir(parents=True)
        (root / "pom.xml").write_text(_pom_text())
        copy = "dependency:copy-dependencies"
        _mvn(
            [
                copy,
                f"-DoutputDirectory={lib_dir}",
                "-DincludeScope=runtime",
                f"-DexcludeArtifactIds={JOLOKIA_ARTIFACT}",
            ],
            cwd=root,
        )
        _mvn([copy, f"-DoutputDirectory={agent_dir}", f"-DincludeArtifactIds={JOLOKIA_ARTIFACT}"], cwd=root)
        (root / _COMPLETE_MARKER).write_text(version)
    agents = sorted(agent_dir.glob(f"{JOLOKIA_ARTIFACT}-*-javaagent.jar"))
    if not agents or not list(lib_dir.glob("kafka_2.13-*.jar")):
        shutil.rmtree(root, ignore_errors=True)
        raise SetupError(f"the jar cache {root} is incomplete; it was removed, run the command again")
    return KafkaRuntime(version=version, lib_dir=lib_dir, jolokia_jar=agents[0])
