"""REST handler of commands run in a sandbox: ``POST /api/sandboxes/{id}/commands``
(documented in openapi.yaml beside this file; what a command may do: sandbox/commands.py).

The body names the command (``{"command": ["ls", "-la"]}``, or a string for ``/bin/sh -c``),
optionally its time limit in seconds, its standard input, variables added to its environment
(``env``) and its working directory (``cwd``, default /workspace); the answer, once it has
ended, holds its exit code, output, and whether its time ran out. A command that fails is still
a 200: its exit code says so, as a shell's would. A ``cwd`` the sandbox lacks is a 404
(``file_not_found``): the command did not run (sandbox/exec_start.workdir_error).

With ``"stream": true`` the answer is a stream of Server-Sent Events, each sent as it comes
(sandbox/command_stream.py): ``stdout`` and ``stderr`` (``{"text": ...}``), then ``result``
(the result without its output), or ``error`` when the command failed once output was sent.
Its status and headers go out with the first event, so what fails before (an unknown or paused
sandbox, a missing cwd) is an ordinary error answer. A client that leaves stops the command.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.iostream import StreamClosedError

from ..sandbox.command_stream import Event, stream_command
from ..sandbox.commands import CommandRequest, run_command
from .handlers import _ID, SandboxAPIHandler
from .requests import json_object

log = logging.getLogger(__name__)

EVENT_STREAM = "text/event-stream"


def sse_event(name: str, data: dict[str, Any]) -> bytes:
    """One Server-Sent Event: its name, and its data as JSON on one ``data:`` line (JSON
    escapes every line break in a string, so a text with many lines is still one line)."""
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class SandboxCommandsHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/commands``: run one command to its end, or stream it."""

    # The task sending a stream's events; cancelled when the client leaves, unless it is
    # already closing the stream (a second cancellation would cut the command's kill short).
    _sending: asyncio.Task[None] | None = None
    _closing = False

    @web.authenticated
    @authorized
    async def post(self, sandbox_id: str) -> None:
        request = CommandRequest.from_json(json_object(self.request.body))
        if not request.stream:
            result = await run_command(self.manager, self.owner, sandbox_id, request)
            self.write_json(result.as_dict())
            return
        events = stream_command(self.manager, self.owner, sandbox_id, request)
        # A task of its own, so that on_connection_close can stop it without cancelling the
        # handler itself (tornado does not expect that of its request's coroutine).
        self._sending = asyncio.ensure_future(self._send(events))
        await asyncio.wait({self._sending})
        if self._sending.cancelled():
            log.info(
                "the client left %s: its command in %s was stopped", self.request.path, sandbox_id
            )
            return
        self._sending.result()  # an error before the first event: the usual error answer

    async def _send(self, events: AsyncGenerator[Event, None]) -> None:
        begun = False
        try:
            async for name, data in events:
                if not begun:  # the status and headers go with the first event
                    begun = True
                    self.set_header("Content-Type", EVENT_STREAM)
                    self.set_header("Cache-Control", "no-cache")
                    self.set_header("X-Accel-Buffering", "no")  # nginx in front: do not hold events
                self.write(sse_event(name, data))
                await self.flush()  # waits for the client: a slow one slows the command
            self.finish(set_content_type=EVENT_STREAM)
        except StreamClosedError:
            log.info("the client left %s while it was being written to", self.request.path)
        finally:
            self._closing = True
            await events.aclose()  # stops the command if it still runs

    def on_connection_close(self) -> None:
        if self._sending is not None and not self._closing:
            self._sending.cancel()
        super().on_connection_close()


command_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{_ID}/commands/?", SandboxCommandsHandler),
]
