"""``jupyter sandbox ports|forward``: servers that code in a sandbox started on its loopback,
without a Jupyter Server (with one: ``GET /api/sandboxes/{id}/ports`` and the links it gives).

``ports`` lists what listens in the sandbox (SandboxManager.ports.listening). ``forward``
listens on a port of this host and, as ``kubectl port-forward`` does, joins each connection it
accepts to the sandbox's port (SandboxManager.ports.connect: the sandbox keeps no network), byte
for byte, so a browser or ``curl`` on this host reaches a web app running in the sandbox. It
listens on 127.0.0.1 unless told otherwise: whoever can connect to the local port reaches the
sandbox's server, with no login of any kind. A connection to a port where nothing listens is
refused with the error on stderr, and the forward goes on: the server may not have started yet.
It runs until Ctrl-C, SIGTERM or SIGHUP (exit status 0), or until the sandbox is removed (1).
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal
import sys
from collections.abc import Callable
from typing import Any

from traitlets import Int, Unicode

from jupyter_sandbox.cli.owner import OwnerCommand
from jupyter_sandbox.cli.text import print_table, shown
from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError, SandboxNotFoundError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.ports import check_port

INTERRUPTED = 130  # Ctrl-C before the forward was under way, as a shell has it (SIGINT)
CHUNK = 64 * 1024  # bytes moved at a time in each direction
STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class PortsApp(OwnerCommand):
    description = (
        "List the TCP ports servers listen on in a running sandbox, each with the command "
        "that listens ('jupyter sandbox forward' reaches one from this host)."
    )
    usage = "ports SANDBOX_ID"
    examples = "jupyter sandbox ports 0123456789ab"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str) -> int:
        found = await manager.ports.listening(owner, sandbox_id)
        print_table([("PORT", "<5"), ("COMMAND", "")], ((p.port, shown(p.command)) for p in found))
        return 0


class ForwardApp(OwnerCommand):
    description = (
        "Listen on a local port and join each connection to a port of a running sandbox, as "
        "kubectl port-forward does, until Ctrl-C (exit status 0)."
    )
    usage = "forward SANDBOX_ID PORT [--local-port=N] [--address=127.0.0.1]"
    examples = "\n".join(
        [
            "jupyter sandbox forward 0123456789ab 8000  # http://127.0.0.1:8000/",
            "jupyter sandbox forward 0123456789ab 8501 --local-port=9000",
            "jupyter sandbox forward 0123456789ab 8000 --local-port=0  # any free local port",
        ]
    )
    local_port = Int(
        None,
        allow_none=True,
        config=True,
        help="The port to listen on here (default: PORT itself; 0: any free port, printed).",
    )
    address = Unicode(
        "127.0.0.1",
        config=True,
        help="""The address to listen on here. Another than a loopback one lets other machines
        reach the sandbox's server, with no login: a warning says so.""",
    )
    aliases = {
        "local-port": "ForwardApp.local_port",
        "address": "ForwardApp.address",
    }

    def start(self) -> None:
        try:
            super().start()
        except KeyboardInterrupt:  # before the forward was under way: its own handler stops it
            self.exit(INTERRUPTED)

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str, given: str) -> int:
        port = check_port(given)
        local_port = port if self.local_port is None else self.local_port
        if not 0 <= local_port < 65536:
            raise InvalidRequestError(
                f"--local-port must be a whole number from 0 (any free port) to 65535, "
                f"not {local_port}"
            )
        # Checked first, so that a wrong id says so at once, not at the first connection.
        await manager.running(owner, sandbox_id)
        forward = _Forward(manager, owner, sandbox_id, port)
        try:
            server = await asyncio.start_server(forward.serve, self.address, local_port)
        except OSError as exc:
            where = _host_port(self.address, local_port)
            print(f"error: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        try:
            # Announced once the stopping signals are the forward's: a program that reads the
            # line may stop it at once, and still gets a clean stop (status 0).
            return await forward.until_stopped(lambda: _announce(server, sandbox_id, port))
        finally:
            server.close()
            await forward.close()


def _announce(server: asyncio.Server, sandbox_id: str, port: int) -> None:
    """A line for each address listened on; a warning before one reachable from elsewhere."""
    for sock in server.sockets:
        address = sock.getsockname()
        where = _host_port(address[0], address[1])
        if not _loopback(address[0]):
            print(
                f"warning: {where} is not a loopback address: whoever can connect to it "
                f"reaches port {port} of sandbox {sandbox_id}, with no login",
                file=sys.stderr,
                flush=True,
            )
        print(
            f"Forwarding {where} -> sandbox {sandbox_id} port {port} (Ctrl-C to stop)", flush=True
        )


class _Forward:
    """The connections of one forward: each joined to ``port`` of the sandbox, until stopped."""

    def __init__(self, manager: SandboxManager, owner: str, sandbox_id: str, port: int) -> None:
        self.manager = manager
        self.owner = owner
        self.sandbox_id = sandbox_id
        self.port = port
        self.stopped = asyncio.Event()
        self.status = 0
        # Held so that stopping can end them: the server's close() leaves connections open.
        self.connections: set[asyncio.Task[Any]] = set()

    async def until_stopped(self, started: Callable[[], None]) -> int:
        """Call ``started`` once a stopping signal stops the forward, then wait for one (0)
        or the sandbox's removal (1); the exit status."""
        loop = asyncio.get_running_loop()
        for stopping in STOPPING_SIGNALS:
            loop.add_signal_handler(stopping, self.stopped.set)
        try:
            started()
            await self.stopped.wait()
        finally:
            for stopping in STOPPING_SIGNALS:
                loop.remove_signal_handler(stopping)
        return self.status

    async def close(self) -> None:
        for task in self.connections:
            task.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One accepted connection, until it ends or the forward stops."""
        task = asyncio.current_task()
        if task is not None:
            self.connections.add(task)
        try:
            await self._join(reader, writer)
        except asyncio.CancelledError:
            # The forward stopping is how a connection ends, not a failure; and asyncio's
            # streams (3.11) would report a connection task left cancelled as an exception.
            pass
        finally:
            writer.close()  # not awaited: stopping may cancel this task here
            if task is not None:
                self.connections.discard(task)

    async def _join(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Joined to the sandbox's port, or closed after the error is shown."""
        try:
            sock = await self.manager.ports.connect(self.owner, self.sandbox_id, self.port)
        except SandboxError as exc:
            # The message may quote the sandbox: shown escaped, never as terminal controls.
            print(f"error: {shown(exc.message)}", file=sys.stderr, flush=True)
            if isinstance(exc, SandboxNotFoundError):  # no connection can succeed now
                print("the forward stops: the sandbox is gone", file=sys.stderr, flush=True)
                self.status = 1
                self.stopped.set()
            return
        try:
            inside_reader, inside_writer = await asyncio.open_connection(sock=sock, limit=CHUNK)
        except BaseException:
            sock.close()
            raise
        try:
            await relay(reader, writer, inside_reader, inside_writer)
        finally:
            inside_writer.close()  # what was written still goes first


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    inside_reader: asyncio.StreamReader,
    inside_writer: asyncio.StreamWriter,
) -> None:
    """Bytes both ways until both directions ended (each end of file passed on as a
    half-close, as the port opener does inside the sandbox) or one of them failed."""
    directions = [
        asyncio.ensure_future(_pipe(reader, inside_writer)),
        asyncio.ensure_future(_pipe(inside_reader, writer)),
    ]
    try:
        await asyncio.wait(directions, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for direction in directions:
            direction.cancel()
        await asyncio.gather(*directions, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """``reader`` -> ``writer`` to end of file, then a half-close; an OSError when either
    side broke (the relay then ends both directions)."""
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()  # a slow reader holds the writer back, not this process's memory
    if writer.can_write_eof():
        writer.write_eof()


def _loopback(host: str) -> bool:
    """Whether a listening socket's own address (an IP, an IPv6 one maybe with its scope) is
    a loopback one: what a name such as ``localhost`` resolved to is judged, not the name."""
    return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
