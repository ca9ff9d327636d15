"""``linkwatch alerts serve|check``."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import typer

from alerts.config import ENV_PREFIX, ReceiverConfig
from alerts.receiver import AlertReceiver
from alerts.rules_check import check_rules
from linkwatch.config import load_config

app = typer.Typer(no_args_is_help=True)


ConfigOpt = typer.Option(
    None, "--config", "-c", help="Receiver config (`linkwatch init DIR` writes a sample, DIR/alerts.yml)."
)
HostOpt = typer.Option(None, help="Override `host` (default 127.0.0.1).")
PortOpt = typer.Option(None, help="Override `port` (default 9095).")
CheckOpt = typer.Option(False, "--check", help="Validate the config and the token, then exit.")


@app.command()
def serve(
    config: Path | None = ConfigOpt,
    host: str | None = HostOpt,
    port: int | None = PortOpt,
    check: bool = CheckOpt,
) -> None:
    """Run the Alertmanager webhook receiver until Ctrl-C (token from config or $LINKWATCH_ALERTS_TOKEN)."""
    cfg = load_config(config, ReceiverConfig, ENV_PREFIX)
    overrides = {k: v for k, v in (("host", host), ("port", port)) if v is not None}
    if overrides:
        cfg = cfg.model_copy(update=overrides)
    if check:
        cfg.resolved_token()  # raises ConfigError naming token / token_file
        typer.echo(f"{config or '<defaults>'}: ok (listen {cfg.host}:{cfg.port}{cfg.path})")
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with AlertReceiver(cfg) as receiver:
        typer.echo(f"listening on {receiver.url}; audit log {cfg.audit_log}")
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait()


ScrapeOpt = typer.Option(
    [],
    "--scrape",
    help="JOB=HOST:PORT[,label=value...], e.g. linkwatch-agent=127.0.0.1:9308,cluster=local,broker=1",
)
DirOpt = typer.Option(
    Path("/tmp/linkwatch-alerts-stack"), "--dir", help="Work dir for configs, data and logs."
)
FastOpt = typer.Option(
    True, "--fast/--shipped-timings", help="Short for:/windows/waits (demo) or the shipped ones."
)


@app.command()
def stack(scrape: list[str] = ScrapeOpt, dir: Path = DirOpt, fast: bool = FastOpt) -> None:
    """Run Prometheus + Alertmanager + the receiver on loopback and print the alerts received until Ctrl-C."""
    from testbed.alert_stack import AlertStack, format_alert, parse_scrape_target

    targets = [parse_scrape_target(s) for s in scrape]
    signal.signal(signal.SIGTERM, _interrupt)  # stop the children on SIGTERM too
    timing = {"scrape_s": 2, "eval_s": 2} if fast else {}  # else the shipped ones
    with AlertStack(dir, targets, fast=fast, **timing) as s:
        typer.echo(
            f"Prometheus {s.prometheus_url}  Alertmanager {s.alertmanager_url}  receiver {s.receiver_url}"
        )
        typer.echo(f"audit log {s.audit.path}")
        shown = 0
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                got = s.received()
                for record in got[shown:]:
                    typer.echo(format_alert(record))
                shown = len(got)
                time.sleep(1.0)


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@app.command()
def check() -> None:
    """Check the shipped rules (`promtool check rules`) and run their unit tests (`promtool test rules`)."""
    for line in check_rules():
        typer.echo(line)
