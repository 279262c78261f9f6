"""REST handler of code run in a sandbox's live interpreter: ``POST /api/sandboxes/{id}/execute``
(documented in openapi.yaml beside this file; what a run does: sandbox/operations/code_runs.py).

The body holds Python code (``{"code": "x = 41"}``), optionally its time limit in seconds; it
runs in the kernel the sandbox already has, so a run sees what earlier runs and cells left. The
answer, once the code has ended, holds the kernel's status, what the code printed and displayed,
the exception it raised (as plain text), and whether its time ran out. Code that raises is still
a 200: ``status`` and ``error`` say so, as a notebook cell's would.

With ``"stream": true`` the answer is a stream of Server-Sent Events, each sent as it comes:
``stdout``, ``stderr``, ``display`` and ``clear``, then ``result`` (the result without its
output), or ``error`` when the run failed once output was sent. They are sent by
event_stream.py: what fails before the first event (an unknown or paused sandbox) is an
ordinary error answer, and a client that leaves interrupts the code.

Every run, streamed or not, holds one of its owner's event streams while it lasts
(SandboxExtension.max_event_streams_per_owner; past it a 429 before anything is opened): a run
answered whole holds a client of the kernel (sockets, a ZMQ thread) for as long as a streamed one,
queued behind the kernel's other runs up to its time limit. One count rather than a cap of
runs of its own: E2B's run_code, always streamed, is counted there already, so a run counts the
same whichever API or answer form asked for it.
"""

from __future__ import annotations

from tornado import web

from jupyter_sandbox.protocol.requests import MAX_JSON_BODY
from jupyter_sandbox.sandbox.operations.code_runs import (
    MAX_CODE,
    CodeRequest,
    run_code,
    stream_code,
)
from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    JsonBodyHandler,
    SandboxAPIHandler,
    authorized_to_execute,
)
from jupyter_sandbox.server_extension.event_stream import EventStreamHandler


class SandboxCodeHandler(JsonBodyHandler, EventStreamHandler):
    """``/api/sandboxes/{id}/execute``: run code in the sandbox's kernel to its end, or
    stream its output."""

    # The code at its most, as JSON: a character is at most four bytes of UTF-8.
    max_body_bytes = MAX_JSON_BODY + 4 * MAX_CODE
    too_large_advice = (
        ": put a larger program in a file (PUT /api/sandboxes/{id}/files/content) and run that"
    )

    @web.authenticated
    @authorized_to_execute
    async def post(self, sandbox_id: str) -> None:
        request = CodeRequest.from_json(await self.json_body())
        await self.answer_run(
            sandbox_id,
            request,
            run_code,
            stream_code,
            f"its code run in {sandbox_id}",
            counted=True,
        )


code_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/execute/?", SandboxCodeHandler),
]
