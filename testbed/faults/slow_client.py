"""A slow client: a consumer speaking Fetch over a raw socket with a small receive buffer, which
stalls before reading each response; a response larger than its buffer plus the broker's send
buffer cannot be written out meanwhile, so the broker's Send stage grows for that client id
only."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any

from linkwatch.errors import SetupError
from testbed.faults.registry import register, unregister


@dataclass
class SlowClient:
    """A consumer that fetches from one broker and then does not read its socket for
    ``stall_ms`` before taking the response, again and again until stopped.

    It speaks the Fetch protocol itself over a raw socket with a receive buffer of
    ``recv_buffer_bytes``, so a response larger than that buffer plus the broker's send buffer
    (``socket.send.buffer.bytes``, 100 kB by default) cannot be written out while it stalls: the
    broker's Send stage (``sendTimeMs``) of this client's fetches grows to about ``stall_ms``, and
    nobody else's. The partition must hold that much data from ``offset``; :attr:`response_bytes`
    says what came back. Its ``client_id`` is what the request log shows. ``stop`` closes it.
    """

    host: str
    port: int
    topic: str
    partition: int = 0
    client_id: str = "linkwatch-slow-client"
    stall_ms: int = 500
    max_bytes: int = 1 << 20
    recv_buffer_bytes: int = 4096
    offset: int = 0
    fetches: int = field(default=0, init=False)
    response_bytes: int = field(default=0, init=False)
    error: str = field(default="", init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    _sock: Any = field(default=None, init=False)
    _token: int = field(default=0, init=False)

    FETCH_VERSION = 11  # topics by name (v13+ wants topic ids); Kafka 4.x serves v4 and later

    def __post_init__(self) -> None:
        if self.stall_ms <= 0 or self.max_bytes <= 0 or self.recv_buffer_bytes <= 0:
            raise ValueError(
                f"stall_ms={self.stall_ms}, max_bytes={self.max_bytes} and "
                f"recv_buffer_bytes={self.recv_buffer_bytes} must be > 0"
            )

    def start(self) -> SlowClient:
        import socket

        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # Before connect: the receive window is negotiated at the handshake.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.recv_buffer_bytes)
        sock.settimeout(30)
        try:
            sock.connect((self.host, self.port))
        except OSError as e:
            sock.close()
            raise SetupError(f"slow client cannot connect to broker {self.host}:{self.port}: {e}") from None
        self._sock = sock
        self._token = register(f"slow client {self.client_id}", self.stop)
        self._thread = threading.Thread(target=self._run, name=f"slow-client-{self.port}", daemon=True)
        self._thread.start()
        return self

    def _request(self, correlation_id: int) -> bytes:
        from kafka.protocol.consumer.fetch import FetchRequest

        part = FetchRequest.FetchTopic.FetchPartition(
            partition=self.partition, fetch_offset=self.offset, partition_max_bytes=self.max_bytes
        )
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=self.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session: every fetch asks for the whole range again
            topics=[FetchRequest.FetchTopic(topic=self.topic, partitions=[part])],
            forgotten_topics_data=[],
            rack_id="",
        )
        req.API_VERSION = self.FETCH_VERSION
        req.with_header(correlation_id=correlation_id, client_id=self.client_id)
        return bytes(req.encode(header=True, framed=True))

    def _read_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(min(n - len(buf), 1 << 16))
            if not chunk:
                raise ConnectionError(f"broker {self.host}:{self.port} closed the connection")
            buf += chunk
        return bytes(buf)

    def _run(self) -> None:
        correlation_id = 0
        try:
            while not self._stop.is_set():
                correlation_id += 1
                self._sock.sendall(self._request(correlation_id))
                if self._stop.wait(self.stall_ms / 1000):
                    break
                size = int.from_bytes(self._read_exactly(4), "big")
                self._read_exactly(size)
                self.response_bytes = size
                self.fetches += 1
        except OSError as e:  # closed by stop(), or the broker went away: say which
            if not self._stop.is_set():
                self.error = f"{type(e).__name__}: {e}"

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        unregister(self._token)

    def __enter__(self) -> SlowClient:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
