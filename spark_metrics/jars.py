"""Resolves the Spark Kafka connector from Maven Central into a local cache (no network later).

``org.apache.spark:spark-sql-kafka-0-10_2.13`` at exactly the pyspark version is neither in the
pyspark wheel nor on PyPI. Maven resolves it (:mod:`linkwatch.maven`) with
``dependency:copy-dependencies`` into ``~/.cache/linkwatch/spark-kafka-<version>/``; jars that
pyspark already ships (scala, slf4j, snappy …) are left out so the classpath has one copy each.
The result is passed to the session as ``spark.jars``. ``python -m spark_metrics.jars``
resolves it ahead of time (``scripts/bootstrap.sh``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pyspark

from linkwatch import maven
from linkwatch.errors import SetupError
from linkwatch.maven import DEFAULT_CACHE_DIR

SPARK_VERSION = pyspark.__version__
CONNECTOR = "spark-sql-kafka-0-10_2.13"
TOKEN_PROVIDER = "spark-token-provider-kafka-0-10_2.13"
# Some Maven Central mirrors lack the token provider at a patch release; the connector only
# needs its classes for delegation tokens, and they are unchanged within a minor line, so the
# resolver falls back to this release when the exact one cannot be found.
TOKEN_PROVIDER_FALLBACK = "4.0.0"

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

    def fetch() -> None:
        _copy_dependencies(root, lib, version)
        shipped = _pyspark_artifacts()
        for jar in lib.glob("*.jar"):
            if _artifact_id(jar.name) in shipped:
                jar.unlink()

    maven.cached(root, fetch, version)
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
            maven.mvn(args, root, f"{CONNECTOR}:{version}")
            return
        except SetupError as e:
            if TOKEN_PROVIDER not in str(e) or token_version == TOKEN_PROVIDER_FALLBACK:
                raise


if __name__ == "__main__":  # `python -m spark_metrics.jars`: pre-fetch (used by scripts/bootstrap.sh)
    for path in kafka_connector_jars():
        print(path)
