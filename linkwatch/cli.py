"""The ``linkwatch`` command: parse arguments, load config, call the library, return an exit code.

Each subcommand lives in ``linkwatch/commands/<name>.py`` and exposes ``app`` (a Typer app);
this module only mounts them. Errors that are the operator's to fix (:class:`LinkwatchError`)
print one line and exit 2; usage errors print the usage and the error and exit 2; anything
else is a bug and shows its traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from linkwatch.errors import LinkwatchError

# (subcommand, module under linkwatch.commands, help)
SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("cluster", "cluster", "Run a real local Kafka cluster (KRaft, loopback) for tests and demos."),
    ("spark", "spark", "Run a local Spark standalone cluster (master and workers, loopback) to submit to."),
    ("load", "load", "Produce (and consume) test load at a set rate and key distribution."),
    ("demo", "demo", "Run the main job on an embedded local cluster, end to end."),
    ("agent", "agent", "Run the broker agent (request log, JMX, log dirs, host) on this broker."),
    ("lag", "lag", "Consumer lag in messages and seconds with an explained status; cold reads; rack spread."),
    ("probe", "probe", "Probe every broker: produce and end-to-end latency and availability per leader."),
    ("trace", "trace", "Relay OTLP spans, joining the broker's slow-request stages into producer traces."),
    ("consume", "consume", "Print, forward or store a topic with the async-fetch consumer."),
    ("alerts", "alerts", "Alertmanager webhook receiver and the alert rules' checks."),
    ("dashboards", "dashboards", "Generate the Grafana dashboards and push them to a Grafana."),
    ("analyze", "analyze", "Stream samples through Spark, run the detectors, publish findings."),
    ("report", "report", "Findings over a time range (batch), as a table, JSON or HTML."),
    ("remediate", "remediate", "Act on findings with guardrails: plan, run, status, cancel, undo."),
]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="linkwatch: full-link latency monitoring for Apache Kafka (agent, analysis, lag, alerts).",
)


def _mount() -> None:
    for name, module, help_text in SUBCOMMANDS:
        sub = importlib.import_module(f"linkwatch.commands.{module}")
        if isinstance(sub.app, typer.Typer):
            app.add_typer(sub.app, name=name, help=help_text)
        else:
            app.command(name=name, help=help_text)(sub.app)


_mount()


def main(argv: list[str] | None = None) -> int:
    try:
        # standalone_mode=False: click returns the exit code of typer.Exit instead of exiting.
        code = app(args=argv, standalone_mode=False)
    except LinkwatchError as e:
        print(f"linkwatch: error: {e}", file=sys.stderr)
        return 2
    except typer.Abort:
        return 130
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except typer.TyperException as e:
        # Usage errors (exit code 2) and other errors typer reports itself. Typer carries
        # its own copy of click, so `click` itself may not be importable: never import it.
        show = getattr(e, "show", None)
        if callable(show):
            show()
        else:
            print(f"linkwatch: error: {e.format_message()}", file=sys.stderr)
        return e.exit_code
    return code if isinstance(code, int) else 0


if __name__ == "__main__":
    sys.exit(main())
