"""A real OTLP/HTTP trace receiver on loopback for tests: each export's protobuf is decoded and
kept, in arrival order."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest


@contextlib.contextmanager
def serve_otlp(received: list[ExportTraceServiceRequest]) -> Iterator[str]:
    """Serve on 127.0.0.1 (a free port) until the block ends, appending each export to
    ``received``; yields the traces URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            msg = ExportTraceServiceRequest()
            msg.ParseFromString(self.rfile.read(int(self.headers["Content-Length"])))
            received.append(msg)
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1/traces"
    finally:
        server.shutdown()
        server.server_close()
