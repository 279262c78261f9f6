"""Test servers on the host's loopback that record every connection they accept."""

from __future__ import annotations

import http.server
import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

# Run in a sandbox with a URL: prints the status, or the proxy's refusal and its reason.
FETCH = """
import sys, urllib.error, urllib.request
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=30).status)
except urllib.error.HTTPError as e:
    print(e.code, e.headers.get("X-Jupyter-Sandbox-Denied"))
"""


class RecordingServer(http.server.ThreadingHTTPServer):
    """Answers GET with ``size`` bytes (default: a short greeting); records connections."""

    daemon_threads = True

    def __init__(self, address: str, size: int = 0) -> None:
        self.connections = 0
        self.hosts: list[str] = []
        # Each request's Authorization and X-Key headers (what the tests' credentials add).
        self.authorizations: list[list[str]] = []
        self.size = size
        super().__init__((address, 0), _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        self.connections += 1
        return super().get_request()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(http.server.BaseHTTPRequestHandler):
    server: RecordingServer

    def do_GET(self) -> None:
        self.server.hosts.append(self.headers.get("Host", ""))
        self.server.authorizations.append(
            (self.headers.get_all("Authorization") or []) + (self.headers.get_all("X-Key") or [])
        )
        size = self.server.size
        body = b"hello from the test server\n" if not size else b""
        self.send_response(200)
        self.send_header("Content-Length", str(size or len(body)))
        self.end_headers()
        if not size:
            self.wfile.write(body)
            return
        chunk = b"x" * (1024 * 1024)
        sent = 0
        while sent < size:
            piece = chunk[: min(len(chunk), size - sent)]
            self.wfile.write(piece)
            sent += len(piece)

    def log_message(self, *args: Any) -> None:
        pass


Served = TypeVar("Served", bound=socketserver.BaseServer)


@contextmanager
def serving(server: Served) -> Iterator[Served]:
    """``server`` serving on a thread until the block ends; then shut down and closed."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@contextmanager
def recording_server(address: str = "127.0.0.1", size: int = 0) -> Iterator[RecordingServer]:
    with serving(RecordingServer(address, size)) as server:
        yield server
