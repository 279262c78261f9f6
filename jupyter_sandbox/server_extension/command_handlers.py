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
They are sent by event_stream.py: the status and headers go out with the first event, so what
fails before (an unknown or paused sandbox, a missing cwd) is an ordinary error answer, and a
client that leaves stops the command.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..sandbox.command_stream import stream_command
from ..sandbox.commands import CommandRequest, run_command
from .event_stream import EventStreamHandler
from .handlers import _ID, SandboxAPIHandler
from .requests import json_object


class SandboxCommandsHandler(EventStreamHandler):
    """``/api/sandboxes/{id}/commands``: run one command to its end, or stream it."""

    @web.authenticated
    @authorized
    async def post(self, sandbox_id: str) -> None:
        request = CommandRequest.from_json(json_object(self.request.body))
        if not request.stream:
            result = await run_command(self.manager, self.owner, sandbox_id, request)
            self.write_json(result.as_dict())
            return
        events = stream_command(self.manager, self.owner, sandbox_id, request)
        await self.send_events(events, f"its command in {sandbox_id}")


command_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{_ID}/commands/?", SandboxCommandsHandler),
]
