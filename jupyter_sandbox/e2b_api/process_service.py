"""envd's ``process.Process`` Connect service: Start (a server stream: start, data, end
events), List and SendSignal, on the core's streamed commands (sandbox/operations/command_stream.py), so a
command started through E2B has the same limits, timeout, kill and audit as one of our REST API.

A process is named by a pid this server gives it (the sandbox's own pids are not the server's to
hand out): the running Start streams of each sandbox, kept in :class:`Processes` while they
run. SendSignal (SIGKILL or SIGTERM) stops the stream, which kills the command with everything
it started. What cannot be honoured is refused: a PTY, standard input after start, Connect to
a running process, a program named without its absolute path (the sandbox's PATH would pick
it).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from jupyter_sandbox.e2b_api.connect_protocol import Message
from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.e2b_api.home import to_sandbox
from jupyter_sandbox.protocol.errors import InvalidRequestError, ProcessNotFoundError, SandboxError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.command_stream import stream_command
from jupyter_sandbox.sandbox.operations.commands import MAX_TIMEOUT, CommandRequest

SIGNALS = ("SIGNAL_SIGKILL", "SIGNAL_SIGTERM", 9, 15)  # envd's enum, by name or number


@dataclass
class Running:
    """A Start stream running now: its pid, what it runs, and the task sending it."""

    pid: int
    config: dict[str, Any]
    tag: str | None
    task: asyncio.Task[Any] | None = None


@dataclass
class Processes:
    """The running Start streams, by sandbox (one per server)."""

    by_sandbox: dict[str, dict[int, Running]] = field(default_factory=dict)
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    def add(self, sandbox_id: str, config: dict[str, Any], tag: str | None) -> Running:
        running = Running(next(self._pids), config, tag)
        self.by_sandbox.setdefault(sandbox_id, {})[running.pid] = running
        return running

    def discard(self, sandbox_id: str, running: Running) -> None:
        processes = self.by_sandbox.get(sandbox_id, {})
        processes.pop(running.pid, None)
        if not processes:
            self.by_sandbox.pop(sandbox_id, None)

    def find(self, sandbox_id: str, selector: Message | None) -> Running:
        if selector is None:
            raise InvalidRequestError('process must select a process: {"pid": N} or {"tag"}')
        pid = selector.integer("pid", default=-1, low=-1)
        tag = selector.optional_string("tag", limit=1024)
        selector.done()
        for running in self.by_sandbox.get(sandbox_id, {}).values():
            if running.pid == pid or (tag is not None and running.tag == tag):
                return running
        raise ProcessNotFoundError(f"no process {pid if tag is None else tag!r} runs there")


def start_request(request: Message, timeout_ms: str | None) -> tuple[CommandRequest, str | None]:
    """The command a StartRequest asks for (checked as our REST API checks one), its tag."""
    process = request.message("process")
    if process is None:
        raise InvalidRequestError('StartRequest needs process: {"cmd": "/bin/bash", ...}')
    cmd = process.string("cmd", limit=4096)
    args = process.strings("args")
    envs = process.mapping("envs")
    cwd = process.optional_string("cwd", limit=4096)
    process.done()
    if not cmd.startswith("/"):
        raise InvalidRequestError(
            f"cmd {cmd!r} must be an absolute path (e.g. /bin/bash): a program is never "
            "looked up in the sandbox's PATH"
        )
    tag = request.optional_string("tag", limit=1024)
    if request.message("pty") is not None:
        raise E2BUnsupportedError("a PTY is not supported by jupyter-sandbox's E2B API")
    if request.flag("stdin"):
        raise E2BUnsupportedError(
            "standard input after start (stdin=True) is not supported by jupyter-sandbox's "
            "E2B API: pass the input in the command itself"
        )
    request.done()
    body: dict[str, Any] = {
        "command": [cmd, *args],
        "env": envs,
        "timeout": _timeout(timeout_ms),
        "stream": True,
    }
    if cwd:
        body["cwd"] = to_sandbox(cwd)
    return CommandRequest.from_json(body), tag


async def start_events(
    manager: SandboxManager,
    owner: str,
    sandbox_id: str,
    request: CommandRequest,
    running: Running,
) -> AsyncGenerator[dict[str, Any], None]:
    """The StartResponse messages of ``request``: start, data as it comes, end. The start
    event goes at once, as envd's does (a silent command, such as a background one, is started
    when its client is told so): an unknown or stopped sandbox is refused before it, as an
    ordinary error; what fails later (a missing cwd) ends the stream with its error."""
    await manager.running(owner, sandbox_id)
    yield {"event": {"start": {"pid": running.pid}}}
    events = stream_command(manager, owner, sandbox_id, request)
    try:
        async for name, data in events:
            yield _event(name, data)
    finally:
        await events.aclose()


def list_response(processes: Processes, sandbox_id: str) -> dict[str, Any]:
    return {
        "processes": [
            {
                "config": running.config,
                "pid": running.pid,
                **({"tag": running.tag} if running.tag else {}),
            }
            for running in processes.by_sandbox.get(sandbox_id, {}).values()
        ]
    }


def signal(processes: Processes, sandbox_id: str, request: Message) -> dict[str, Any]:
    running = processes.find(sandbox_id, request.message("process"))
    wanted = request.raw("signal")
    request.done()
    if wanted not in SIGNALS:
        raise E2BUnsupportedError("only SIGKILL and SIGTERM can be sent (both stop the process)")
    if running.task is not None:
        running.task.cancel()  # closes its command stream, which kills the command
    return {}


def _event(name: str, data: dict[str, Any]) -> dict[str, Any]:
    if name in ("stdout", "stderr"):
        text = base64.b64encode(data["text"].encode()).decode()
        return {"event": {"data": {name: text}}}
    if name == "result":
        if data.get("timed_out"):
            raise _TimedOut("the command ran past its timeout and was killed")
        code = int(data["exit_code"])
        return {
            "event": {"end": {"exitCode": code, "exited": True, "status": f"exit status {code}"}}
        }
    raise _failed(data)


class _TimedOut(SandboxError):
    code = "command_timeout"
    http_status = 504


def _failed(data: dict[str, Any]) -> SandboxError:
    error = SandboxError(str(data.get("message", "the command failed")))
    error.code = str(data.get("code", "sandbox_error"))
    return error


def _timeout(timeout_ms: str | None) -> float:
    """Seconds from Connect's Connect-Timeout-Ms header (at most MAX_TIMEOUT; none: that)."""
    if timeout_ms is None:
        return MAX_TIMEOUT
    if not timeout_ms.isdigit() or len(timeout_ms) > 10:
        raise InvalidRequestError(
            "Connect-Timeout-Ms must be a positive integer of at most 10 digits"
        )
    return min(max(int(timeout_ms) / 1000, 0.001), MAX_TIMEOUT)
