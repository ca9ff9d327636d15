"""The shipped samples agree with each other and with the Prometheus example: one cluster name,
a distinct metrics port per process, and every process scraped on the port its sample names.
Copied as-is, the samples make a working set (the analyzer reads what the agents write)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from agent.config import AgentConfig
from analyzer.service import AnalyzerConfig
from consumer.config import ConsumerConfig
from lag.runner import LagConfig
from probe.config import ProbeConfig
from remediation.config import RemediatorConfig

CONFIG = Path(__file__).resolve().parents[1] / "config"

# sample -> (model, the Prometheus job scraping it, or None for a process without /metrics there)
SAMPLES: dict[str, tuple[type[BaseModel], str | None]] = {
    "agent.sample.yaml": (AgentConfig, "linkwatch-agent"),
    "lag.sample.yaml": (LagConfig, "linkwatch-lag"),
    "analyzer.sample.yaml": (AnalyzerConfig, "linkwatch-analyzer"),
    "probe.sample.yaml": (ProbeConfig, "linkwatch-probe"),
    "remediation.sample.yaml": (RemediatorConfig, None),
    "consumer.yaml": (ConsumerConfig, None),
}
DEFAULT_PORTS = {
    "agent.sample.yaml": 9308,
    "lag.sample.yaml": 9309,
    "analyzer.sample.yaml": 9310,
    "probe.sample.yaml": 9311,
}


def _load(name: str) -> BaseModel:
    model, _ = SAMPLES[name]
    return model.model_validate(yaml.safe_load((CONFIG / name).read_text()))


def _prometheus() -> dict[str, list[dict[str, Any]]]:
    """Job name -> its static configs, from config/prometheus.example.yml."""
    doc = yaml.safe_load((CONFIG / "prometheus.example.yml").read_text())
    return {job["job_name"]: job["static_configs"] for job in doc["scrape_configs"]}


def test_every_sample_names_the_same_cluster() -> None:
    clusters = {name: _load(name).cluster for name in SAMPLES}  # type: ignore[attr-defined]
    labels = {sc["labels"]["cluster"] for scs in _prometheus().values() for sc in scs}
    assert len(set(clusters.values())) == 1, clusters
    assert labels == set(clusters.values())


def test_left_at_their_defaults_every_component_names_the_same_cluster() -> None:
    """A component whose config names no cluster still sees the others' records."""
    from linkwatch.records import DEFAULT_CLUSTER

    defaults = {model.__name__: model.model_fields["cluster"].default for model, _ in SAMPLES.values()}
    assert set(defaults.values()) == {DEFAULT_CLUSTER}, defaults


def test_every_process_has_its_own_default_port_and_the_sample_shows_it() -> None:
    for name, port in DEFAULT_PORTS.items():
        assert _load(name).metrics.port == port, name  # type: ignore[attr-defined]
    assert len(set(DEFAULT_PORTS.values())) == len(DEFAULT_PORTS)


@pytest.mark.parametrize("name", [n for n, (_, job) in SAMPLES.items() if job])
def test_prometheus_scrapes_each_process_on_its_samples_port(name: str) -> None:
    job = SAMPLES[name][1]
    jobs = _prometheus()
    assert job in jobs, f"config/prometheus.example.yml has no job {job}"
    ports = {int(t.rsplit(":", 1)[1]) for sc in jobs[job] for t in sc["targets"]}
    assert ports == {_load(name).metrics.port}  # type: ignore[attr-defined]


def test_the_code_defaults_are_the_ports_the_samples_show() -> None:
    defaults = {
        "agent.sample.yaml": AgentConfig(broker_id=1).metrics.port,
        "lag.sample.yaml": LagConfig(kafka={"bootstrap_servers": "b:9092"}).metrics.port,
        "analyzer.sample.yaml": AnalyzerConfig().metrics.port,
        "probe.sample.yaml": ProbeConfig(kafka={"bootstrap_servers": "b:9092"}).metrics.port,
    }
    assert defaults == DEFAULT_PORTS


def test_every_sample_uses_the_shared_kafka_section() -> None:
    for name in SAMPLES:
        raw = yaml.safe_load((CONFIG / name).read_text())
        assert "kafka" in raw and "bootstrap_servers" not in raw and "bootstrap" not in raw, name
        assert _load(name).kafka.security_protocol == "PLAINTEXT"  # type: ignore[attr-defined]


def test_the_samples_topics_meet() -> None:
    """What the agents, the lag collector and the probe write is what the analyzer reads, and
    what the analyzer and the lag collector find is what the remediator reads."""
    agent, lag, probe = _load("agent.sample.yaml"), _load("lag.sample.yaml"), _load("probe.sample.yaml")
    analyzer, remediation = _load("analyzer.sample.yaml"), _load("remediation.sample.yaml")
    written = {agent.kafka.topic, lag.publish.samples_topic, probe.samples_topic}  # type: ignore[attr-defined]
    assert written == {analyzer.samples_topic}  # type: ignore[attr-defined]
    found = {analyzer.findings_topic, lag.publish.findings_topic}  # type: ignore[attr-defined]
    assert found == {remediation.findings_topic}  # type: ignore[attr-defined]
