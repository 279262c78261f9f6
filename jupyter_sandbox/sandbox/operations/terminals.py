"""Terminals: a shell in a sandbox that a person types into, as E2B's and the OpenAI Agents
SDK's PTY exec offer; JupyterLab reaches it over ``GET /api/sandboxes/{id}/terminal``, a
WebSocket (server_extension/terminal_handlers.py).

This is the manager's side of one: who may open it (the owner of a running sandbox, as for a
command: SandboxManager.running), how many one sandbox may have open at once
(``max_per_sandbox``), that its input and output count as the sandbox's activity for the idle
culler, and that every terminal still open is closed with the manager (the server stopping).
The shell itself, its TTY and the killing of what it started are the backend's
(backends/docker/terminal.py).
"""

from __future__ import annotations

import collections
import logging
import time
from typing import TYPE_CHECKING, Any

from traitlets import Integer
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    SandboxConflictError,
    TooManyTerminalsError,
)
from jupyter_sandbox.sandbox.backends.base import Terminal, TerminalOptions

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

log = logging.getLogger(__name__)

DEFAULT_ROWS = 24
DEFAULT_COLS = 80
MAX_SIZE = 1000  # rows or columns: more than any screen shows
# Input and output record the sandbox's last activity at most this often (seconds): a write of
# the state file per keystroke would cost more than the idle culler, counting in minutes, needs.
ACTIVITY_SECONDS = 30.0


def check_size(rows: Any, cols: Any) -> tuple[int, int]:
    """``(rows, cols)`` if both are whole numbers of character cells from 1 to MAX_SIZE;
    InvalidRequestError saying which is not."""
    for name, value, default in (("rows", rows, DEFAULT_ROWS), ("cols", cols, DEFAULT_COLS)):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
            raise InvalidRequestError(
                f"{name} must be a whole number of character cells from 1 to {MAX_SIZE} "
                f"(default {default}), not {value!r:.20}"
            )
    return rows, cols


class SandboxTerminals(LoggingConfigurable):
    """The terminals open in ``manager``'s sandboxes (configured as ``c.SandboxTerminals.*``)."""

    max_per_sandbox = Integer(
        8,
        min=0,
        config=True,
        help="""Terminals (shells) one sandbox may have open at once, counted in this server
        whoever opened them; one more is refused (HTTP 429) until one is closed. Each is a bash
        process in the sandbox, under its pids and memory limits. 0 turns terminals off.""",
    )

    def __init__(self, manager: SandboxAccess, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        self._open: dict[str, set[SandboxTerminal]] = collections.defaultdict(set)
        self._opening: collections.Counter[str] = collections.Counter()
        self._stopped = False

    async def open(self, owner: str, sandbox_id: str, options: TerminalOptions) -> SandboxTerminal:
        """A shell in the owner's running sandbox as ``options`` say: a TTY of rows x cols, in
        /workspace or its ``cwd``, with its ``env`` added to the environment
        (SandboxManager.open_terminal). A front end that takes ``cwd`` and ``env`` from a client
        checks them as a command's are first (CommandRequest.from_json, as the E2B API's PTY
        does): the mark the shell's kill relies on is put last whatever ``env`` holds."""
        rows, cols = check_size(options.rows, options.cols)
        await self.manager.running(owner, sandbox_id)
        held = self.open_count(sandbox_id) + self._opening[sandbox_id]
        if held >= self.max_per_sandbox:
            raise TooManyTerminalsError(
                f"sandbox {sandbox_id} already has {held} terminal(s) open, as many as "
                f"c.SandboxTerminals.max_per_sandbox ({self.max_per_sandbox}) allows: close "
                "one (type exit in it, or close its tab), or raise that setting in "
                "jupyter_sandbox_config.py"
                if self.max_per_sandbox
                else "terminals are turned off on this server "
                "(c.SandboxTerminals.max_per_sandbox is 0 in jupyter_sandbox_config.py)"
            )
        # Counted while the engine starts it, so that two opens at once cannot both pass.
        self._opening[sandbox_id] += 1
        try:
            inner = await self.manager.backend.open_terminal(
                sandbox_id, TerminalOptions(rows, cols, options.cwd, options.env)
            )
        finally:
            self._opening[sandbox_id] -= 1
            if not self._opening[sandbox_id]:
                del self._opening[sandbox_id]
        terminal = SandboxTerminal(inner, sandbox_id, self)
        self._open[sandbox_id].add(terminal)
        if self._stopped:  # the manager closed while the engine started it
            await terminal.close()
            raise SandboxConflictError("the server is stopping: open the terminal again later")
        self.record_activity(sandbox_id)
        log.info("terminal opened in sandbox %s of %s", sandbox_id, owner)
        return terminal

    def open_count(self, sandbox_id: str) -> int:
        """How many terminals are open in the sandbox now."""
        return len(self._open.get(sandbox_id, ()))

    async def close_all(self) -> None:
        """Close every open terminal (the manager closing: the server stops)."""
        self._stopped = True
        for terminal in [t for terminals in self._open.values() for t in terminals]:
            await terminal.close()

    def record_activity(self, sandbox_id: str) -> None:
        self.manager.usage.record(sandbox_id)

    def _closed(self, terminal: SandboxTerminal) -> None:
        held = self._open.get(terminal.sandbox_id)
        if held is not None:
            held.discard(terminal)
            if not held:
                del self._open[terminal.sandbox_id]


class SandboxTerminal(Terminal):
    """A backend's terminal as the manager hands it out: typing into it and its output record
    the sandbox's activity, its size is checked, and closing it frees its place under the cap."""

    def __init__(self, inner: Terminal, sandbox_id: str, terminals: SandboxTerminals) -> None:
        self.sandbox_id = sandbox_id
        self._inner = inner
        self._terminals = terminals
        self._recorded = time.monotonic()  # opening recorded it

    async def read(self) -> bytes:
        data = await self._inner.read()
        if data:  # a job printing as it works is activity, with nobody typing
            self._record_activity()
        return data

    async def write(self, data: bytes) -> None:
        self._record_activity()
        await self._inner.write(data)

    def _record_activity(self) -> None:
        now = time.monotonic()
        if now - self._recorded >= ACTIVITY_SECONDS:
            self._recorded = now
            self._terminals.record_activity(self.sandbox_id)

    async def resize(self, rows: int, cols: int) -> None:
        await self._inner.resize(*check_size(rows, cols))

    async def close(self) -> None:
        try:
            await self._inner.close()
        finally:
            self._terminals._closed(self)

    async def exit_status(self) -> int | None:
        return await self._inner.exit_status()
