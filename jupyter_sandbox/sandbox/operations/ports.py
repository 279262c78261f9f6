"""Ports: reaching a server that code in a sandbox started on the sandbox's loopback.

A web app in a sandbox (``python -m http.server 8000``, a Streamlit or Dash board, a model's
demo page) listens on the sandbox's ``lo``, its only interface. :meth:`SandboxPorts.connect`
gives the host a connected socket to such a port without giving the sandbox any network: the
port opener (port_program.py) runs inside the sandbox, listens on a Unix socket in its
directory, and joins each connection the host makes to the port the host names. The server
extension serves such ports to the browser (server_extension/port_handlers.py, port_relay.py); ``jupyter sandbox
forward`` to a local port.

What the sandbox controls is never trusted here: its socket is pinned before the connect (a
link planted in its place leads nowhere, socket_pin.py), its answer is one bounded line, and
whatever the server then sends is the caller's to treat as untrusted. The opener is started on
first use and again, under a new socket name, if the sandbox's code killed it (gVisor cannot
bind a socket's path twice). Opening a connection is activity (usage.py); a connection left
open is not, so a forgotten browser tab does not keep its sandbox from the idle culler.

Usage (agent code)::

    ports = manager.ports
    print(await ports.listening(owner, sandbox_id))  # [8000]
    sock = await ports.connect(owner, sandbox_id, 8000)  # non-blocking, ready for bytes
"""

from __future__ import annotations

import asyncio
import reprlib
import secrets
import socket
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from traitlets import Float
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    OutputTooLargeError,
    PortNotListeningError,
    PortOpenerError,
    SocketReplacedError,
)
from jupyter_sandbox.sandbox.backends.base import SANDBOX_IO_DIR, ExecOptions
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.timeouts import within
from jupyter_sandbox.sandbox.kernel_link.socket_pin import connect_pinned
from jupyter_sandbox.sandbox.network import forwarder
from jupyter_sandbox.sandbox.network.settings import FORWARDER_PORT
from jupyter_sandbox.sandbox.programs import image_programs, port_program
from jupyter_sandbox.sandbox.programs.inside_listener import start_listener

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

# The opener shares the network forwarder's byte mover and threads: its source goes first (and
# its ``from __future__`` import, which Python takes only at the top, serves both). The first
# line names the program in ``ps``, whose view of a command line ends long before the opener's.
PROGRAM_NAME = "# jupyter-sandbox port opener"
PROGRAM = (
    f"{PROGRAM_NAME}\n"
    + Path(forwarder.__file__).read_text()
    + Path(port_program.__file__).read_text().replace("from __future__ import annotations\n", "", 1)
)
# The forwarder runs as ``python -c SOURCE``: its command line starts with its docstring.
FORWARDER_MARK = str(forwarder.__doc__).split("\n", 1)[0]
STATE_KEY: Final = "port_opener"  # the state file's name of the opener's socket (host-only)
MAX_ANSWER = 512  # bytes of the opener's answer line, at most
# Bytes of the port list, at most: the program cuts each command line at 200 characters, so
# this holds some 4000 listening ports, more than any sandbox's user runs servers.
MAX_LIST_BYTES = 1024**2


class _OpenerGone(Exception):
    """The opener's socket is missing, refuses, hangs up or stays silent: start another."""


def check_port(port: object) -> int:
    """``port`` as a TCP port number; InvalidRequestError saying what it takes otherwise."""
    # ASCII digits only: str.isdigit() and int() also take other scripts' digits ('٨٠' is 80)
    # and isdigit() takes '²', which int() refuses.
    if isinstance(port, str) and port.isascii() and port.isdigit() and len(port) <= 5:
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        raise InvalidRequestError(
            f"port must be a whole number from 1 to 65535 in ASCII digits, not {port!r}"
        )
    return port


class SandboxPorts(LoggingConfigurable):
    """Connections from the host to servers inside ``manager``'s running sandboxes."""

    answer_timeout = Float(
        5.0,
        help="Seconds the port opener in a sandbox has to answer a connection (it answers "
        "once it has reached the port or found nothing there).",
    ).tag(config=True)

    def __init__(self, manager: SandboxAccess, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        # One start at a time per sandbox; a removed sandbox's lock goes with its last user.
        self._starting: weakref.WeakValueDictionary[str, asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def connect(self, owner: str, sandbox_id: str, port: int) -> socket.socket:
        """A non-blocking socket joined to ``port`` on the loopback of ``owner``'s running
        sandbox. PortNotListeningError when nothing listens there; the caller closes it."""
        port = check_port(port)
        await self.manager.running(owner, sandbox_id)
        with self.manager.usage.using(sandbox_id):
            directory = SandboxDirectory(self.manager.settings.state_path, sandbox_id)
            name = await self._opener(directory)
            try:
                return await self._connect(directory, name, port)
            except _OpenerGone:
                # The sandbox's code may kill the opener: a new one, under a new name.
                name = await self._opener(directory, gone=name)
            try:
                return await self._connect(directory, name, port)
            except _OpenerGone as exc:
                raise PortOpenerError(
                    f"the port opener of sandbox {sandbox_id} does not answer ({exc})"
                ) from None

    async def listening(self, owner: str, sandbox_id: str) -> list[ListeningPort]:
        """The TCP ports servers listen on inside the sandbox (any of its addresses: all are
        its loopback), smallest first, with the command that listens. The sandbox's own
        machinery is left out: the network forwarder, and the pipe ipykernel opens on an
        ephemeral port for the output of processes it forks."""
        try:
            result = await self.manager.exec(
                owner,
                sandbox_id,
                image_programs.python(PROGRAM, "--list"),
                ExecOptions(timeout=30.0, max_output=MAX_LIST_BYTES, supervised=False),
            )
        except OutputTooLargeError:
            raise PortOpenerError(
                f"the port list of sandbox {sandbox_id} is longer than {MAX_LIST_BYTES} bytes: "
                "stop some of the servers in it"
            ) from None
        if result.exit_code != 0:
            raise PortOpenerError(
                f"listing the ports of sandbox {sandbox_id} failed: "
                f"{result.stderr.decode(errors='replace').strip()[-300:]}"
            )
        return listed_ports(result.stdout, sandbox_id)

    async def _opener(self, directory: SandboxDirectory, *, gone: str | None = None) -> str:
        """The file name of the opener's socket in the sandbox's io directory, starting the
        opener when none runs, or when the one named ``gone`` stopped answering."""
        sandbox_id = directory.sandbox_id
        lock = self._starting.get(sandbox_id)
        if lock is None:
            lock = self._starting[sandbox_id] = asyncio.Lock()
        async with lock:
            name = directory.read_state().get(STATE_KEY)
            if isinstance(name, str) and name != gone:
                return name  # running, or restarted by a caller that held the lock before us
            name = f"ports-{secrets.token_hex(4)}.sock"
            await start_listener(
                self.manager.backend,
                sandbox_id,
                image_programs.python(PROGRAM, f"{SANDBOX_IO_DIR}/{name}"),
                directory.io / name,
                what="port opener",
                error=PortOpenerError,
            )
            directory.update_state(port_opener=name)
            self.log.debug("port opener of sandbox %s listens on %s", sandbox_id, name)
            return name

    async def _connect(self, directory: SandboxDirectory, name: str, port: int) -> socket.socket:
        try:
            sock = await connect_pinned(str(directory.io / name))
        except SocketReplacedError as exc:  # the sandbox put something else there
            raise PortOpenerError(exc.message) from None
        except (FileNotFoundError, ConnectionError) as exc:
            raise _OpenerGone(repr(exc)) from None
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_sendall(sock, port_program.GREETING + f"{port}\n".encode())
            # Under gVisor the host side of a dead opener's socket may still accept: silence.
            answer = await within(self._answer(sock), self.answer_timeout)
        except (ConnectionError, asyncio.TimeoutError) as exc:
            sock.close()
            raise _OpenerGone(repr(exc)) from None
        except BaseException:
            sock.close()
            raise
        if answer == "OK":
            return sock
        sock.close()
        if not answer:
            raise _OpenerGone("it hung up")
        if answer.startswith("ERR "):
            raise PortNotListeningError(
                f"sandbox {directory.sandbox_id}: {answer[4:]}; start the server first, "
                f"listening on 127.0.0.1 or 0.0.0.0 (python -m http.server {port}, say)"
            )
        raise PortOpenerError(
            f"the port opener of sandbox {directory.sandbox_id} answered {answer[:80]!r}"
        )

    @staticmethod
    async def _answer(sock: socket.socket) -> str:
        """The opener's one-line answer, read a byte at a time: what follows is the server's."""
        loop = asyncio.get_running_loop()
        line = b""
        while not line.endswith(b"\n") and len(line) < MAX_ANSWER:
            chunk = await loop.sock_recv(sock, 1)
            if not chunk:
                break
            line += chunk
        return line.decode(errors="replace").strip()


def listed_ports(report: bytes, sandbox_id: str) -> list[ListeningPort]:
    """The user's listening ports in the port program's ``--list`` report, smallest first;
    PortOpenerError when the report is not exactly what the program prints (the sandbox's code
    can print anything in its place)."""
    try:
        decoded = strict_json.loads(report, max_bytes=MAX_LIST_BYTES)
    except strict_json.MalformedJSONError as exc:
        raise PortOpenerError(
            f"the port list of sandbox {sandbox_id} is unreadable: {exc.message}"
        ) from None
    if not isinstance(decoded, dict) or set(decoded) != {"listening", "ephemeral_from"}:
        raise PortOpenerError(
            f"the port list of sandbox {sandbox_id} is not an object of listening and "
            "ephemeral_from"
        )
    ephemeral_from = decoded["ephemeral_from"]
    listening = decoded["listening"]
    if not _is_port(ephemeral_from) or not isinstance(listening, list):
        raise PortOpenerError(
            f"the port list of sandbox {sandbox_id} has no port number as ephemeral_from or no "
            "list as listening"
        )
    found = set()
    for entry in listening:
        # Exactly [port, command]: int() would take "80", 80.9 and true as ports.
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and _is_port(entry[0])
            and isinstance(entry[1], str)
        ):
            raise PortOpenerError(
                f"the port list of sandbox {sandbox_id} has an entry that is not "
                f"[port, command]: {reprlib.repr(entry)}"
            )
        found.add(ListeningPort(entry[0], entry[1]))
    return sorted(port for port in found if not port.machinery(ephemeral_from))


def _is_port(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 65536


@dataclass(frozen=True, order=True)
class ListeningPort:
    """A TCP port a server listens on in a sandbox, and the command line of that server."""

    port: int
    command: str

    def machinery(self, ephemeral_from: int) -> bool:
        """Whether the sandbox's own machinery listens here, not a server of its user: the
        network forwarder, or the kernel on a port the system picked (``ephemeral_from`` on)."""
        if self.port == FORWARDER_PORT and FORWARDER_MARK in self.command:
            return True
        return "ipykernel" in self.command and self.port >= ephemeral_from
