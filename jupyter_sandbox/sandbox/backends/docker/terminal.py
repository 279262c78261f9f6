"""A shell on a TTY inside a Docker sandbox: DockerBackend.open_terminal.

The shell is an engine exec with a TTY and standard input attached, as ``docker exec -it``
makes one: the sandbox's user, its environment (plus TERM), /workspace. It is ``bash -i``, not
a login shell: Debian's /etc/profile, which a login shell reads, sets PATH anew and would hide
the sandbox's Python and what ``pip install`` put in /tmp/.local, which its kernel and its
commands find.

A terminal stays open for hours and is mostly idle, so its socket is not read by a worker
thread as a command's is (exec.py): a thread blocked in a read for each terminal would
soon take every worker of the engine's bounded executor, and every other engine call waits
for one. The engine's calls (create, start, resize, inspect, the kill) go through
:meth:`DockerEngine.run` as everywhere; only the socket the engine hands over is read and
written on the event loop, which never blocks on it. Its buffer is bounded (READ_AHEAD): a
reader that falls behind stops the reading, the engine's buffers fill, and the shell waits.

Closing kills the shell and everything it started (exec_deadline.py): the shell runs under a
supervisor whose subtree holds background jobs (``sleep 1000 &``), ``nohup`` and ``setsid``
daemons, whatever they do to their environment; what the shell left when it exited is reached
by the exec mark it inherited. The engine does not always end an exec whose
sandbox died (seen after gVisor's OOM kill), so a watch asks for the sandbox's state every
WATCH_SECONDS and ends the output when it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl

import docker.errors

from jupyter_sandbox.protocol.errors import (
    EngineUnavailableError,
    SandboxError,
    SandboxNotFoundError,
)
from jupyter_sandbox.sandbox.backends.base import WORKSPACE_DIR, Terminal, TerminalOptions
from jupyter_sandbox.sandbox.backends.docker.attached import AttachedExec, start_attached
from jupyter_sandbox.sandbox.backends.docker.engine import DockerEngine
from jupyter_sandbox.sandbox.backends.docker.exec import Inspect
from jupyter_sandbox.sandbox.backends.docker.exec_deadline import kill_marked, supervised_start
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.programs.exec_marks import new_mark, supervised

log = logging.getLogger(__name__)

SHELL = [image_programs.BASH, "-i"]
TERM = "xterm-256color"
# Bytes of output read ahead of the reader: asyncio stops reading the socket at twice this.
READ_AHEAD = 64 * 1024
# How often an open terminal checks that its sandbox still lives (seconds).
WATCH_SECONDS = 2.0
# Tries of the first resize: the engine refuses it until the exec's process exists (as
# Docker's own CLI does, each try waits 10 ms longer than the last).
RESIZE_TRIES = 10
EXIT_POLLS = 20  # looks at an ended shell's exec for its status, EXIT_POLL_SECONDS apart
EXIT_POLL_SECONDS = 0.05


async def open_docker_terminal(
    engine: DockerEngine,
    container: str,
    options: TerminalOptions,
    *,
    user: str,
    inspect: Inspect,
) -> DockerTerminal:
    """Start the shell in ``container`` as ``options`` say (TerminalOptions: its TTY's size,
    its directory, what it adds to the environment); SandboxNotFoundError when there is no
    such container. ``inspect`` reads the sandbox's state (for the watch)."""
    rows, cols, cwd, env = options.rows, options.cols, options.cwd, options.env
    mark = new_mark()
    # The mark last: nothing may unmark the shell, or closing it would miss what it started.
    environment = {"TERM": TERM, **(env or {}), **mark}

    def start() -> tuple[str, AttachedExec]:
        with supervised_start(engine, container, mark):  # the shell starts once placed
            return start_attached(
                engine,
                container,
                supervised(SHELL, mark),
                tty=True,
                user=user,
                stdin=True,
                environment=environment,
                workdir=cwd or WORKSPACE_DIR,
            )

    try:
        exec_id, attached = await engine.run(f"open a terminal in {container}", start)
    except docker.errors.NotFound:
        raise SandboxNotFoundError(f"no sandbox container {container}") from None
    terminal = DockerTerminal(engine, container, user, mark, exec_id, inspect)
    try:
        await terminal.connect(attached, rows, cols)
    except BaseException:
        await terminal.close()
        raise
    return terminal


class DockerTerminal(Terminal):
    """One shell's exec: its socket on the event loop, its mark, and the watch on its sandbox."""

    def __init__(
        self,
        engine: DockerEngine,
        container: str,
        user: str,
        mark: dict[str, str],
        exec_id: str,
        inspect: Inspect,
    ) -> None:
        self.engine = engine
        self.container = container
        self.user = user
        self.mark = mark
        self.exec_id = exec_id
        self._inspect = inspect
        self._attached: AttachedExec | None = None  # closed with the terminal
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._watch: asyncio.Task[None] | None = None
        self._closing: asyncio.Future[None] | None = None
        self._sandbox_gone = False
        self._output_ended = False  # a read found the end (EOF, or the connection dropped)

    async def connect(self, attached: AttachedExec, rows: int, cols: int) -> None:
        """Take over the exec's connection, size the TTY and start the watch."""
        self._attached = attached
        if isinstance(attached.socket, ssl.SSLSocket):
            raise EngineUnavailableError(
                "terminals need the Docker engine on a Unix socket or plain TCP; this one is "
                "reached over TLS (DOCKER_HOST): run the server on the engine's host"
            )
        # The shell's first output (its prompt) may have come with the engine's answer: it is
        # read first, before anything the event loop reads from the socket.
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_AHEAD, loop=loop)
        reader.feed_data(attached.read_ahead())
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        transport, _ = await loop.create_connection(lambda: protocol, sock=attached.socket)
        self._reader, self._writer = reader, asyncio.StreamWriter(transport, protocol, reader, loop)
        for attempt in range(RESIZE_TRIES):
            try:
                await self._resize(rows, cols)
                break
            except SandboxError:
                if attempt == RESIZE_TRIES - 1:
                    raise
                await asyncio.sleep(0.01 * (attempt + 1))
        self._watch = asyncio.ensure_future(self._watch_sandbox())

    async def read(self) -> bytes:
        if self._reader is None or self._closing is not None:
            return b""
        try:
            data = await self._reader.read(READ_AHEAD)
        except OSError:  # the engine dropped the connection: the output has ended
            data = b""
        self._output_ended = not data
        return data

    async def write(self, data: bytes) -> None:
        writer = self._writer
        if writer is None or self._closing is not None or writer.is_closing():
            return
        writer.write(data)
        with contextlib.suppress(OSError):  # ended meanwhile: what the shell never read is lost
            await writer.drain()

    async def resize(self, rows: int, cols: int) -> None:
        if self._closing is None and not self._ended():
            await self._resize(rows, cols)

    async def close(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        # Shielded: a caller cancelled meanwhile (a server stopping) must not cut the kill
        # short; the next close() awaits the same task.
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        try:
            # Also after the shell exited: a job it left running (nohup, &) is still marked.
            status = await self._sandbox_status()
            if status == "paused":  # frozen: nothing can be killed until it is thawed
                _kill_when_resumed(self)
            elif status is not None:
                await kill_marked(self.engine, self.container, self.user, self.mark)
        finally:
            self._hang_up()
            log.info("terminal %s in %s closed", self.exec_id[:12], self.container)

    async def exit_status(self) -> int | None:
        if not self._ended() or self._sandbox_gone:
            return None
        # The output ends a moment before the engine records the exit: ask a few times.
        for _ in range(EXIT_POLLS):
            try:
                found = await self.engine.run(
                    f"inspect a terminal in {self.container}",
                    self.engine.client.api.exec_inspect,
                    self.exec_id,
                )
            except (SandboxError, docker.errors.NotFound):
                return None
            code = found.get("ExitCode")
            if not found.get("Running") and code is not None:
                return int(code)
            await asyncio.sleep(EXIT_POLL_SECONDS)
        return None

    async def _resize(self, rows: int, cols: int) -> None:
        def resize() -> None:
            self.engine.client.api.exec_resize(self.exec_id, height=rows, width=cols)

        try:
            await self.engine.run(f"resize a terminal in {self.container}", resize)
        except docker.errors.NotFound:
            raise SandboxNotFoundError(f"no sandbox container {self.container}") from None

    async def _sandbox_status(self) -> str | None:
        """The sandbox's status when there may be processes to kill (None: it is gone)."""
        if self._sandbox_gone:
            return None
        try:
            info = await self._inspect()
        except SandboxNotFoundError:
            return None
        except SandboxError:  # the engine hiccuped: try the kill, which says why if it fails
            return "running"
        return info.status if info.alive else None

    def _ended(self) -> bool:
        return self._reader is None or self._output_ended or self._reader.at_eof()

    def _hang_up(self) -> None:
        """End the output now: abort, not close, which would first wait for the engine to
        take what is still buffered for the TTY (never, from a frozen sandbox)."""
        if self._writer is not None:
            self._writer.transport.abort()
        if self._attached is not None:
            with contextlib.suppress(OSError):
                self._attached.close()

    async def _watch_sandbox(self) -> None:
        while not self._ended():
            await asyncio.sleep(WATCH_SECONDS)
            try:
                info = await self._inspect()
            except SandboxNotFoundError:
                break
            except SandboxError as exc:  # the engine hiccuped: ask again next time
                log.debug("terminal %s: no state of %s: %s", self.exec_id[:12], self.container, exc)
                continue
            if not info.alive:
                break
        else:
            return  # the shell exited: its output ended by itself
        self._sandbox_gone = True
        log.info("terminal %s: its sandbox %s ended", self.exec_id[:12], self.container)
        self._hang_up()


# Kills waiting for a paused sandbox to be resumed; held here, as the loop keeps tasks weakly.
_DEFERRED_KILLS: set[asyncio.Task[None]] = set()


def _kill_when_resumed(terminal: DockerTerminal) -> None:
    """Kill what a terminal closed in a paused sandbox left, once the sandbox runs again (or
    not at all, once it is gone). Pausing freezes processes, and a frozen process cannot be
    killed from inside: the kill would fail, and the shell and its jobs outlive the terminal.
    Held by this server process: one that stops first leaves them, as before."""

    async def wait_then_kill() -> None:
        while True:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                info = await terminal._inspect()
            except SandboxNotFoundError:
                return
            except SandboxError:
                continue  # the engine hiccuped: ask again
            if not info.alive:
                return
            if info.running:
                await kill_marked(terminal.engine, terminal.container, terminal.user, terminal.mark)
                log.info(
                    "terminal %s: killed what it left, its sandbox resumed", terminal.exec_id[:12]
                )
                return

    task = asyncio.ensure_future(wait_then_kill())
    _DEFERRED_KILLS.add(task)
    task.add_done_callback(_DEFERRED_KILLS.discard)
