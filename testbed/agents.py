"""Agents for the nodes of a local test cluster (tests, benchmarks and the demo).

* :func:`config_for_node` — an :class:`agent.config.AgentConfig` for a node of a
  :class:`testbed.cluster.ClusterState`, with overrides merged per section;
* :func:`start_agents_in_process` — one :class:`agent.runner.Agent` per config, each in a thread;
* :func:`start_agent_process` — ``linkwatch agent --config`` as a subprocess;
* :func:`ensure_output_topics` — the topics those agents publish to, created before they start
  (both starters call it: the testbed's clusters create no topic on use).
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import yaml

from agent.config import AgentConfig
from agent.runner import Agent
from linkwatch.records import DEFAULT_CLUSTER
from testbed.load import ensure_own_topics


def config_for_node(node, cluster: str = DEFAULT_CLUSTER, **overrides) -> AgentConfig:
    """An agent config for a node of a :class:`testbed.cluster.ClusterState`."""
    data = {
        "cluster": cluster,
        "broker_id": node.node_id,
        "request_log": {"path": str(node.request_log)},
        "metrics": {"port": 0},
        "jmx": {"jolokia_url": node.jolokia_url, "request_handler_pools": 2},  # combined nodes
        "log_dirs": {"paths": list(node.log_dirs)},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return AgentConfig.model_validate(data)


def ensure_output_topics(configs: list[AgentConfig]) -> None:
    """linkwatch's own topics on every cluster an agent of ``configs`` publishes to (its
    ``kafka.topic`` the samples topic): the testbed's clusters create no topic on use, and an
    agent does not create its output topic (an operator runs ``linkwatch topics --create``)."""
    seen: set[tuple[str, str]] = set()
    for cfg in configs:
        out = cfg.kafka
        if out.enabled and (out.bootstrap_servers, out.topic) not in seen:
            seen.add((out.bootstrap_servers, out.topic))
            ensure_own_topics(out, samples=out.topic)


def start_agents_in_process(configs: list[AgentConfig]) -> list[tuple[Agent, threading.Thread]]:
    """Start one :class:`Agent` per config in a daemon thread each; stop with ``agent.stop()``.
    The topics they publish to are created first (:func:`ensure_output_topics`)."""
    ensure_output_topics(configs)
    out = []
    for cfg in configs:
        agent = Agent(cfg).start()
        thread = threading.Thread(target=agent.run, name=f"agent-{cfg.broker_id}", daemon=True)
        thread.start()
        out.append((agent, thread))
    return out


def start_agent_process(
    config: AgentConfig, config_path: Path, log_path: Path | None = None
) -> subprocess.Popen:
    """Write ``config`` to ``config_path`` and run ``linkwatch agent --config`` on it, once the
    topic it publishes to exists (:func:`ensure_output_topics`)."""
    ensure_output_topics([config])
    config_path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", "agent", "--config", str(config_path)],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
