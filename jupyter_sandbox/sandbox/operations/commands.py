"""Commands run in a sandbox on request, beside its kernel: ``ls``, ``pip list``, a script in
/workspace. Agent code asks for them as it would E2B's or OpenSandbox's command API:
``POST /api/sandboxes/{id}/commands`` (server_extension/command_handlers.py), or
``jupyter sandbox exec`` on the command line.

A command runs through the engine's exec (backends/docker/exec.py) as the sandbox's own user, under the
sandbox's isolation, limits and network policy, in /workspace or the directory ``cwd`` names,
with the sandbox's environment plus the variables ``env`` adds for it alone: nothing its kernel
could not do with ``subprocess``. Past its time limit it is killed with everything it started
(exec_deadline.py) and the result says so. Its standard output is kept up to ``MAX_OUTPUT``
bytes (more stops the command and is refused, naming the files API that moves big results);
of standard error, the first MiB. Both are returned as text (UTF-8, undecodable bytes
replaced): a binary result belongs in a file. A request with ``"stream": true`` has its output
sent as it comes instead, uncapped (command_stream.py); so does the CLI's.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_sandbox.protocol.errors import InvalidRequestError, OutputTooLargeError
from jupyter_sandbox.protocol.requests import STREAM, flag_of, request_object, seconds_of
from jupyter_sandbox.sandbox.backends.base import ExecOptions, Output
from jupyter_sandbox.sandbox.container_spec import ENV_NAME
from jupyter_sandbox.sandbox.programs.exec_marks import EXEC_MARK
from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

DEFAULT_TIMEOUT = 60.0  # seconds a command may run when the request does not say
MAX_TIMEOUT = 3600.0  # seconds: longer work belongs in the kernel, or a detached process
MAX_OUTPUT = 16 * 1024**2  # bytes of standard output a response carries
MAX_STDIN = 16 * 1024**2  # bytes of standard input a request may send
MAX_ENV = 256  # variables a request may add
MAX_ENV_VALUE = 32 * 1024  # bytes of one variable's value (UTF-8)
# Bytes of all added variables together ("NAME=VALUE" and its NUL each). Linux takes at most a
# quarter of the stack limit (8 MiB in the sandbox: 2 MiB) for a program's arguments and
# environment together, and runc refuses an exec request past 4 MiB: 256 values of 32 KiB would
# fail to start with an obscure message ("argument list too long", and under gVisor "File name
# too long" from the shell). 1 MiB leaves the rest to the arguments and the sandbox's own
# environment.
MAX_ENV_TOTAL = 1024**2
MAX_CWD = 4096  # bytes of the working directory's path: Linux's PATH_MAX
EXAMPLE = '{"command": ["ls", "-la"]} or {"command": "pip list | grep numpy", "timeout": 30}'
ENV_EXAMPLE = '{"command": "make test", "env": {"DEBUG": "1"}, "cwd": "/workspace/project"}'
FIELDS = ("command", "timeout", "stdin", "env", "cwd", "stream", "background")


@dataclass(frozen=True)
class CommandRequest:
    """One command: its argv (a string is run by ``/bin/sh -c``), time limit, input, the
    variables added to its environment, its working directory (None: /workspace), and whether
    its output is to be sent as it comes (command_stream.py) rather than with its result, or
    the command left running in the background (background.py), with neither."""

    argv: list[str]
    timeout: float = DEFAULT_TIMEOUT
    stdin: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    stream: bool = False
    background: bool = False

    @classmethod
    def from_json(cls, body: Any) -> CommandRequest:
        """The request in a decoded JSON body; InvalidRequestError says what is wrong."""
        takes = "a command takes command, timeout, stdin, env, cwd, stream and background"
        body = request_object(body, FIELDS, takes, EXAMPLE)
        background = flag_of(body.get("background", False), "background", BACKGROUND)
        if background and ({"stdin", "stream", "timeout"} & set(body)):
            raise InvalidRequestError(
                "a background command takes no stdin, stream or timeout: it runs until it "
                "ends or is removed (DELETE /api/sandboxes/{id}/commands/{command_id}), and its "
                "output is read with GET .../commands/{command_id}/output"
            )
        return cls(
            argv=_argv(body.get("command")),
            timeout=timeout_of(body.get("timeout", DEFAULT_TIMEOUT)),
            stdin=_stdin(body.get("stdin")),
            env=_env(body.get("env")),
            cwd=_cwd(body.get("cwd")),
            stream=flag_of(body.get("stream", False), "stream", STREAM),
            background=background,
        )


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool
    duration: float  # seconds, as the host measured the whole exec

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "duration": round(self.duration, 3)}


async def run_command(
    manager: SandboxAccess,
    owner: str,
    sandbox_id: str,
    request: CommandRequest,
    output: Output | None = None,
    mark: dict[str, str] | None = None,
) -> CommandResult:
    """Run ``request`` in the owner's sandbox, which must be running (SandboxManager.exec).

    With ``output``, the command's output goes to it as it comes ("stdout" or "stderr", the
    bytes of one piece), called on the engine's executor thread, uncapped; the result's
    stdout and stderr are then empty. ``mark``: the exec's mark, for a caller that can kill
    the command from another process too (exec_watcher.py).
    """
    started = time.monotonic()
    try:
        result = await manager.exec(
            owner,
            sandbox_id,
            request.argv,
            ExecOptions(
                timeout=request.timeout,
                stdin=request.stdin,
                max_output=MAX_OUTPUT,
                environment=request.env,
                workdir=request.cwd,
                output=output,
                mark=mark,
            ),
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


BACKGROUND = (
    "start it and answer at once, leaving it running) or false (the default: run it to its end"
)


def timeout_of(value: Any) -> float:
    """``value`` as seconds if it is a number in (0, MAX_TIMEOUT]; else an error saying so."""
    return seconds_of(value, MAX_TIMEOUT, advice=f" (default {DEFAULT_TIMEOUT:g})")


def _stdin(value: Any) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError("stdin must be a string (the command's whole input)")
    data = _utf8(value, "stdin")
    if len(data) > MAX_STDIN:
        raise InvalidRequestError(
            f"stdin may hold at most {MAX_STDIN // 1024**2} MiB: upload larger input with PUT "
            "/api/sandboxes/{id}/files/content and read it from the file"
        )
    return data


def _env(value: Any) -> dict[str, str]:
    """The variables a request adds to its command's environment, checked.

    Only the deadline's mark is refused: the kill at the time limit finds the command's
    processes by it (exec_deadline.py), so a request may neither replace nor remove it (and
    the exec layer puts it last, so it would win anyway; refusing says so rather than quietly
    running with another value than the one asked for). Every other name is the command's own
    business, the proxy variables included (HTTP_PROXY and the rest, set for the sandbox in
    container_spec.py): the sandbox has no interface but lo, so a command that points them
    elsewhere only loses its own way out, as ``env HTTP_PROXY=... cmd`` in the command itself
    would. The network policy is enforced on the host, whatever the sandbox's variables say.
    """
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidRequestError(
            f"env must be a JSON object of variable names to string values, e.g. {ENV_EXAMPLE}"
        )
    if len(value) > MAX_ENV:
        raise InvalidRequestError(
            f"env may hold at most {MAX_ENV} variables, not {len(value)}: pass more settings "
            "in a file (PUT /api/sandboxes/{id}/files/content) or as stdin"
        )
    total = 0
    for name, setting in value.items():
        if not ENV_NAME.fullmatch(name):
            raise InvalidRequestError(
                f"env name {name!r} is not a variable name: use letters, digits and _, not "
                f"starting with a digit, e.g. {ENV_EXAMPLE}"
            )
        if name == EXEC_MARK:
            raise InvalidRequestError(
                f"env may not set {EXEC_MARK}: jupyter-sandbox sets it on every command to "
                "stop it at its timeout. Use another name"
            )
        if not isinstance(setting, str) or "\0" in setting:
            raise InvalidRequestError(
                f"env {name} must be a string without NUL characters (numbers too: "
                f'"{name}": "1"), e.g. {ENV_EXAMPLE}'
            )
        size = len(_utf8(setting, f"env {name}"))
        if size > MAX_ENV_VALUE:
            raise InvalidRequestError(
                f"env {name} is {size} bytes; a value may hold at most {MAX_ENV_VALUE // 1024} "
                "KiB: pass larger data as stdin or in a file "
                "(PUT /api/sandboxes/{id}/files/content)"
            )
        total += len(name) + 1 + size + 1
    if total > MAX_ENV_TOTAL:
        raise InvalidRequestError(
            f"env holds {total} bytes; all its variables together may hold at most "
            f"{MAX_ENV_TOTAL // 1024**2} MiB: pass larger data as stdin or in a file "
            "(PUT /api/sandboxes/{id}/files/content)"
        )
    return dict(value)


def _cwd(value: Any) -> str | None:
    """The command's working directory: an absolute path in the sandbox (None: /workspace).

    Whether it exists is the engine's to find out, when the command starts (exec_start.py):
    checking it beforehand would cost one more exec on every command.
    """
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/") or "\0" in value:
        raise InvalidRequestError(
            f"cwd must be an absolute path in the sandbox (a string starting with /, no NUL "
            f"characters), not {value!r:.100}; leave it out for /workspace, e.g. {ENV_EXAMPLE}"
        )
    if len(_utf8(value, "cwd")) > MAX_CWD:
        raise InvalidRequestError(
            f"cwd may hold at most {MAX_CWD} bytes (the system's limit on a path)"
        )
    return value


def _utf8(value: str, what: str) -> bytes:
    # JSON may carry a lone surrogate ("\ud800"), which no program's input can hold.
    try:
        return value.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError(
            f"{what} is not valid Unicode text (it holds a lone surrogate, e.g. \\ud800)"
        ) from None
