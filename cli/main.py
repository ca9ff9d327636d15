"""The ``linkwatch`` command: parse arguments, load config, call the library, return an exit code.

Each subcommand lives in ``cli/commands/<name>.py`` and exposes ``app`` (a Typer app);
this module only mounts them, and imports only the one asked for. Errors that are the
operator's to fix (:class:`LinkwatchError`) print one line and exit 2; usage errors print the
usage and the error and exit 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from linkwatch.errors import LinkwatchError

# (subcommand, module under cli.commands, help)
SUBCOMMANDS: list[tuple[str, str, str]] = [
    ("init", "init", "Write the sample configs, systemd units, alert rules and dashboards into a directory."),
    ("cluster", "cluster", "Run a real local Kafka cluster (KRaft, loopback) for tests and demos."),
    (
        "spark",
        "spark",
        "A local Spark standalone cluster to submit to; pack linkwatch for a cluster's executors.",
    ),
    ("load", "load", "Produce (and consume) test load at a set rate and key distribution."),
    (
        "fleet",
        "fleet",
        "Publish a synthetic fleet's agent records (N brokers, real latencies, injected faults).",
    ),
    ("demo", "demo", "Run the main job on an embedded local cluster, end to end."),
    ("topics", "topics", "linkwatch's own topics on a cluster: their settings; create the missing ones."),
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

LogLevelOpt = typer.Option(
    None,
    "--log-level",
    envvar="LINKWATCH_LOG_LEVEL",
    help="linkwatch's own log level: DEBUG, INFO, WARNING or ERROR (default: the config's, else INFO).",
    show_default=False,
)
ClientLogLevelOpt = typer.Option(
    "WARNING",
    "--client-log-level",
    envvar="LINKWATCH_CLIENT_LOG_LEVEL",
    help="Log level of the client libraries (kafka-python, aiohttp, py4j, ...): their connection "
    "chatter stays out of the log unless asked for.",
)
# Top-level options that take a value (the subcommand is the first word that is neither an
# option nor such a value).
_VALUE_OPTIONS = frozenset(("--log-level", "--client-log-level"))


def _root(log_level: str | None = LogLevelOpt, client_log_level: str = ClientLogLevelOpt) -> None:
    from cli import logs

    logs.configure(log_level, client_log_level)


def requested(argv: list[str]) -> str | None:
    """The subcommand ``argv`` names, if any (``None`` for ``--help`` or no arguments)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUE_OPTIONS:
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def build_app(argv: list[str]) -> typer.Typer:
    """The command line for ``argv``: the subcommand it names is imported and mounted, every
    other one is a placeholder with its help line, so ``linkwatch --help`` imports no subsystem
    (each pulls its own stack: Spark, aiohttp, the Kafka client) and answers at once."""
    app = typer.Typer(
        no_args_is_help=True,
        add_completion=False,
        help="linkwatch: full-link latency monitoring for Apache Kafka (agent, analysis, lag, alerts).",
    )
    app.callback()(_root)
    wanted = requested(argv)
    for name, module, help_text in SUBCOMMANDS:
        if name != wanted:
            app.command(name=name, help=help_text)(_placeholder)
            continue
        sub = importlib.import_module(f"cli.commands.{module}")
        if isinstance(sub.app, typer.Typer):
            app.add_typer(sub.app, name=name, help=help_text)
        else:
            app.command(name=name, help=help_text)(sub.app)
    return app


def _placeholder() -> None:  # never run: the subcommand named is mounted for real
    raise AssertionError("placeholder subcommand invoked")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        # standalone_mode=False: click returns the exit code of typer.Exit instead of exiting.
        code = build_app(argv)(args=argv, standalone_mode=False)
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
