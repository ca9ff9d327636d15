"""``linkwatch trace join``: relay OTLP spans to a collector, joining the broker's stage spans
into the producers' traces (:mod:`linkwatch.trace_join`)."""

from __future__ import annotations

import typer

from cli.commands import stop_on_signals
from linkwatch.trace_join import SpanJoin, TraceJoinRelay

app = typer.Typer(no_args_is_help=True)


@app.command()
def join(
    forward: str = typer.Option(
        ..., "--forward", help="The collector's OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces."
    ),
    host: str = typer.Option("127.0.0.1", help="Listen address (loopback unless you mean otherwise)."),
    port: int = typer.Option(4319, min=0, max=65535, help="Listen port; point producers and agents here."),
    hold_s: float = typer.Option(120.0, min=1, help="How long each half waits for the other."),
    max_held: int = typer.Option(100_000, min=1, help="Requests held per side at most."),
    max_traces_per_request: int = typer.Option(
        100, min=1, help="Producer traces one request's stage spans join."
    ),
) -> None:
    """Receive OTLP/HTTP (protobuf) on HOST:PORT and forward to the collector, adding copies of
    each slow Produce request's stage spans to the traces of the records it carried."""
    relay = TraceJoinRelay(forward, host, port, SpanJoin(hold_s, max_held, max_traces_per_request)).start()
    typer.echo(f"trace join on http://{host}:{relay.port}/v1/traces -> {forward}")
    stop = stop_on_signals()
    try:
        while not stop.wait(60):
            s = relay.join.stats
            typer.echo(f"joined {s.joined}; dropped {dict(s.dropped)}")
    finally:
        relay.close()
