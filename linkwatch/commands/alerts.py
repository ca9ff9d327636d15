"""``linkwatch alerts serve|check``."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from pathlib import Path

import typer

from alerts.config import ENV_PREFIX, ReceiverConfig
from alerts.receiver import AlertReceiver
from alerts.rules_check import check_rules
from linkwatch.config import load_config

app = typer.Typer(no_args_is_help=True)


ConfigOpt = typer.Option(None, "--config", "-c", help="Receiver config (see config/alerts.example.yml).")
HostOpt = typer.Option(None, help="Override `host` (default 127.0.0.1).")
PortOpt = typer.Option(None, help="Override `port` (default 9095).")


@app.command()
def serve(
    config: Path | None = ConfigOpt,
    host: str | None = HostOpt,
    port: int | None = PortOpt,
) -> None:
    """Run the Alertmanager webhook receiver until Ctrl-C (token from config or $LINKWATCH_ALERTS_TOKEN)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cfg = load_config(config, ReceiverConfig, ENV_PREFIX)
    overrides = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with AlertReceiver(cfg) as receiver:
        typer.echo(f"listening on {receiver.url}; audit log {cfg.audit_log}")
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


@app.command()
def check() -> None:
    """Check the shipped rules (`promtool check rules`) and run their unit tests (`promtool test rules`)."""
    for line in check_rules():
        typer.echo(line)
