"""``linkwatch agent --config agent.yaml``: run the broker agent until SIGTERM/SIGINT."""

from __future__ import annotations

import logging
import signal
from pathlib import Path

import typer

from agent.config import load_agent_config
from agent.runner import Agent

ConfigOpt = typer.Option(..., "--config", "-c", help="Agent YAML config (see config/agent.sample.yaml).")
CheckOpt = typer.Option(False, "--check", help="Validate the config and exit.")


def app(config: Path = ConfigOpt, check: bool = CheckOpt) -> None:
    """Follow this broker's request log, JMX, log dirs and host; export to Prometheus, Kafka, OTLP."""
    cfg = load_agent_config(config)
    if check:
        typer.echo(f"{config}: ok (cluster {cfg.cluster}, broker {cfg.broker_id})")
        return
    logging.basicConfig(level=cfg.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent = Agent(cfg).start()
    logging.getLogger("linkwatch.agent").info(
        "agent for broker %s of %s started; /metrics on %s:%s",
        cfg.broker_id,
        cfg.cluster,
        cfg.prometheus.host if cfg.prometheus.enabled else "-",
        agent.metrics_port,
    )
    signal.signal(signal.SIGTERM, lambda *_: agent._stop.set())
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    finally:
        agent.stop()
