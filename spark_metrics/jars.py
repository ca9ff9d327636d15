"""Resolves the Spark Kafka connector from Maven Central into a local cache (no network later).

``org.apache.spark:spark-sql-kafka-0-10_2.13`` at exactly the pyspark version is neither in the
pyspark wheel nor on PyPI. Maven resolves it (so mirrors in ``~/.m2/settings.xml`` apply) with
``dependency:copy-dependencies`` into ``~/.cache/linkwatch/spark-kafka-<version>/``; jars that
pyspark already ships (scala, slf4j, snappy …) are left out so the classpath has one copy each.
The result is passed to the session as ``spark.jars``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pyspark

from linkwatch.errors import SetupError
from linkwatch.testbed.jars import DEFAULT_CACHE_DIR

SPARK_VERSION = pyspark.__version__
CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
# Some Maven Central mirrors lack the token provider at a patch release; the connector only
# needs its classes for delegation tokens, and they are unchanged within a minor line, so the
# resolver falls back to this release when the exact one cannot be found.
TOKEN_PROVIDER_FALLBACK = "4.0.0"
_COMPLETE_MARKER = ".complete"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>linkwatch</groupId>
  <artifactId>spark-kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>{connector}</artifactId>
      <version>{version}</version>
      <exclusions>
        <exclusion>
          <groupId>org.apache.spark</groupId>
          <artifactId>{token}</artifactId>
        </exclusion>
      </exclusions>
    </dependency>
    <dependency>
      <groupId>org.apache.spark</groupId>
      <artifactId>{token}</artifactId>
      <version>{token_version}</version>
    </dependency>
  </dependencies>
</project>
"""


def _pyspark_artifacts() -> set[str]:
    """Artifact ids of the jars pyspark ships (``scala-library-2.13.16.jar`` → ``scala-library``)."""
    jars = Path(pyspark.__file__).parent / "jars"
    return {_artifact_id(p.name) for p in jars.glob("*.jar")}


def _artifact_id(jar_name: str) -> str:
    return re.sub(r"-\d[^-]*(-[A-Za-z][\w.]*)?\.jar$", "", jar_name)


def kafka_connector_jars(cache_dir: Path = DEFAULT_CACHE_DIR, version: str = SPARK_VERSION) -> list[Path]:
    """The connector jars (resolved on first use), to join with commas into ``spark.jars``."""
    root = cache_dir / f"spark-kafka-{version}"
    lib = root / "lib"
    if not (root / _COMPLETE_MARKER).exists():
        if root.exists():
            shutil.rmtree(root)  # a half-finished earlier resolve
        root.mkdir(parents=True)
        _copy_dependencies(root, lib, version)
        shipped = _pyspark_artifacts()
        for jar in lib.glob("*.jar"):
            if _artifact_id(jar.name) in shipped:
                jar.unlink()
        (root / _COMPLETE_MARKER).write_text(version)
    jars = sorted(lib.glob("*.jar"))
    if not any(j.name.startswith(CONNECTOR) for j in jars):
        raise SetupError(f"{lib} has no {CONNECTOR} jar; delete {root} and retry")
    return jars


def _copy_dependencies(root: Path, lib: Path, version: str) -> None:
    args = ["dependency:copy-dependencies", f"-DoutputDirectory={lib}", "-DincludeScope=runtime"]
    for token_version in dict.fromkeys([version, TOKEN_PROVIDER_FALLBACK]):
        pom = _POM.format(
            connector=CONNECTOR, version=version, token=TOKEN_PROVIDER, token_version=token_version
        )
        (root / "pom.xml").write_text(pom)
        try:
            _mvn(args, root)
            return
        except SetupError as e:
            if TOKEN_PROVIDER not in str(e) or token_version == TOKEN_PROVIDER_FALLBACK:
                raise


def _mvn(args: list[str], cwd: Path) -> None:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SetupError("Maven (mvn) is not installed: run `make bootstrap` or `apt-get install maven`")
    proc = subprocess.run([mvn, "-B", "-q", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [line for line in (proc.stdout + proc.stderr).splitlines() if "[ERROR]" in line]
        tail = errors[0] if errors else (proc.stdout + proc.stderr).strip()[-300:]
        raise SetupError(
            f"Maven could not resolve {CONNECTOR}:{SPARK_VERSION} ({tail}); check access to Maven "
            f"Central or a mirror in ~/.m2/settings.xml, then retry"
        )


if __name__ == "__main__":  # `python -m spark_metrics.jars`: pre-fetch (used by scripts/bootstrap.sh)
    for path in kafka_connector_jars():
        print(path)
