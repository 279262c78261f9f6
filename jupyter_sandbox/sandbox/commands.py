"""Commands run in a sandbox on request, beside its kernel: ``ls``, ``pip list``, a script in
/workspace. Agent code asks for them as it would E2B's or OpenSandbox's command API:
``POST /api/sandboxes/{id}/commands`` (server_extension/command_handlers.py), or
``jupyter sandbox exec`` on the command line.

A command runs through the engine's exec (docker_exec.py) as the sandbox's own user, under the
sandbox's isolation, limits and network policy, in /workspace: nothing its kernel could not do
with ``subprocess``. Past its time limit it is killed with everything it started
(exec_deadline.py) and the result says so. Its standard output is kept up to ``MAX_OUTPUT``
bytes (more stops the command and is refused, naming the files API that moves big results);
of standard error, the first MiB. Both are returned as text (UTF-8, undecodable bytes
replaced): a binary result belongs in a file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .errors import InvalidRequestError, OutputTooLargeError
from .manager import SandboxManager

DEFAULT_TIMEOUT = 60.0  # seconds a command may run when the request does not say
MAX_TIMEOUT = 3600.0  # seconds: longer work belongs in the kernel, or a detached process
MAX_OUTPUT = 16 * 1024**2  # bytes of standard output a response carries
MAX_STDIN = 16 * 1024**2  # bytes of standard input a request may send
EXAMPLE = '{"command": ["ls", "-la"]} or {"command": "pip list | grep numpy", "timeout": 30}'


@dataclass(frozen=True)
class CommandRequest:
    """One command: its argv (a string is run by ``/bin/sh -c``), time limit and input."""

    argv: list[str]
    timeout: float = DEFAULT_TIMEOUT
    stdin: bytes | None = None

    @classmethod
    def from_json(cls, body: Any) -> CommandRequest:
        """The request in a decoded JSON body; InvalidRequestError says what is wrong."""
        if not isinstance(body, dict):
            raise InvalidRequestError(f"the body must be a JSON object, e.g. {EXAMPLE}")
        unknown = sorted(set(body) - {"command", "timeout", "stdin"})
        if unknown:
            raise InvalidRequestError(
                f"unknown field(s) {', '.join(unknown)}: a command takes command, timeout "
                f"and stdin, e.g. {EXAMPLE}"
            )
        return cls(
            argv=_argv(body.get("command")),
            timeout=_timeout(body.get("timeout", DEFAULT_TIMEOUT)),
            stdin=_stdin(body.get("stdin")),
        )


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration: float  # seconds, as the host measured the whole exec

    def as_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "duration": round(self.duration, 3),
        }


async def run_command(
    manager: SandboxManager, owner: str, sandbox_id: str, request: CommandRequest
) -> CommandResult:
    """Run ``request`` in the owner's sandbox, which must be running (SandboxManager.exec)."""
    started = time.monotonic()
    try:
        result = await manager.exec(
            owner,
            sandbox_id,
            request.argv,
            timeout=request.timeout,
            stdin=request.stdin,
            max_output=MAX_OUTPUT,
        )
    except OutputTooLargeError:
        raise OutputTooLargeError(
            f"the command's output passed {MAX_OUTPUT // 1024**2} MiB and it was stopped: write "
            f"the output to a file and fetch it with GET /api/sandboxes/{sandbox_id}/files/"
            "content?path=FILE ('jupyter sandbox files get')"
        ) from None
    return CommandResult(
        exit_code=result.exit_code,
        stdout=result.stdout.decode(errors="replace"),
        stderr=result.stderr.decode(errors="replace"),
        timed_out=result.timed_out,
        duration=time.monotonic() - started,
    )


def _argv(command: Any) -> list[str]:
    if isinstance(command, str) and command.strip():
        return ["/bin/sh", "-c", command]
    if (
        isinstance(command, list)
        and command
        and all(isinstance(arg, str) for arg in command)
        and command[0]
    ):
        return list(command)
    raise InvalidRequestError(
        "command must be a non-empty string (run by /bin/sh -c) or a non-empty list of "
        f"strings (run as it is), e.g. {EXAMPLE}"
    )


def _timeout(value: Any) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_TIMEOUT:
        return float(value)
    raise InvalidRequestError(
        f"timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT:g}, not "
        f"{value!r} (default {DEFAULT_TIMEOUT:g})"
    )


def _stdin(value: Any) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError("stdin must be a string (the command's whole input)")
    data = value.encode()
    if len(data) > MAX_STDIN:
        raise InvalidRequestError(
            f"stdin may hold at most {MAX_STDIN // 1024**2} MiB: upload larger input with PUT "
            "/api/sandboxes/{id}/files/content and read it from the file"
        )
    return data
