"""``linkwatch agent --config agent.yaml``: run the broker agent until SIGTERM/SIGINT;
``linkwatch agent check --config agent.yaml``: try what the config names."""

from __future__ import annotations

import importlib
import logging
import signal
import time
from pathlib import Path

import typer

from agent.config import AgentConfig, load_agent_config
from agent.requestlog.window import ClosedWindow
from agent.runner import Agent
from cli.commands import ConfigOnlyOpt, run_checks
from cli.logs import use_config_level

CONFIG_HELP = "Agent YAML config (`linkwatch init DIR` writes a sample, DIR/agent.yaml)."
ConfigOpt = typer.Option(..., "--config", "-c", help=CONFIG_HELP)
CheckOpt = typer.Option(
    False, "--check", help="Validate the config and exit (an older spelling of `agent check --config-only`)."
)
PrintOpt = typer.Option(
    False, "--print", help="Print every closed window: requests, p99 and the slowest stage per request type."
)

# `linkwatch agent -c F` runs the agent; `linkwatch agent check -c F` checks what F names.
app = typer.Typer(invoke_without_command=True)


@app.callback()
def run(
    ctx: typer.Context,
    config: Path = typer.Option(None, "--config", "-c", help=CONFIG_HELP),
    check: bool = CheckOpt,
    verbose: bool = PrintOpt,
) -> None:
    """Follow this broker's request log, JMX, log dirs and host; export to Prometheus, Kafka, OTLP.
    ``agent check -c FILE`` tries what the config names instead."""
    if ctx.invoked_subcommand is not None:
        return
    if config is None:
        missing = importlib.import_module(typer.BadParameter.__module__).MissingParameter
        raise missing(ctx=ctx, param=ctx.command.params[0])
    cfg = load_agent_config(config)
    if check:
        typer.echo(f"{config}: ok (cluster {cfg.cluster}, broker {cfg.broker_id})")
        return
    use_config_level(cfg.log_level)
    agent = Agent(cfg).start()
    log = logging.getLogger("linkwatch.agent")
    log.info(
        "agent for broker %s of %s started; /metrics on %s:%s",
        cfg.broker_id,
        cfg.cluster,
        cfg.metrics.host if cfg.metrics.enabled else "-",
        agent.metrics_port,
    )
    reading, unset = sources(cfg)
    log.info("reading: %s", "; ".join(reading) or "nothing")
    if unset:
        log.warning("not configured: %s", "; ".join(unset))
    # Each source says on its first read whether it could be opened, and why not.
    if verbose:
        agent.listeners.append(lambda win: typer.echo(format_window(cfg.broker_id, win)))
    signal.signal(signal.SIGTERM, lambda *_: agent._stop.set())
    try:
        agent.run()
    except KeyboardInterrupt:
        pass
    finally:
        agent.stop()


def sources(cfg: AgentConfig) -> tuple[list[str], list[str]]:
    """What the agent was configured to read, and what it was not (with the key that turns it
    on): said at start, so an agent that reads nothing does not look like one that is idle."""
    reading, unset = [], []
    rl = cfg.request_log
    (reading if rl.enabled else unset).append(
        f"request_log {rl.path}" if rl.enabled else "request_log (request_log.enabled: false)"
    )
    jmx = [f"jolokia {cfg.jmx.jolokia_url}"] if cfg.jmx.jolokia_url else []
    jmx += [f"jmx_exporter {cfg.jmx.exporter_url}"] if cfg.jmx.exporter_url else []
    reading += jmx
    if not jmx:
        unset.append("jmx (set jmx.jolokia_url or jmx.exporter_url)")
    if cfg.log_dirs.paths:
        reading.append("log_dirs " + ", ".join(str(p) for p in cfg.log_dirs.paths))
    else:
        unset.append("log_dirs (set log_dirs.paths to the broker's log.dirs)")
    (reading if cfg.host.enabled else unset).append(
        "host" if cfg.host.enabled else "host (host.enabled: false)"
    )
    return reading, unset


def format_window(broker: int, win: ClosedWindow) -> str:
    """A closed window as ``agent --print`` shows it: for its four busiest request types the
    requests logged, the p99 total and the slowest other stage with its p99."""
    from linkwatch.sketch import LatencySketch

    p99: dict[tuple[str, str], float] = {}
    counts: dict[str, int] = {}
    for s in win.sketches:
        q = LatencySketch.from_dict(s.sketch).quantile(0.99)
        if q is not None:
            p99[(s.request, s.stage)] = q
        if s.stage == "total":
            counts[s.request] = int(s.sketch.get("count", 0))
    parts = []
    for request, n in sorted(counts.items(), key=lambda kv: -kv[1])[:4]:  # the busiest types
        stages = {st: v for (r, st), v in p99.items() if r == request and st != "total"}
        slowest = max(stages, key=stages.__getitem__) if stages else None
        part = f"{request} {n} p99 {p99.get((request, 'total'), 0.0):.1f} ms"
        parts.append(part + (f" ({slowest} {stages[slowest]:.1f})" if slowest else ""))
    stamp = time.strftime("%H:%M:%S", time.localtime(win.start_ms / 1000))
    return f"{stamp} broker {broker}: " + ("; ".join(parts) or "no requests")


@app.command()
def check(config: Path = ConfigOpt, config_only: bool = ConfigOnlyOpt) -> None:
    """Validate the config, then try what it names: one ✓/✗ line each; exit 1 if any ✗."""
    from linkwatch import preflight

    cfg = load_agent_config(config)
    typer.echo(f"✓ {config}: valid (cluster {cfg.cluster}, broker {cfg.broker_id})")
    if config_only:
        return
    probes: list = []
    rl = cfg.request_log
    if rl.enabled:
        probes.append(lambda: preflight.readable_file(rl.path, "request_log.path", "broker's request log"))
        if rl.position_file is not None:
            probes.append(
                lambda: preflight.writable_dir(rl.position_file.parent, "request_log.position_file")
            )
    if cfg.jmx.jolokia_url:
        probes.append(lambda: preflight.http_answers(cfg.jmx.jolokia_url, "jmx.jolokia_url"))
    if cfg.jmx.exporter_url:
        probes.append(lambda: preflight.http_answers(cfg.jmx.exporter_url, "jmx.exporter_url"))
    if cfg.log_dirs.paths:
        probes.append(lambda: preflight.existing_dirs(cfg.log_dirs.paths, "log_dirs.paths"))
    kafka = preflight.KafkaProbes(cfg.kafka)
    if cfg.kafka.enabled:
        probes.append(lambda: preflight.writable_dir(cfg.kafka.spool_dir, "kafka.spool_dir"))
        probes += [kafka.answers, lambda: kafka.topics({"kafka.topic": cfg.kafka.topic})]
    for section, on in (
        ("jmx", bool(cfg.jmx.jolokia_url or cfg.jmx.exporter_url)),
        ("kafka", cfg.kafka.enabled),
    ):
        if not on:
            typer.echo(f"- {section}: not configured, nothing to try")
    run_checks(probes, kafka.close)
