"""Code run in a sandbox's live interpreter on request: what E2B's ``run_code`` and OpenSandbox's
code API give agent code, over ``POST /api/sandboxes/{id}/execute``
(server_extension/code_handlers.py), ``jupyter sandbox run`` and :func:`run_code` in Python.

The code runs in the kernel the sandbox already has, the one a notebook attached to it uses: a
run sees the variables and imports earlier runs and cells left, and leaves its own. A run
borrows a ready client of that kernel from the manager's pool (kernel_link/clients.py: made through
pinned sockets by kernel_link, kept for the next run only if this one ended cleanly and only
for the same interpreter) and the protocol is spoken by kernel_link/execution.py; this module adds what a caller
without a frontend needs: the request's checks, and the outputs gathered into one result as a
notebook would show them (cell_output.py: ``clear_output`` clears, ``update_display_data``
replaces), capped at MAX_OUTPUT (more interrupts the code: stream it instead). With ``"stream": true`` (or an
``output`` callback) each output is passed on as it comes instead, and the result holds none.

A run is activity and keeps the sandbox in use while it lasts (usage.py), as a command does.
Runs from several callers queue in the kernel, one at a time, as cells do; an error in one
does not abort the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_sandbox.protocol.cell_output import CellOutput, size_of
from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    OutputTooLargeError,
    SandboxConflictError,
    SandboxDiedError,
    SandboxError,
    SandboxNotFoundError,
    SandboxStartError,
)
from jupyter_sandbox.protocol.requests import STREAM, flag_of, request_object
from jupyter_sandbox.protocol.statuses import RunStatus
from jupyter_sandbox.sandbox.kernel_link.execution import Output, SendObserver, execute
from jupyter_sandbox.sandbox.operations.command_stream import final_event
from jupyter_sandbox.sandbox.operations.commands import DEFAULT_TIMEOUT, timeout_of
from jupyter_sandbox.sandbox.sandbox_access import SandboxKernels

MAX_CODE = 4 * 1024**2  # characters of code a request may send
PAUSED_DURING_RUN = (
    "the sandbox was paused: its code is frozen where it was; resume the sandbox (POST "
    "/api/sandboxes/<id>/resume) to let it go on, and read what it wrote from its files"
)
MAX_OUTPUT = 16 * 1024**2  # bytes of output (text, and display data as JSON) a result holds
# Bytes of streamed output waiting for a client that reads slower than the code writes: the
# kernel cannot be held back (its output would be dropped, not delayed), so past this the code
# is interrupted rather than the server's memory filled.
MAX_PENDING = 64 * 1024**2
CONNECT_TIMEOUT = 30.0  # seconds for the kernel to answer (one restarting in place takes ~1 s)
FIELDS = ("code", "timeout", "stream")
EXAMPLE = '{"code": "import sys; print(sys.version)", "timeout": 30}'

# (name, data): ("stdout" | "stderr", {"text"}), ("display", {...}), ("clear", {"wait"}), then
# ("result", CodeResult.as_dict()), or ("error", SandboxError.to_dict()) once output was sent.
Event = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class CodeRequest:
    """Code to run, its time limit in seconds, and whether its output is sent as it comes."""

    code: str
    timeout: float = DEFAULT_TIMEOUT
    stream: bool = False

    @classmethod
    def from_json(cls, body: Any) -> CodeRequest:
        """The request in a decoded JSON body; InvalidRequestError says what is wrong."""
        body = request_object(body, FIELDS, "a run takes code, timeout and stream", EXAMPLE)
        code = body.get("code")
        if not isinstance(code, str) or not code.strip():
            raise InvalidRequestError(f"code must be a non-empty string of Python, e.g. {EXAMPLE}")
        if len(code) > MAX_CODE:
            raise InvalidRequestError(
                f"code may hold at most {MAX_CODE // 1024**2} Mi characters: put larger programs "
                "in a file (PUT /api/sandboxes/{id}/files/content) and run that"
            )
        timeout = timeout_of(body.get("timeout", DEFAULT_TIMEOUT))
        stream = flag_of(body.get("stream", False), "stream", STREAM)
        return cls(code=code, timeout=timeout, stream=stream)


@dataclass(kw_only=True)
class CodeResult:
    """How a run ended: the kernel's status ("ok", "error": the code raised, "aborted"), its
    execution count, what it printed and displayed (empty when streamed), the exception, and
    whether its time ran out (the code was interrupted; ``still_running`` if it ignored that)."""

    # In the order the REST answer lists them (as_dict).
    status: RunStatus
    execution_count: int | None
    stdout: str = ""
    stderr: str = ""
    outputs: list[dict[str, Any]] = field(default_factory=list)
    error: dict[str, Any] | None
    timed_out: bool
    still_running: bool
    duration: float  # seconds from the request to its result, as the host measured them
    queued: float = 0.0  # seconds of those it waited for code ahead of it (a cell, a run)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "duration": round(self.duration, 3),
            "queued": round(self.queued, 3),
        }


async def run_code(
    manager: SandboxKernels,
    owner: str,
    sandbox_id: str,
    request: CodeRequest,
    output: Output | None = None,
    observer: SendObserver | None = None,
) -> CodeResult:
    """Run ``request.code`` in the owner's running sandbox's kernel; with ``output``, each
    output goes there as it comes (see kernel_execution.Output) and the result holds none.

    SandboxConflictError when the sandbox is paused or stopped, or its interpreter was
    restarted during the run; SandboxDiedError when the sandbox stopped during it;
    OutputTooLargeError past MAX_OUTPUT (the code is interrupted), or when its exception takes
    the result past it. Cancelling interrupts it. ``observer`` follows the request from
    outside (kernel_execution.execute).
    """
    await manager.running(owner, sandbox_id)
    generation = manager.read_state(sandbox_id).get("generation", 0)
    shown = CellOutput()

    def gather(name: str, data: dict[str, Any]) -> None:
        shown.add(name, data)
        if shown.size > MAX_OUTPUT:
            raise OutputTooLargeError(
                f"the code's output passed {_amount(MAX_OUTPUT)} and the code was "
                'interrupted: send "stream": true to receive it as it comes, or write it to a '
                "file and fetch that (GET /api/sandboxes/{id}/files/content?path=FILE)"
            )

    async def why_not() -> str | None:
        try:
            info = await manager.get(owner, sandbox_id)
        except SandboxNotFoundError:
            return "the sandbox was removed"
        if not info.alive:
            return f"the sandbox stopped: {info.death_cause()}"
        if info.status == "paused":  # its kernel is frozen: no answer comes until a resume
            return PAUSED_DURING_RUN
        if manager.read_state(sandbox_id).get("generation", 0) != generation:
            return "its interpreter was restarted"
        return None

    def ended(reason: str) -> SandboxError:
        message = f"the code run in sandbox {sandbox_id} ended without a result: {reason}"
        # Restarted or paused: the sandbox lives on, in a state the run cannot go on in.
        conflict = reason.startswith("its interpreter") or reason == PAUSED_DURING_RUN
        return SandboxConflictError(message) if conflict else SandboxDiedError(message)

    with manager.usage.using(sandbox_id):
        try:
            async with manager.kernel_clients.client(
                sandbox_id,
                generation,
                manager.kernel_connection(sandbox_id),
                timeout=CONNECT_TIMEOUT,
                still_running=why_not,
            ) as lease:
                outcome = await execute(
                    lease.client,
                    request.code,
                    timeout=request.timeout,
                    output=output or gather,
                    still_running=why_not,
                    on_reason=ended,
                    observer=observer,
                    hand_over=lease.hand_over,
                )
                # Interrupted code may still have its interrupt_reply on the way: not kept.
                lease.clean = not (outcome.timed_out or outcome.still_running)
        except SandboxStartError as exc:  # the kernel did not answer: say so for a run
            raise SandboxConflictError(
                f"sandbox {sandbox_id}'s interpreter does not answer, so the code did not run "
                f"({exc.message}); restart it (POST /api/sandboxes/{sandbox_id}/restart)"
            ) from None
    if output is None and shown.size + error_size(outcome.error) > MAX_OUTPUT:
        # The exception is output as much as a print is: a 20 MB one was answered whole.
        raise OutputTooLargeError(
            f"the code's output and exception (its message and traceback) passed "
            f"{_amount(MAX_OUTPUT)}: raise a shorter exception, or write the details to a file "
            "and fetch that (GET /api/sandboxes/{id}/files/content?path=FILE)"
        )
    return CodeResult(
        status=outcome.status,
        execution_count=outcome.execution_count,
        error=outcome.error,
        timed_out=outcome.timed_out,
        still_running=outcome.still_running,
        duration=outcome.duration,
        queued=outcome.queued,
        **shown.answer(),
    )


async def stream_code(
    manager: SandboxKernels, owner: str, sandbox_id: str, request: CodeRequest
) -> AsyncGenerator[Event, None]:
    """The run's outputs as they come, then ("result", ...). What fails before the first event
    is raised (an ordinary error answer); after it, it is the last event ("error", ...).
    Closing the generator early (the client left) interrupts the code."""
    events: asyncio.Queue[Event | None] = asyncio.Queue()
    pending = 0

    def output(name: str, data: dict[str, Any]) -> None:
        nonlocal pending
        pending += size_of(data)
        if pending > MAX_PENDING:
            raise OutputTooLargeError(
                f"the client read the code's output too slowly ({_amount(MAX_PENDING)} waited "
                "for it) and the code was interrupted"
            )
        events.put_nowait((name, data))

    run = asyncio.ensure_future(run_code(manager, owner, sandbox_id, request, output))
    run.add_done_callback(lambda _: events.put_nowait(None))
    sent = False
    try:
        while (event := await events.get()) is not None:
            pending -= size_of(event[1])
            sent = True
            yield event
        yield final_event(run, sent)
    finally:
        if not run.done():
            run.cancel()  # interrupts the code (kernel_execution.execute)
        await asyncio.gather(run, return_exceptions=True)


def error_size(error: dict[str, Any] | None) -> int:
    """The characters an exception holds in a result: its name, message and traceback."""
    if not error:
        return 0
    lines = error.get("traceback", [])
    return (
        len(str(error.get("ename", "")))
        + len(str(error.get("evalue", "")))
        + sum(len(str(line)) for line in lines)
    )


def _amount(size: int) -> str:
    return f"{size // 1024**2} MiB" if size >= 1024**2 else f"{size} bytes"
