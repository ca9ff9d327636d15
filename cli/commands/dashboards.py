"""``linkwatch dashboards generate|push``."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from dashboards.build import DEFAULT_OUT_DIR, SHIPPED_DIR, write_all
from dashboards.push import push_dashboards

app = typer.Typer(no_args_is_help=True)

OutOpt = typer.Option(
    DEFAULT_OUT_DIR, "--out", help="Directory for the dashboard JSON files (created if missing)."
)
UrlOpt = typer.Option(..., "--url", help="Grafana base URL, e.g. http://127.0.0.1:3000")
TokenOpt = typer.Option(
    None, "--token", help="Grafana service-account token (default $GRAFANA_TOKEN).", show_default=False
)
FolderOpt = typer.Option(None, "--folder-uid", help="File the dashboards in this Grafana folder.")
DirOpt = typer.Option(
    SHIPPED_DIR,
    "--dir",
    help="Directory with generated dashboard JSON files (default: the ones shipped in the package).",
    show_default=False,
)


@app.command()
def generate(out: Path = OutOpt) -> None:
    """Generate the dashboards (grafana-foundation-sdk) into <out>/*.json."""
    for path in write_all(out):
        typer.echo(str(path))


@app.command()
def push(
    url: str = UrlOpt, token: str | None = TokenOpt, folder_uid: str | None = FolderOpt, dir: Path = DirOpt
) -> None:
    """Push the generated dashboards to Grafana (create or overwrite by uid)."""
    paths = sorted(dir.glob("*.json"))
    if not paths:
        raise typer.BadParameter(f"no *.json in {dir}; run `linkwatch dashboards generate` first")
    for p in push_dashboards(paths, url, token or os.environ.get("GRAFANA_TOKEN"), folder_uid):
        typer.echo(f"{p.status or 'ok'} {p.uid} {p.url}")
