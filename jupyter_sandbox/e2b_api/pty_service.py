"""E2B's PTY: envd's ``process.Process/Start`` with ``pty``, on the core's terminals
(sandbox/operations/terminals.py), as ``Sandbox.pty.create`` and the OpenAI Agents SDK's
``pty_exec_start(tty=True)`` use it.

A PTY is the sandbox's interactive shell on a TTY, as a terminal of our REST API is: opened by
SandboxManager.open_terminal (the owner of a running sandbox, the sandbox's cap on terminals,
its user), in the ``cwd`` and with the ``envs`` asked for (checked as a command's are), its
input and output counting as the sandbox's activity. Its output is sent as the stream's
``data.pty`` events (base64 in JSON, as envd sends bytes), what is typed arrives by SendInput
and a new size by Update (process_service.py). It ends when the shell exits (``end`` with its
exit status), at the stream's timeout (Connect-Timeout-Ms, at most an hour: ended with
``deadline_exceeded``), by SendSignal, or when its client leaves; each closes the terminal,
which kills the shell and everything it started.

The program is the sandbox's shell: E2B's SDKs ask for ``/bin/bash -i -l``, and what runs is
``bash -i``, as every terminal of the sandbox (backends/docker/terminal.py says why not a login
shell). Another program on a PTY is refused, not run differently.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.e2b_api.connect_protocol import Message
from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.e2b_api.home import to_sandbox
from jupyter_sandbox.e2b_api.process_service import Running, timeout_seconds
from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.commands import CommandRequest
from jupyter_sandbox.sandbox.operations.terminals import DEFAULT_COLS, DEFAULT_ROWS, MAX_SIZE
from jupyter_sandbox.sandbox.programs import image_programs

SHELL_FLAGS = frozenset({"-i", "-l"})  # what E2B's SDKs pass to /bin/bash for a PTY


@dataclass(frozen=True)
class PtyRequest:
    """A checked StartRequest for a PTY: its size, working directory, added variables,
    stream timeout (seconds) and tag."""

    rows: int
    cols: int
    cwd: str | None
    env: dict[str, str]
    timeout: float
    tag: str | None


def wants_pty(data: dict[str, Any]) -> bool:
    """Whether a StartRequest's decoded message asks for a PTY."""
    return data.get("pty") is not None


def pty_request(request: Message, timeout_ms: str | None) -> PtyRequest:
    """The PTY a StartRequest asks for; InvalidRequestError or E2BUnsupportedError otherwise."""
    process = request.message("process")
    if process is None:
        raise InvalidRequestError('StartRequest needs process: {"cmd": "/bin/bash", ...}')
    cmd = process.string("cmd", limit=4096)
    args = process.strings("args", most=8, limit=16)
    envs = process.mapping("envs")
    cwd = process.optional_string("cwd", limit=4096)
    process.done()
    if cmd != image_programs.BASH or not set(args) <= SHELL_FLAGS:
        raise E2BUnsupportedError(
            f"a PTY runs the sandbox's interactive shell ({image_programs.BASH} -i -l, what "
            f"E2B's SDKs ask for), not {cmd[:100]!r} {' '.join(args)[:100]}: start the program "
            "from the shell by SendInput"
        )
    pty = request.message("pty")
    size = pty.message("size") if pty is not None else None
    if pty is not None:
        pty.done()
    rows = size.integer("rows", default=DEFAULT_ROWS, low=1, high=MAX_SIZE) if size else 0
    cols = size.integer("cols", default=DEFAULT_COLS, low=1, high=MAX_SIZE) if size else 0
    if size is not None:
        size.done()
    tag = request.optional_string("tag", limit=1024)
    if request.flag("stdin"):
        raise E2BUnsupportedError("a PTY takes its input by SendInput with input.pty, not stdin")
    request.done()
    # Checked as a command's variables and directory are: the names, sizes, and the mark.
    checked = CommandRequest.from_json(
        {"command": [cmd], "env": envs, "cwd": to_sandbox(cwd) if cwd else None}
    )
    return PtyRequest(
        rows=rows or DEFAULT_ROWS,
        cols=cols or DEFAULT_COLS,
        cwd=checked.cwd,
        env=checked.env,
        timeout=timeout_seconds(timeout_ms),
        tag=tag,
    )


async def pty_events(
    manager: SandboxManager,
    owner: str,
    sandbox_id: str,
    request: PtyRequest,
    running: Running,
) -> AsyncGenerator[dict[str, Any], None]:
    """The StartResponse messages of a PTY: start once its shell runs, its output as it comes,
    then its end. An error before the start (an unknown or stopped sandbox, too many
    terminals) is raised as an ordinary error answer."""
    terminal = await manager.open_terminal(
        owner, sandbox_id, rows=request.rows, cols=request.cols, cwd=request.cwd, env=request.env
    )
    running.terminal = terminal
    try:
        yield {"event": {"start": {"pid": running.pid}}}
        deadline = asyncio.get_running_loop().time() + request.timeout
        # wait_for on each read, not asyncio.timeout: Python 3.10 is still supported.
        while data := await asyncio.wait_for(terminal.read(), _left(deadline)):
            yield {"event": {"data": {"pty": base64.b64encode(data).decode()}}}
        code = await terminal.exit_status()
        if code is None:
            raise _Ended("the PTY ended without an exit status: its sandbox stopped")
        yield {
            "event": {"end": {"exitCode": code, "exited": True, "status": f"exit status {code}"}}
        }
    except asyncio.TimeoutError:
        raise _PtyTimedOut(
            f"the PTY ran past its timeout ({request.timeout:g} s) and was closed"
        ) from None
    finally:
        running.terminal = None
        await terminal.close()


def _left(deadline: float) -> float:
    return max(deadline - asyncio.get_running_loop().time(), 0.0)


class _PtyTimedOut(SandboxError):
    code = "pty_timeout"
    http_status = 504


class _Ended(SandboxError):
    code = "pty_ended"
    http_status = 503
