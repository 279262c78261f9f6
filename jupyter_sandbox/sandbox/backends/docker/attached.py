"""An attached exec's connection, read so that none of what the engine sent is lost.

Starting an exec attached is an HTTP upgrade: the engine answers ``101 UPGRADED`` and its
headers, then writes the command's output on the same connection. ``http.client`` reads those
headers through a buffered reader, and one read may take the first output with them when it
came soon enough (a busy host: the reading thread was late). docker-py then hands out the raw
socket, past that buffer: the output's start is gone, and a frame header read from the middle
of the output makes no sense (docker/docker-py#3332; seen in CI as "111 is not a valid stream",
a listing that began mid-way). So every read here goes through that same buffered reader, and
a reader that takes the socket itself (a terminal, on the event loop) is first handed what the
buffer holds.

A command's output is framed by the engine (not by the sandbox): an 8-byte header per frame,
the stream (1 stdout, 2 stderr), three zero bytes, the length as a big-endian 32-bit number.
A header that is not one is refused rather than guessed at, and a frame is read in pieces, so
that its announced length never sizes a buffer.
"""

from __future__ import annotations

import contextlib
import io
import socket
import struct
from collections.abc import Iterator
from typing import Any

from jupyter_sandbox.protocol.errors import EngineUnavailableError
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec_start import start_exec

HEADER = struct.Struct(">BxxxL")
STREAMS = {1: "stdout", 2: "stderr"}
# The most read at once from a frame (bytes): a frame's pieces are handed on in reads this big.
PIECE = 64 * 1024


class AttachedExec:
    """The connection of one attached exec: read through ``reader``, the buffered reader that
    parsed the engine's answer, written (standard input) and shut on ``sock``, its socket.

    The socket loses the HTTP timeout of the client that started the exec: a command may be
    silent for longer (a search through every file), and what bounds the wait is the exec's
    watch (exec.py), which kills the command at its time limit and shuts this connection."""

    def __init__(self, reader: io.BufferedReader, sock: socket.socket) -> None:
        sock.settimeout(None)
        self._reader = reader
        self.socket = sock

    @classmethod
    def of(cls, started: Any) -> AttachedExec:
        """The connection of what docker-py's ``exec_start(socket=True)`` returned: the raw
        socket's SocketIO, to which docker-py gives the response it came from."""
        response = getattr(started, "_response", None)
        reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        raw = getattr(started, "_sock", started)
        if not isinstance(reader, io.BufferedReader) or not isinstance(raw, socket.socket):
            raise EngineUnavailableError(
                "the engine's connection for a command is not one this server can read "
                "(DOCKER_HOST over SSH or a named pipe): reach the engine on a Unix socket or "
                "over TCP"
            )
        return cls(reader, raw)

    def read_ahead(self) -> bytes:
        """What the engine sent that was already read with its answer, for a reader that takes
        the socket itself from here on. Leaves the socket non-blocking (as asyncio wants it)."""
        self.socket.setblocking(False)
        try:
            return self._reader.read1(PIECE * 16) or b""  # the buffer's bytes, or none
        except BlockingIOError:
            return b""

    def frames(self) -> Iterator[tuple[str, bytes]]:
        """Blocking: the output of an exec started without a TTY, as ("stdout" or "stderr",
        piece) pairs in the order sent, until the connection ends. A connection that ends
        inside a frame ends the output there (it was shut: the exec's wait gave up on it)."""
        while True:
            header = self._reader.read(HEADER.size)
            if len(header) < HEADER.size:
                return
            if header[1:4] != b"\0\0\0" or header[0] not in STREAMS:
                raise EngineUnavailableError(
                    f"the engine sent a command's output in a form not understood (frame "
                    f"header {header.hex()}): report it with the engine's version"
                )
            stream, left = STREAMS[header[0]], HEADER.unpack(header)[1]
            while left:
                piece = self._reader.read1(min(left, PIECE))
                if not piece:
                    return
                left -= len(piece)
                yield stream, piece

    def shutdown(self, how: int = socket.SHUT_RDWR) -> None:
        """Shut the connection (both ways by default; SHUT_WR ends the command's input). A
        reader blocked on it then finds its end, on any thread."""
        with contextlib.suppress(OSError):
            self.socket.shutdown(how)

    def close(self) -> None:
        """Close the reader (the socket stays open while docker-py's response holds it: shut
        it first to end the connection)."""
        self._reader.close()


def start_attached(
    engine: DockerEngine, container: str, argv: list[str], *, tty: bool = False, **create: Any
) -> tuple[str, AttachedExec]:
    """Blocking: start an exec of ``argv`` in ``container`` attached (``create``: more of
    ``exec_create``'s arguments); its id and its connection. ``tty`` starts it on a TTY, whose
    output is not framed (a terminal's)."""
    exec_id, started = start_exec(
        engine, container, argv, start={"socket": True, "tty": tty}, tty=tty, **create
    )
    return exec_id, AttachedExec.of(started)
