"""The terminal WebSocket: ``GET /api/sandboxes/{id}/terminal?rows=24&cols=80`` (documented in
openapi.yaml beside this file; the shell, its cap and its activity: sandbox/operations/terminals.py).

It speaks terminado's protocol, which JupyterLab's TerminalConnection speaks, so Lab's own
terminal widget can show it unchanged. Every message is a JSON array. The client sends
``["stdin", text]`` and ``["set_size", rows, cols, ...]`` (Lab adds pixel sizes: ignored); the
server sends ``["setup", {}]`` once, ``["stdout", text]`` as the shell writes (UTF-8 decoded
incrementally, undecodable bytes replaced), and ``["disconnect", 1]`` when the shell has ended,
then closes the WebSocket. A malformed message is ignored, with a warning in the server's log
that never holds what was typed.

What can fail before a shell runs fails before the upgrade, as the other routes' JSON errors:
authentication, authorization (action "execute" on "sandboxes", as Jupyter's own terminals ask
"execute" on "terminals"), bad rows or cols (400), an unknown sandbox or another owner's (404),
a paused one (409), one past its cap (429). The terminal then lives as long as :meth:`get`:
tornado's WebSocketHandler.get returns once the connection has ended, and the terminal is
closed there, which kills the shell and everything it started. A client that leaves starts
that at once (:meth:`on_close`), so that it does not wait on input the shell is not reading.
Output goes out one message at a time, each awaited until sent: a client that reads slowly
holds the shell back instead of filling the server's memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.websocket import WebSocketMixin
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError
from jupyter_sandbox.sandbox.backends.base import Terminal
from jupyter_sandbox.sandbox.operations.command_stream import OutputDecoder
from jupyter_sandbox.sandbox.operations.terminals import (
    DEFAULT_COLS,
    DEFAULT_ROWS,
    MAX_SIZE,
    check_size,
)
from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    SandboxHandlerBase,
    authorized_to_execute,
)

log = logging.getLogger(__name__)

CLIENT_MESSAGES = ("stdin", "set_size")
# The longest message a client may send, in bytes (a paste into the terminal is one message);
# a longer one is ignored, with a warning in the log.
MAX_CLIENT_MESSAGE = 1024 * 1024


def client_message(message: str | bytes) -> tuple[str, Any]:
    """``("stdin", bytes)`` or ``("set_size", (rows, cols))`` from a client's message;
    InvalidRequestError saying what is wrong with it, never quoting it (it is logged, and what
    a person types is nobody else's to read)."""
    raw = message.encode(errors="surrogatepass") if isinstance(message, str) else message
    try:
        # The strict reader: plain json.loads raised RecursionError (not ValueError) on a
        # message nested past the stack, out of on_message.
        decoded = strict_json.loads(raw, max_bytes=MAX_CLIENT_MESSAGE)
    except strict_json.MalformedJSONError:  # its message may quote a number typed
        raise InvalidRequestError(
            f"not one JSON text of at most {MAX_CLIENT_MESSAGE} bytes (UTF-8, nested within "
            "the stack, finite numbers, each key once)"
        ) from None
    if not isinstance(decoded, list) or not decoded:
        raise InvalidRequestError("not a JSON array")
    kind, *content = decoded
    if kind not in CLIENT_MESSAGES:
        raise InvalidRequestError(f"not one of {', '.join(CLIENT_MESSAGES)}")
    if kind == "stdin":
        if len(content) != 1 or not isinstance(content[0], str):
            raise InvalidRequestError("stdin without one string")
        # A lone surrogate ("\ud800") is no character a TTY can take: replaced.
        return kind, content[0].encode(errors="replace")
    if len(content) >= 2:
        with contextlib.suppress(InvalidRequestError):  # its message quotes the value
            return kind, check_size(content[0], content[1])
    raise InvalidRequestError(f"set_size without rows and cols as whole numbers 1 to {MAX_SIZE}")


class SandboxTerminalHandler(WebSocketMixin, SandboxHandlerBase, WebSocketHandler):
    """``/api/sandboxes/{id}/terminal``: a shell in the sandbox, over a WebSocket."""

    _terminal: Terminal | None = None
    _sandbox_id = ""
    _sending: asyncio.Task[None] | None = None
    _closing: asyncio.Future[None] | None = None

    @ws_authenticated
    @authorized_to_execute
    async def get(self, sandbox_id: str) -> None:
        rows, cols = check_size(
            self._number("rows", DEFAULT_ROWS), self._number("cols", DEFAULT_COLS)
        )
        if self.request.headers.get("Upgrade", "").lower() != "websocket":
            raise InvalidRequestError(
                "this route is a WebSocket: connect with a WebSocket client (ws:// or wss://); "
                "its messages are described in the API's openapi.yaml"
            )
        # Checked again by tornado at the upgrade; here so that no shell starts for a page of
        # another site (a browser sends its cookies with a cross-site WebSocket).
        origin = self.request.headers.get("Origin")
        if origin is not None and not self.check_origin(origin):
            raise web.HTTPError(403, "cross-origin WebSocket refused")
        self._sandbox_id = sandbox_id
        self._terminal = await self.manager.open_terminal(
            self.owner, sandbox_id, rows=rows, cols=cols
        )
        try:
            await super().get(sandbox_id)  # the upgrade; returns once the connection has ended
        finally:
            await self._end()

    def _number(self, name: str, default: int) -> int | str:
        """The query argument ``name`` as a number if it is one (check_size judges it)."""
        value = self.query_argument(name)
        if value is None:
            return default
        # A number of more digits than any size has is check_size's to refuse, as text: int()
        # of thousands of digits raises ValueError (a 500).
        return int(value) if value.isascii() and value.isdigit() and len(value) <= 9 else value

    async def open(self, sandbox_id: str) -> None:
        super().open(sandbox_id)  # WebSocketMixin's: keep-alive pings
        # Each echo of a keystroke at once, not after the client's delayed acknowledgement of
        # the one before (server_extension/kernel_websocket.py says why).
        self.set_nodelay(True)
        try:
            await self._send("setup", {})
        except WebSocketClosedError:
            return  # gone already: get() closes the terminal
        self._sending = asyncio.ensure_future(self._send_output())

    async def _send_output(self) -> None:
        assert self._terminal is not None
        decoder = OutputDecoder()
        try:
            while data := await self._terminal.read():
                text = decoder.decode("stdout", data)
                if text:  # empty while a character is incomplete
                    await self._send("stdout", text)
            for _, text in decoder.flush():
                await self._send("stdout", text)
            await self._send("disconnect", 1)
        except WebSocketClosedError:
            return  # the client left: get() closes the terminal
        except Exception:  # nobody awaits this task's outcome: say it here, and hang up
            log.exception("terminal in sandbox %s: sending its output failed", self._sandbox_id)
        else:
            log.info("terminal in sandbox %s: the shell ended", self._sandbox_id)
        self.close()

    async def _send(self, kind: str, content: Any) -> None:
        # Awaited until sent: a client that reads slowly holds the shell back.
        await self.write_message(json.dumps([kind, content], ensure_ascii=False))

    async def on_message(self, message: str | bytes) -> None:
        terminal = self._terminal
        if terminal is None:
            return
        try:
            kind, content = client_message(message)
        except InvalidRequestError as exc:
            log.warning(
                "terminal in sandbox %s: ignored a malformed message (%s)",
                self._sandbox_id,
                exc.message,
            )
            return
        try:
            if kind == "stdin":
                await terminal.write(content)
            else:
                await terminal.resize(*content)
        except SandboxError as exc:  # a raise here would abort the connection
            log.warning("terminal in sandbox %s: %s failed: %s", self._sandbox_id, kind, exc)

    def on_close(self) -> None:
        if self._terminal is not None and self._closing is None:
            self._closing = asyncio.ensure_future(self._terminal.close())

    async def _end(self) -> None:
        """Stop sending and close the terminal: the connection has ended, or never began."""
        if self._sending is not None:
            self._sending.cancel()
            await asyncio.gather(self._sending, return_exceptions=True)
        if self._terminal is not None:
            await self._terminal.close()  # the same close on_close began, if it did
        if self._closing is not None:
            await asyncio.gather(self._closing, return_exceptions=True)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, SandboxError):
            super().write_error(status_code, **kwargs)
            return
        self.write_error_json(status_code, exc)


terminal_handlers: list[tuple[str, type[SandboxHandlerBase]]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/terminal/?", SandboxTerminalHandler),
]
