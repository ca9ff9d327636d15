"""Resolves the Kafka broker jars and the Jolokia agent from Maven Central into a local cache.

The POM is ``kafka-pom.xml`` beside this module; :mod:`linkwatch.maven` runs Maven and caches
the result under ``<cache>/kafka-<version>/``, reused without network afterwards.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from linkwatch import maven
from linkwatch.errors import SetupError
from linkwatch.maven import DEFAULT_CACHE_DIR

JOLOKIA_ARTIFACT = "jolokia-agent-jvm"


@dataclass(frozen=True)
class KafkaRuntime:
    """Where a resolved Kafka runtime lives: ``lib`` for the classpath, the agent jar beside it."""

    version: str
    lib_dir: Path
    jolokia_jar: Path

    @property
    def classpath(self) -> str:
        return str(self.lib_dir / "*")

    @property
    def cache_dir(self) -> Path:
        """This runtime's own directory (``lib`` is in it): what is derived from its jars."""
        return self.lib_dir.parent


def _pom_text() -> str:
    return resources.files("testbed").joinpath("kafka-pom.xml").read_text()


def kafka_version() -> str:
    match = re.search(r"<kafka.version>([^<]+)</kafka.version>", _pom_text())
    assert match, "kafka-pom.xml lost its kafka.version property"
    return match.group(1)


def _mvn(args: list[str], cwd: Path) -> None:
    maven.mvn(args, cwd, "the Kafka jars")


def resolve(cache_dir: Path = DEFAULT_CACHE_DIR) -> KafkaRuntime:
    """Return the cached runtime, resolving it with Maven on first use."""
    version = kafka_version()
    root = cache_dir / f"kafka-{version}"
    lib_dir, agent_dir = root / "lib", root / "agents"

    def fetch() -> None:
        (root / "pom.xml").write_text(_pom_text())
        copy = "dependency:copy-dependencies"
        libs = [
            f"-DoutputDirectory={lib_dir}",
            "-DincludeScope=runtime",
            f"-DexcludeArtifactIds={JOLOKIA_ARTIFACT}",
        ]
        _mvn([copy, *libs], cwd=root)
        _mvn([copy, f"-DoutputDirectory={agent_dir}", f"-DincludeArtifactIds={JOLOKIA_ARTIFACT}"], cwd=root)

    maven.cached(root, fetch, version)
    agents = sorted(agent_dir.glob(f"{JOLOKIA_ARTIFACT}-*-javaagent.jar"))
    if not agents or not list(lib_dir.glob("kafka_2.13-*.jar")):
        shutil.rmtree(root, ignore_errors=True)
        raise SetupError(f"the jar cache {root} is incomplete; it was removed, run the command again")
    return KafkaRuntime(version=version, lib_dir=lib_dir, jolokia_jar=agents[0])
