"""``linkwatch report --from --to``: findings over a time range (batch path)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import typer

from analyzer.service import AnalyzerConfig
from linkwatch.config import load_config
from linkwatch.errors import ConfigError
from linkwatch.reach import check_kafka


def parse_time(text: str, option: str) -> int:
    """Epoch milliseconds from ``2026-01-01T10:00:00`` (UTC unless an offset is given) or epoch ms."""
    if text.isdigit():
        return int(text)
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ConfigError(
            option, [f"{text!r}: use ISO 8601 (2026-01-01T10:00:00) or epoch milliseconds"]
        ) from None
    return int((dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp() * 1000)


def app(
    from_: str = typer.Option(..., "--from", help="Start (ISO 8601, UTC unless offset given, or epoch ms)."),
    to: str = typer.Option(..., "--to", help="End (exclusive)."),
    config: Path = typer.Option(None, "--config", "-c", help="YAML config (same as `linkwatch analyze`)."),
    source: str = typer.Option(
        "archive", help="archive (Parquet written by analyze) or kafka (by timestamp)."
    ),
    fmt: str = typer.Option("table", "--format", help="table, json or html."),
    out: Path = typer.Option(None, help="Write to this file instead of stdout."),
) -> None:
    """Run the batch aggregation and the detectors over [from, to) and print the findings."""
    from analyzer.report import RENDERERS, batch_report, read_lines, verdict

    cfg = load_config(config, AnalyzerConfig, env_prefix="LINKWATCH_ANALYZER_")
    from_ms, to_ms = parse_time(from_, "--from"), parse_time(to, "--to")
    if to_ms <= from_ms:
        raise ConfigError("--to", [f"{to!r} is not after --from {from_!r}"])
    if source not in ("archive", "kafka") or fmt not in RENDERERS:
        raise ConfigError("--source/--format", [f"{source!r}/{fmt!r}: use archive|kafka and table|json|html"])
    if source == "kafka":
        check_kafka(cfg.kafka, "kafka.bootstrap_servers")
    report = batch_report(cfg, from_ms, to_ms, source)
    text = RENDERERS[fmt](report)
    if out:
        out.write_text(text)
        for line in read_lines(report):
            typer.echo(line)
        typer.echo(f"{verdict(report)} Written to {out}.")
    else:
        typer.echo(text)
