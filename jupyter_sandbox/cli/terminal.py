"""``jupyter sandbox terminal SANDBOX_ID``: an interactive shell in a sandbox, as ``docker exec
-it`` gives one, for those without a Jupyter Server (with one, JupyterLab's *Open terminal*, or
the WebSocket ``GET /api/sandboxes/{id}/terminal``).

The shell is the one the server's terminals open (SandboxManager.open_terminal: the sandbox's
user, /workspace, killed with everything it started when it closes). This process's terminal is
put in raw mode, so that every key (Ctrl-C included) goes to the shell, and restored however the
session ends; its size follows the window (SIGWINCH). The session ends when the shell exits, or
when this process is told to stop (SIGHUP: the window was closed; SIGTERM). Its exit status is
the shell's, as ssh's and ``docker exec -it``'s are, or 128 + the signal that stopped it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import termios
import tty
from collections.abc import Iterator

from jupyter_sandbox.cli.owner import OwnerCommand
from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.backends.base import Terminal
from jupyter_sandbox.sandbox.manager import SandboxManager

READ_BYTES = 64 * 1024


class TerminalApp(OwnerCommand):
    description = (
        "An interactive shell in a running sandbox, as its user, in /workspace (as docker exec "
        "-it); exit, or close the window, to end it and what it started."
    )
    usage = "terminal SANDBOX_ID"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str) -> int:
        stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
        if not (os.isatty(stdin) and os.isatty(stdout)):
            raise InvalidRequestError(
                "jupyter sandbox terminal needs a terminal for its input and output; for a "
                f"command with piped input use: jupyter sandbox exec -i {sandbox_id} -- COMMAND"
            )
        size = os.get_terminal_size(stdout)
        terminal = await manager.open_terminal(
            owner, sandbox_id, rows=max(size.lines, 1), cols=max(size.columns, 1)
        )
        try:
            with raw_mode(stdin):
                stopped_by = await relay(terminal, stdin, stdout)
            # As ssh and docker exec -it do: the shell's own status, or 128 + the signal
            # that ended the session here.
            status = await terminal.exit_status() if stopped_by is None else 128 + stopped_by
        finally:
            await terminal.close()
        return status if status is not None and 0 <= status <= 255 else 1


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """Keys reach the shell as typed (no echo, no line editing, Ctrl-C a byte, not a signal),
    until the block ends; then the terminal's settings are as they were."""
    saved = termios.tcgetattr(fd)
    tty.setraw(fd)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


async def relay(terminal: Terminal, stdin: int, stdout: int) -> int | None:
    """Keys to the shell and its output to this terminal, until the shell's output ends or a
    signal says to stop (SIGHUP, SIGTERM: its number is returned; None otherwise); the
    window's size follows along."""
    loop = asyncio.get_running_loop()
    keys: asyncio.Queue[bytes] = asyncio.Queue()
    stop = asyncio.Event()

    def read_keys() -> None:
        data = os.read(stdin, READ_BYTES)
        if data:
            keys.put_nowait(data)
        else:  # our input ended (its terminal went away)
            stop.set()

    resizing: set[asyncio.Task[None]] = set()  # held until done (the loop keeps weak refs)

    def resize() -> None:
        size = os.get_terminal_size(stdout)
        task = loop.create_task(terminal.resize(max(size.lines, 1), max(size.columns, 1)))
        resizing.add(task)
        task.add_done_callback(resizing.discard)

    async def send_keys() -> None:
        while True:
            await terminal.write(await keys.get())

    async def show_output() -> None:
        while data := await terminal.read():
            await loop.run_in_executor(None, _write_all, stdout, data)

    loop.add_reader(stdin, read_keys)
    loop.add_signal_handler(signal.SIGWINCH, resize)
    stopped_by: list[int] = []

    def stop_on(signum: int) -> None:
        stopped_by.append(signum)
        stop.set()

    for stopping in (signal.SIGHUP, signal.SIGTERM):
        loop.add_signal_handler(stopping, stop_on, stopping)
    tasks = [asyncio.ensure_future(task) for task in (send_keys(), show_output(), stop.wait())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loop.remove_reader(stdin)
        for handled in (signal.SIGWINCH, signal.SIGHUP, signal.SIGTERM):
            loop.remove_signal_handler(handled)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return stopped_by[0] if stopped_by else None


def _write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` (a terminal takes a big output in pieces)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
