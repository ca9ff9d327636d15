"""``linkwatch remediate``: plan, run, status, cancel, undo (see docs/remediation.md)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import typer

from linkwatch.commands import stop_on_signals
from linkwatch.errors import ConfigError
from linkwatch.records import Finding
from remediation.config import load_remediation_config
from remediation.service import build, serve
from remediation.state import StateStore

app = typer.Typer(no_args_is_help=True)

ConfigOpt = typer.Option(..., "--config", "-c", help="YAML config (see config/remediation.sample.yaml).")


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


@app.command()
def plan(
    config: Path = ConfigOpt,
    finding: Path = typer.Option(None, "--finding", help="A finding as JSON (as on linkwatch.findings)."),
    rule: str = typer.Option(None, help="Rule of a finding made up here, e.g. slow_broker."),
    subject: str = typer.Option(None, help="Subject of that finding, e.g. broker:2."),
) -> None:
    """Show exactly what would change for a finding now (never changes anything)."""
    cfg = load_remediation_config(config)
    rem = build(cfg, with_lease=False)
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_remediation_config(config)
    rem = build(cfg, member=member)
    stop = stop_on_signals()
    try:
        counters = serve(rem, stop)
        typer.echo(f"stopped: {counters}")
    finally:
        rem.close()


@app.command()
def status(config: Path = ConfigOpt) -> None:
    """Actions (running and past), demoted brokers, pause state; from the persisted state."""
    cfg = load_remediation_config(config)
    data = StateStore(cfg.state_dir / "state.json").data
    typer.echo(f"paused: {data['paused']} ({len(data['pending'])} findings kept)")
    typer.echo(f"demoted brokers: {data['demoted'] or 'none'}")
    for a in sorted(data["actions"].values(), key=lambda a: a["started"]):
        done = sum(1 for s in a["steps"] if s["status"] == "done")
        typer.echo(
            f"{a['id']}  {a['status']:<10} {a['remediation']:<18} {a['subject']:<24} {done}/{len(a['steps'])} steps"
        )


@app.command()
def cancel(config: Path = ConfigOpt) -> None:
    """Cancel this remediator's moves in flight (KIP-455) and clear its throttles."""
    cfg = load_remediation_config(config)
    rem = build(cfg, with_lease=False)
    try:
        for event in rem.cancel_running():
            typer.echo(f"cancelled {event['action']}")
    finally:
        rem.close()


@app.command()
def undo(config: Path = ConfigOpt, action: str = typer.Argument(..., help="Action id (see status).")) -> None:
    """Put back what an action changed (e.g. restore a demoted broker's leadership)."""
    cfg = load_remediation_config(config)
    rem = build(cfg, with_lease=False)
    try:
        if action not in rem.state.data["actions"]:
            raise ConfigError("action", [f"no action {action!r} in {rem.state.path}"])
        event = rem.undo(action)
    finally:
        rem.close()
    typer.echo(f"undo {action}: {event.get('status') or event['event']}")
