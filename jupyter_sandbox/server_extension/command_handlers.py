"""REST handler of commands run in a sandbox: ``POST /api/sandboxes/{id}/commands``
(documented in openapi.yaml beside this file; what a command may do: sandbox/commands.py).

The body names the command (``{"command": ["ls", "-la"]}``, or a string for ``/bin/sh -c``),
optionally its time limit in seconds, its standard input, variables added to its environment
(``env``) and its working directory (``cwd``, default /workspace); the answer, once it has
ended, holds its exit code, output, and whether its time ran out. A command that fails is still
a 200: its exit code says so, as a shell's would. A ``cwd`` the sandbox lacks is a 404
(``file_not_found``): the command did not run (docker_exec.workdir_error).
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..sandbox.commands import CommandRequest, run_command
from .handlers import _ID, SandboxAPIHandler
from .requests import json_object


class SandboxCommandsHandler(SandboxAPIHandler):
    """``/api/sandboxes/{id}/commands``: run one command to its end."""

    @web.authenticated
    @authorized
    async def post(self, sandbox_id: str) -> None:
        request = CommandRequest.from_json(json_object(self.request.body))
        result = await run_command(self.manager, self.owner, sandbox_id, request)
        self.write_json(result.as_dict())


command_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{_ID}/commands/?", SandboxCommandsHandler),
]
