"""envd's ``process.Process`` Connect service: Start (a server stream: start, data, end
events), Connect, List, SendInput, Update and SendSignal. A command runs on the core's streamed
commands (sandbox/operations/command_stream.py), so a command started through E2B has the same
limits, timeout, kill and audit as one of our REST API; a PTY is the core's terminal
(pty_service.py).

A process is named by a pid this server gives it (the sandbox's own pids are not the server's to
hand out): the running Start streams of each sandbox, kept in :class:`Processes` while they
run, found only under the sandbox the request's access token names. Connect follows a running
process: each follower gets every event the Start stream sends from then on, through a bounded
queue (one that falls FOLLOWER_QUEUE events or FOLLOWER_BYTES behind is ended with an error
rather than holding the process back, or the server's memory). SendSignal (SIGKILL or SIGTERM)
stops the Start stream, which kills the process with everything it started. What cannot be
honoured is refused: standard input of a command (only a PTY takes input), a program named
without its absolute path (the sandbox's PATH would pick it). One command is rewritten, the
OpenAI Agents SDK's helper scripts (agents_helpers.py).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from jupyter_sandbox.e2b_api import agents_helpers
from jupyter_sandbox.e2b_api.connect_protocol import Message
from jupyter_sandbox.e2b_api.errors import E2BUnsupportedError
from jupyter_sandbox.e2b_api.home import to_sandbox
from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    ProcessNotFoundError,
    SandboxError,
    TooManyStreamsError,
)
from jupyter_sandbox.sandbox.backends.base import Terminal
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.command_stream import stream_command
from jupyter_sandbox.sandbox.operations.commands import MAX_TIMEOUT, CommandRequest
from jupyter_sandbox.sandbox.operations.terminals import MAX_SIZE

SIGNALS = ("SIGNAL_SIGKILL", "SIGNAL_SIGTERM", 9, 15)  # envd's enum, by name or number
MAX_FOLLOWERS = 8  # Connect streams following one process at once
MAX_INPUT = 64 * 1024  # bytes one SendInput may type into a PTY
FOLLOWER_QUEUE = 1024  # events a Connect follower may be behind before it is ended
# Bytes of events (their base64 text) a Connect follower may be behind before it is ended: an
# event carries up to a MiB of output, so the count alone would let one stalled follower hold
# a GiB of the server's memory.
FOLLOWER_BYTES = 4 * 1024**2
EVENT_OVERHEAD = 64  # bytes counted for an event besides its text: its keys, its framing


@dataclass
class Running:
    """A Start stream running now: its pid, what it runs, the task sending it, its terminal
    if it is a PTY, and the queues of those following it (Connect)."""

    pid: int
    config: dict[str, Any]
    tag: str | None
    task: asyncio.Task[Any] | None = None
    terminal: Terminal | None = None
    followers: set[Follower] = field(default_factory=set)
    failure: SandboxError | None = None  # how the Start stream ended, if with an error

    def publish(self, message: dict[str, Any]) -> None:
        """Hand ``message`` (one StartResponse) to every follower; one that would be more than
        FOLLOWER_QUEUE events or FOLLOWER_BYTES behind is let go (its stream ends with an
        error), never waited for."""
        if not self.followers:
            return
        size = _size(message)
        for follower in list(self.followers):
            queue = follower.queue
            if queue.qsize() >= FOLLOWER_QUEUE - 1 or follower.held + size > FOLLOWER_BYTES:
                self.followers.discard(follower)
                queue.put_nowait((_FELL_BEHIND, 0))
            else:
                follower.held += size
                queue.put_nowait((message, size))

    def ended(self, failure: SandboxError | None) -> None:
        """The Start stream ended (``failure``: with that error): so do its followers'."""
        self.failure = failure
        for follower in self.followers:
            follower.queue.put_nowait((None, 0))
        self.followers.clear()


@dataclass(eq=False)  # each follower is itself, in a set
class Follower:
    """A Connect stream following a process: the events handed to it and not yet sent (each
    with its size), and how many bytes they hold."""

    queue: asyncio.Queue[tuple[dict[str, Any] | None, int]] = field(
        default_factory=lambda: asyncio.Queue(FOLLOWER_QUEUE)
    )
    held: int = 0


def _size(message: dict[str, Any]) -> int:
    """What ``message`` holds in memory, near enough: its output's base64 text, and a little."""
    data = message.get("event", {}).get("data") or {}
    return EVENT_OVERHEAD + sum(len(text) for text in data.values() if isinstance(text, str))


_FELL_BEHIND: dict[str, Any] = {"fell_behind": True}


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
    if request.flag("stdin"):
        raise E2BUnsupportedError(
            "standard input after start (stdin=True) is not supported by jupyter-sandbox's "
            "E2B API for a command (a PTY takes input): pass the input in the command itself"
        )
    request.done()
    body: dict[str, Any] = {
        "command": agents_helpers.rewritten([cmd, *args]),
        "env": envs,
        "timeout": timeout_seconds(timeout_ms),
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


async def connect_events(
    processes: Processes, sandbox_id: str, request: Message
) -> AsyncGenerator[dict[str, Any], None]:
    """The ConnectResponse messages of a ConnectRequest: the process's start event, then every
    event its Start stream sends from now on, to its end."""
    running = processes.find(sandbox_id, request.message("process"))
    request.done()
    if len(running.followers) >= MAX_FOLLOWERS:
        raise TooManyStreamsError(
            f"process {running.pid} already has {MAX_FOLLOWERS} followers: disconnect one"
        )
    follower = Follower()
    running.followers.add(follower)
    try:
        yield {"event": {"start": {"pid": running.pid}}}
        while True:
            message, size = await follower.queue.get()
            if message is None:
                break
            if message is _FELL_BEHIND:
                raise _FellBehind(
                    f"this follower of process {running.pid} fell {FOLLOWER_QUEUE} events or "
                    f"{FOLLOWER_BYTES // 1024**2} MiB behind and was let go: connect again "
                    "(and read its events as they come)"
                )
            follower.held -= size
            yield message
        if running.failure is not None:
            raise running.failure
    finally:
        running.followers.discard(follower)


async def published(
    running: Running, messages: AsyncGenerator[dict[str, Any], None]
) -> AsyncGenerator[dict[str, Any], None]:
    """``messages`` (a Start stream's), each also handed to the process's followers."""
    failure: SandboxError | None = None
    try:
        async for message in messages:
            running.publish(message)
            yield message
    except SandboxError as exc:
        failure = exc
        raise
    finally:
        running.ended(failure)
        await messages.aclose()


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


async def send_input(processes: Processes, sandbox_id: str, request: Message) -> dict[str, Any]:
    """SendInput: what a PTY's user types (``input.pty``, base64). A command's standard
    input (``input.stdin``) is refused: the core runs a command with its input closed."""
    running = processes.find(sandbox_id, request.message("process"))
    given = request.message("input")
    request.done()
    if given is None:
        raise InvalidRequestError('SendInput needs input: {"pty": BASE64} or {"stdin": BASE64}')
    pty = given.optional_string("pty", limit=2 * MAX_INPUT)
    stdin = given.raw("stdin")
    given.done()
    if stdin is not None or running.terminal is None:
        raise E2BUnsupportedError(
            "standard input of a command is not supported by jupyter-sandbox's E2B API (only a "
            "PTY takes input): pass the input in the command itself, or run it in a PTY"
        )
    if pty is None:
        raise InvalidRequestError('SendInput to a PTY needs input: {"pty": BASE64}')
    await running.terminal.write(_base64(pty, "input.pty"))
    return {}


async def update(processes: Processes, sandbox_id: str, request: Message) -> dict[str, Any]:
    """Update: a PTY's new size (``pty.size``: rows and cols)."""
    running = processes.find(sandbox_id, request.message("process"))
    pty = request.message("pty")
    request.done()
    size = pty.message("size") if pty is not None else None
    if pty is not None:
        pty.done()
    if size is None:
        raise InvalidRequestError('Update needs pty: {"size": {"rows": 24, "cols": 80}}')
    rows = size.integer("rows", low=1, high=MAX_SIZE)
    cols = size.integer("cols", low=1, high=MAX_SIZE)
    size.done()
    if running.terminal is None:
        raise E2BUnsupportedError(f"process {running.pid} is not a PTY: it has no size")
    await running.terminal.resize(rows, cols)
    return {}


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


class _FellBehind(SandboxError):
    code = "follower_fell_behind"
    http_status = 429


def _base64(text: str, what: str) -> bytes:
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"{what} must be base64 (what E2B's SDK sends)") from None
    if len(data) > MAX_INPUT:
        raise InvalidRequestError(f"{what} may hold at most {MAX_INPUT} bytes at a time")
    return data


def _failed(data: dict[str, Any]) -> SandboxError:
    error = SandboxError(str(data.get("message", "the command failed")))
    error.code = str(data.get("code", "sandbox_error"))
    return error


def timeout_seconds(timeout_ms: str | None) -> float:
    """Seconds from Connect's Connect-Timeout-Ms header (at most MAX_TIMEOUT; none: that)."""
    if timeout_ms is None:
        return MAX_TIMEOUT
    if not (timeout_ms.isascii() and timeout_ms.isdigit()) or len(timeout_ms) > 10:
        raise InvalidRequestError(
            "Connect-Timeout-Ms must be a positive integer of at most 10 digits"
        )
    return min(max(int(timeout_ms) / 1000, 0.001), MAX_TIMEOUT)
