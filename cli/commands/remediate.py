"""``linkwatch remediate``: plan, run, status, and the operator commands pause, resume, reset,
cancel, undo — which go through the remediator that acts (see docs/remediation.md)."""

from __future__ import annotations

import getpass
import json
import time
from pathlib import Path
from typing import Any

import typer

from cli.commands import ConfigOnlyOpt, check_cluster_config, stop_on_signals
from linkwatch import reach
from linkwatch.errors import ConfigError
from linkwatch.kafka_client import security_kwargs
from linkwatch.reach import check_kafka, kafka_errors
from linkwatch.records import Finding
from remediation.config import RemediatorConfig, load_remediation_config
from remediation.control import command, send
from remediation.remediator import Remediator
from remediation.service import build, serve
from remediation.status import read_state, render

app = typer.Typer(no_args_is_help=True)

ConfigOpt = typer.Option(
    ..., "--config", "-c", help="YAML config (`linkwatch init DIR` writes a sample, DIR/remediation.yaml)."
)
TimeoutOpt = typer.Option(30.0, "--timeout", help="Seconds to wait for the acting remediator's reply.")
TakeLeaseOpt = typer.Option(
    False, "--take-lease", help="No remediator answers: join the lease group and act as the holder."
)


def _finding(path: Path | None, rule: str | None, subject: str | None, cluster: str) -> Finding:
    if path is not None:
        try:
            obj = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            raise ConfigError(str(path), [f"not a readable finding JSON ({e})"]) from None
        obj.setdefault("v", 1)
        obj.setdefault("kind", "finding")
        from linkwatch.records import RecordError, from_dict

        try:
            f = from_dict(obj)
        except RecordError as e:
            raise ConfigError(str(path), [str(e)]) from None
        if not isinstance(f, Finding):
            raise ConfigError(str(path), ["not a finding"])
        return f
    if not rule or not subject:
        raise ConfigError("--finding", ["give --finding FILE, or --rule and --subject"])
    return Finding(
        cluster=cluster,
        source="cli",
        ts_ms=int(time.time() * 1000),
        rule=rule,
        subject=subject,
        severity="warning",
        summary="from the command line",
        evidence={},
        action="",
    )


def connect(cfg: RemediatorConfig) -> Remediator:
    """The remediator of a one-shot command, once the cluster is known to answer."""
    check_kafka(cfg.kafka, "kafka.bootstrap_servers")
    with kafka_errors(cfg.kafka.bootstrap_servers, "kafka.bootstrap_servers"):
        return build(cfg, with_lease=False)


@app.command()
def plan(
    config: Path = ConfigOpt,
    finding: Path = typer.Option(None, "--finding", help="A finding as JSON (as on linkwatch.findings)."),
    rule: str = typer.Option(None, help="Rule of a finding made up here, e.g. slow_broker."),
    subject: str = typer.Option(None, help="Subject of that finding, e.g. broker:2."),
) -> None:
    """Show exactly what would change for a finding now (never changes anything)."""
    cfg = load_remediation_config(config)
    rem = connect(cfg)
    try:
        p, refused = rem.preview(_finding(finding, rule, subject, cfg.cluster))
    finally:
        rem.close()
    if p is not None:
        typer.echo(p.describe())
    typer.echo(f"guardrails: {'refused — ' + refused if refused else 'would go ahead'}")
    typer.echo(f"mode: {'execute' if cfg.execute else 'dry run (execute: false)'}")


@app.command()
def run(config: Path = ConfigOpt, member: str = typer.Option(None, help="Name in the lease group.")) -> None:
    """Act on findings from the findings topic until stopped (dry run unless execute: true)."""
    cfg = load_remediation_config(config)
    stop = stop_on_signals()
    # Waits for an unreachable cluster (said once, retried with back-off) instead of failing.
    rem = reach.connect(
        lambda: build(cfg, member=member),
        cfg.kafka.servers,
        reach.KafkaReach("remediate"),
        stop,
        key="kafka.bootstrap_servers",
        client_options=security_kwargs(cfg.kafka),
    )
    if rem is None:
        return
    try:
        counters = serve(rem, stop)
        typer.echo(f"stopped: {counters}")
    finally:
        rem.close()


@app.command()
def status(
    config: Path = ConfigOpt,
    action: str = typer.Option(None, "--action", help="Show this action's evidence bundle (JSON)."),
) -> None:
    """Breaker, pause, demoted brokers, drops, findings judged, actions and their verdicts; read
    from the state the acting remediator keeps (the shared state topic, or the state file)."""
    cfg = load_remediation_config(config)
    data = read_state(cfg)
    if action is not None:
        a = data["actions"].get(action)
        if a is None:
            raise ConfigError("--action", [f"no action {action!r}"])
        typer.echo(json.dumps(a.get("evidence") or a, indent=2, default=str))
        return
    typer.echo(render(data))


def _command(cfg_path: Path, name: str, timeout_s: float, take_lease: bool, **args: Any) -> dict[str, Any]:
    cfg = load_remediation_config(cfg_path)
    check_kafka(cfg.kafka, "kafka.bootstrap_servers")  # the acting remediator, or this one, needs it
    with kafka_errors(cfg.kafka.bootstrap_servers, "kafka.bootstrap_servers"):
        reply = send(
            cfg, command(name, getpass.getuser(), **args), timeout_s=timeout_s, take_lease=take_lease
        )
    if not reply.get("ok"):
        raise ConfigError(name, [f"refused by the remediator: {reply.get('result')}"])
    return reply


@app.command()
def pause(config: Path = ConfigOpt, timeout: float = TimeoutOpt, take_lease: bool = TakeLeaseOpt) -> None:
    """Stop acting on findings (they are kept and judged on resume)."""
    _command(config, "pause", timeout, take_lease)
    typer.echo("paused")


@app.command()
def resume(config: Path = ConfigOpt, timeout: float = TimeoutOpt, take_lease: bool = TakeLeaseOpt) -> None:
    """Act again; the findings kept while paused are judged now, oldest first."""
    reply = _command(config, "resume", timeout, take_lease)
    typer.echo(f"resumed: {reply.get('result')}")


@app.command()
def reset(config: Path = ConfigOpt, timeout: float = TimeoutOpt, take_lease: bool = TakeLeaseOpt) -> None:
    """Close the breaker (opened by failed actions or by an action's harm), after reading why."""
    _command(config, "reset", timeout, take_lease)
    typer.echo("breaker reset")


@app.command()
def cancel(config: Path = ConfigOpt, timeout: float = TimeoutOpt, take_lease: bool = TakeLeaseOpt) -> None:
    """Cancel the moves in flight (KIP-455) and clear the throttles of running actions."""
    reply = _command(config, "cancel", timeout, take_lease)
    for aid in reply.get("result") or []:
        typer.echo(f"cancelled {aid}")


@app.command()
def undo(
    config: Path = ConfigOpt,
    action: str = typer.Argument(..., help="Action id (see status)."),
    timeout: float = TimeoutOpt,
    take_lease: bool = TakeLeaseOpt,
) -> None:
    """Put back what an action changed (e.g. restore a demoted broker's leadership)."""
    reply = _command(config, "undo", timeout, take_lease, action=action)
    event = reply.get("result") or {}
    typer.echo(f"undo {action}: {event.get('status') or event.get('event')}")


@app.command()
def check(config: Path = ConfigOpt, config_only: bool = ConfigOnlyOpt) -> None:
    """Validate the config, then try what it names: one ✓/✗ line each; exit 1 if any ✗."""
    from linkwatch import preflight

    cfg = load_remediation_config(config)
    mode = "execute" if cfg.execute else "dry run (execute: false)"
    topics = {"findings_topic": cfg.findings_topic}
    creates: tuple[str, ...] = ()
    if cfg.execute and cfg.lease.enabled:
        topics |= {"lease.topic": cfg.lease.topic, "lease.state_topic": cfg.lease.state_topic}
        creates = ("lease.topic", "lease.state_topic")
    check_cluster_config(
        f"{config}: valid (cluster {cfg.cluster}, {mode})",
        cfg.kafka,
        topics,
        creates=creates,
        more=(lambda: preflight.writable_dir(cfg.state_dir, "state_dir"),),
        config_only=config_only,
    )
