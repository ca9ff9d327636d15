"""``linkwatch init DIR``: write the sample configs, systemd units, Prometheus and Alertmanager
examples, alert rules and dashboards that ship in the package into DIR (see cli/shipped.py)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import typer

from cli.shipped import DEFAULT_COMMAND, files, render
from linkwatch.errors import ConfigError

DirArg = typer.Argument(..., help="Directory to write into (created if missing), e.g. /etc/linkwatch.")
ForceOpt = typer.Option(False, "--force", help="Overwrite files that already exist.")
CommandOpt = typer.Option(
    None,
    "--command",
    help="The linkwatch command the units run (default: the one beside this Python, "
    f"else {DEFAULT_COMMAND}).",
    show_default=False,
)


def default_command() -> Path:
    beside = Path(sys.executable).parent / "linkwatch"
    found = beside if beside.is_file() else shutil.which("linkwatch")
    return Path(found).absolute() if found else Path(DEFAULT_COMMAND)


def app(dir: Path = DirArg, force: bool = ForceOpt, command: Path | None = CommandOpt) -> None:
    """Write the sample configs (agent.yaml, lag.yaml, ...), systemd/*.service, prometheus.yml,
    alertmanager.yml, rules/*.yml and dashboards/ into DIR; existing files are kept unless --force.

    The units and examples name DIR as the config directory and the linkwatch command given."""
    target = dir.absolute()
    command = (command or default_command()).absolute()
    shipped = files()
    existing = [f.target for f in shipped if (target / f.target).exists()]
    if existing and not force:
        raise ConfigError(
            str(target),
            [
                f"{len(existing)} file(s) already there ({', '.join(existing[:4])}{', ...' if len(existing) > 4 else ''}); "
                "nothing written: use --force to overwrite them"
            ],
        )
    for f in shipped:
        out = target / f.target
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(render(f.source.read_text(), target, command))
        out.chmod(f.mode)
    typer.echo(f"wrote {len(shipped)} files to {target} (units run {command}):")
    groups: dict[str, list[str]] = {}
    for f in shipped:
        head, _, name = f.target.rpartition("/")
        groups.setdefault(head, []).append(name)
    for head, names in groups.items():
        typer.echo(f"  {head + '/' if head else ''}{' '.join(names)}")
    typer.echo(
        "next: edit the configs (each process checks its own: e.g. `linkwatch lag check -c lag.yaml`), "
        "then install the units (docs/install.md)"
    )
