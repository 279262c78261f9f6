"""REST handler of commands run in a sandbox: ``POST /api/sandboxes/{id}/commands``, and
``GET`` of the same route, the sandbox's background commands (documented in openapi.yaml
beside this file; what a command may do: sandbox/operations/commands.py).

The body names the command (``{"command": ["ls", "-la"]}``, or a string for ``/bin/sh -c``),
optionally its time limit in seconds, its standard input, variables added to its environment
(``env``) and its working directory (``cwd``, default /workspace); the answer, once it has
ended, holds its exit code, output, and whether its time ran out. A command that fails is still
a 200: its exit code says so, as a shell's would. A ``cwd`` the sandbox lacks is a 404
(``file_not_found``): the command did not run (sandbox/exec_start.workdir_error).

With ``"stream": true`` the answer is a stream of Server-Sent Events, each sent as it comes
(sandbox/operations/command_stream.py): ``stdout`` and ``stderr`` (``{"text": ...}``), then ``result``
(the result without its output), or ``error`` when the command failed once output was sent.
They are sent by event_stream.py: the status and headers go out with the first event, so what
fails before (an unknown or paused sandbox, a missing cwd) is an ordinary error answer, and a
client that leaves stops the command.

With ``"background": true`` the command is started and left running (sandbox/operations/background.py):
the answer is a 201 at once, its ``Location`` the command's own route, where it is looked at,
its output read and it is stopped (background_handlers.py).
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_sandbox.protocol.requests import MAX_JSON_BODY
from jupyter_sandbox.sandbox.operations.command_stream import stream_command
from jupyter_sandbox.sandbox.operations.commands import MAX_STDIN, CommandRequest, run_command
from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    JsonBodyHandler,
    SandboxAPIHandler,
    authorized_to_execute,
)
from jupyter_sandbox.server_extension.event_stream import EventStreamHandler


class SandboxCommandsHandler(JsonBodyHandler, EventStreamHandler):
    """``/api/sandboxes/{id}/commands``: run one command to its end, stream it, or start it in
    the background; list the background commands."""

    # stdin at its most, as JSON: text grows little; bytes JSON escapes (controls) six-fold,
    # which past this bound is better sent as a file.
    max_body_bytes = MAX_JSON_BODY + 2 * MAX_STDIN
    too_large_advice = (
        ": upload large input with PUT /api/sandboxes/{id}/files/content and read it from the file"
    )

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        commands = await self.manager.background.list(self.owner, sandbox_id)
        self.write_json({"commands": [command.as_dict() for command in commands]})

    @web.authenticated
    @authorized_to_execute
    async def post(self, sandbox_id: str) -> None:
        request = CommandRequest.from_json(await self.json_body())
        if request.background:
            await self._start(sandbox_id, request)
            return
        await self.answer_run(
            sandbox_id, request, run_command, stream_command, f"its command in {sandbox_id}"
        )

    async def _start(self, sandbox_id: str, request: CommandRequest) -> None:
        command = await self.manager.background.start(self.owner, sandbox_id, request)
        location = url_path_join(
            self.base_url, "api/sandboxes", sandbox_id, "commands", command.command_id
        )
        self.set_header("Location", location)
        self.write_json(command.as_dict(), 201)


command_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/commands/?", SandboxCommandsHandler),
]
