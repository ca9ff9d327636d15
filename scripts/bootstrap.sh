#!/usr/bin/env bash
# Installs everything linkwatch needs on a fresh Debian machine; safe to run again (it skips
# what is already there). Called by `make demo` and `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'bootstrap: %s\n' "$*" >&2; }

# Debian packages: Java 17+ for Kafka and Spark, Maven to resolve jars, Prometheus/promtool and
# Alertmanager for the alert tests and the demo.
apt_pkgs=()
# javac: the capture-cost bench compiles its Java load client against the broker jars.
command -v javac >/dev/null || apt_pkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || apt_pkgs+=(maven)
command -v promtool >/dev/null || apt_pkgs+=(prometheus)
# cc: the request log's compiled block scanner (make build-ext).
command -v cc >/dev/null || apt_pkgs+=(gcc libc6-dev)
command -v prometheus-alertmanager >/dev/null || [ -x /usr/bin/alertmanager ] || apt_pkgs+=(prometheus-alertmanager)
if [ ${#apt_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    log "missing Debian packages: ${apt_pkgs[*]}; run: sudo apt-get install -y ${apt_pkgs[*]}"
    exit 1
  fi
  log "installing Debian packages: ${apt_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends keeps the service packages from pulling init integration we do not use.
  apt-get install -y -qq --no-install-recommends "${apt_pkgs[@]}" >/dev/null
fi

# Python: uv from PyPI, then the locked environment in .venv.
if ! command -v uv >/dev/null; then
  log "installing uv"
  python3 -m pip install -q uv
fi
# urllib3 reinstalled: an environment that once had urllib3-future (pulled by grafana-client,
# no longer a dependency) still has that fork's files copied over urllib3's own.
uv sync --frozen --quiet --reinstall-package urllib3

# The compiled block scanner of the request log (a shared library next to its source).
make --no-print-directory build-ext >&2

# Maven Central: Kafka broker jars and the Jolokia agent into ~/.cache/linkwatch.
.venv/bin/linkwatch cluster fetch
# Maven Central: the Spark Kafka connector at the pyspark version (for `linkwatch analyze`).
.venv/bin/python -m spark_metrics.jars >/dev/null
