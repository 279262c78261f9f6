"""Commands in a sandbox: run to their end (``POST /api/sandboxes/{id}/commands``), streamed as
they run, or started in the background and followed (``.../commands/{command_id}``).

:class:`~jupyter_sandbox.client.Sandbox` calls :func:`run_command` (its ``run``),
:func:`start_command` (its ``start``) and :func:`list_commands` (its ``commands``); agent code
holds the :class:`BackgroundCommand` handles they return. A command that fails is not an
error: its ``exit_code`` says how it ended, as a shell's would.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_sandbox.client.errors import error_from_answer
from jupyter_sandbox.client.transport import Transport

# A list of strings is run as it is; a string by /bin/sh -c.
Command = str | Sequence[str]
TextCallback = Callable[[str], None]
POLL_INTERVAL = 0.25  # seconds between two looks at a background command that wait()s


@dataclass(frozen=True)
class CommandResult:
    """How a command run to its end ended: its exit code (128 + N: killed by signal N), its
    standard output (up to 16 MiB unless streamed) and error (its first MiB unless streamed),
    whether it was killed at its timeout, and the seconds from the request to its end."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration: float

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> CommandResult:
        """The result of a CommandResult answer (or a stream's result event)."""
        return cls(
            exit_code=int(answer["exit_code"]),
            stdout=answer.get("stdout", ""),
            stderr=answer.get("stderr", ""),
            timed_out=bool(answer.get("timed_out")),
            duration=float(answer.get("duration", 0.0)),
        )

    @property
    def ok(self) -> bool:
        """It exited with 0 before its timeout."""
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class CommandOutput:
    """A piece of a background command's output (standard output and error interleaved) from
    byte ``offset``; read again from ``next_offset``. All was read when ``next_offset`` equals
    ``size`` and ``running`` is False."""

    text: str
    offset: int
    next_offset: int
    size: int
    running: bool


class BackgroundCommand:
    """A command left running in a sandbox (a server, a long job), as the server last
    described it: ``running``, and its ``exit_code`` once it has ended (None while it runs, or
    when how it ended is unknown). :meth:`refresh` asks again; :meth:`follow` streams its
    output until it ends, :meth:`wait` polls until then; :meth:`remove` stops it with all it
    started."""

    def __init__(self, transport: Transport, sandbox_id: str, info: dict[str, Any]) -> None:
        self._transport = transport
        self.sandbox_id = sandbox_id
        self.info = info

    def __repr__(self) -> str:
        state = "running" if self.running else f"exit {self.exit_code}"
        return f"BackgroundCommand({self.id!r}, {self.command!r}, {state})"

    @property
    def id(self) -> str:
        return str(self.info["id"])

    @property
    def command(self) -> list[str]:
        """Its argv (a string command is ``["/bin/sh", "-c", COMMAND]``)."""
        return list(self.info["command"])

    @property
    def running(self) -> bool:
        return bool(self.info["running"])

    @property
    def exit_code(self) -> int | None:
        code = self.info.get("exit_code")
        return None if code is None else int(code)

    def _route(self, *rest: str) -> tuple[str, ...]:
        return ("sandboxes", self.sandbox_id, "commands", self.id, *rest)

    def refresh(self) -> BackgroundCommand:
        """Ask the server how the command is now; this handle, updated."""
        self.info = self._transport.call("GET", *self._route())
        return self

    def output(self, offset: int = 0, limit: int | None = None) -> CommandOutput:
        """Its output from byte ``offset`` on (at most ``limit`` bytes, 1 MiB by default)."""
        query = [("offset", str(offset))] + ([] if limit is None else [("limit", str(limit))])
        answer = self._transport.call("GET", *self._route("output"), query=query)
        fields = ("text", "offset", "next_offset", "size", "running")
        return CommandOutput(**{name: answer[name] for name in fields})

    def follow(self, offset: int = 0, poll_interval: float = POLL_INTERVAL) -> Iterator[str]:
        """Its output, piece by piece as it is written, until the command has ended and all
        of it was read (then ``exit_code`` is known). The server follows the output for the
        client and streams it (``GET .../output?follow=true``); ``poll_interval`` is not used
        any more, and kept so that calls naming it still work. Stopping early (``break``, an
        exception) closes the stream and leaves the command running; the server keeps the
        output, so a follower may start again from any offset."""
        del poll_interval
        query = [("follow", "true"), ("offset", str(offset))]
        events = self._transport.events(*self._route("output"), query=query)
        with contextlib.closing(events):
            for event in events:
                if event.name == "output" and event.data.get("text"):
                    yield str(event.data["text"])
                elif event.name == "result":
                    self.info = event.data  # the command as it ended: its exit_code
                elif event.name == "error":
                    raise error_from_answer(
                        None, event.data, f"following command {self.id} in {self.sandbox_id}"
                    )

    def wait(
        self, timeout: float | None = None, poll_interval: float = POLL_INTERVAL
    ) -> int | None:
        """Its exit code once it has ended (None if how is unknown); TimeoutError if it
        still runs after ``timeout`` seconds (None: wait as long as it takes)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.refresh().running:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"background command {self.id} in sandbox {self.sandbox_id} still runs "
                    f"after {timeout:g} s: wait longer, or remove() it to stop it"
                )
            time.sleep(poll_interval)
        return self.exit_code

    def remove(self) -> None:
        """Stop it with everything it started (if it runs), and forget it and its output."""
        self._transport.call("DELETE", *self._route())


def command_body(
    command: Command, env: Mapping[str, str] | None, cwd: str | None
) -> dict[str, Any]:
    """The request fields every kind of command shares."""
    body: dict[str, Any] = {"command": command if isinstance(command, str) else list(command)}
    if env is not None:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    return body


def run_command(
    transport: Transport,
    sandbox_id: str,
    body: dict[str, Any],
    on_stdout: TextCallback | None = None,
    on_stderr: TextCallback | None = None,
) -> CommandResult:
    """Run the command of ``body`` (with its timeout) to its end, streamed when a callback is
    given: each piece of output goes to its callback as it comes and into the result too."""
    route = ("sandboxes", sandbox_id, "commands")
    wait = float(body.get("timeout", 60)) + transport.timeout  # the answer comes at its end
    if on_stdout is None and on_stderr is None:
        return CommandResult.from_answer(transport.call("POST", *route, body=body, timeout=wait))
    callbacks = {"stdout": on_stdout, "stderr": on_stderr}
    text: dict[str, list[str]] = {"stdout": [], "stderr": []}
    events = transport.events(*route, body={**body, "stream": True}, timeout=wait)
    # Closed however the loop ends: a callback that raises closes the connection, and the
    # server kills the command with everything it started.
    with contextlib.closing(events):
        for event in events:
            if event.name == "result":
                output = {name: "".join(pieces) for name, pieces in text.items()}
                return CommandResult.from_answer({**event.data, **output})
            if event.name == "error":
                raise error_from_answer(None, event.data, f"the command in sandbox {sandbox_id}")
            if event.name in text:
                piece = event.data.get("text", "")
                text[event.name].append(piece)
                callback = callbacks[event.name]
                if callback is not None:
                    callback(piece)
    raise AssertionError("unreachable: Transport.events ends with a final event or raises")


def start_command(transport: Transport, sandbox_id: str, body: dict[str, Any]) -> BackgroundCommand:
    """Start the command of ``body`` in the background; its handle."""
    answer = transport.call(
        "POST", "sandboxes", sandbox_id, "commands", body={**body, "background": True}
    )
    return BackgroundCommand(transport, sandbox_id, answer)


def list_commands(transport: Transport, sandbox_id: str) -> list[BackgroundCommand]:
    """The sandbox's background commands, running or ended, oldest first."""
    answer = transport.call("GET", "sandboxes", sandbox_id, "commands")
    return [BackgroundCommand(transport, sandbox_id, info) for info in answer["commands"]]
