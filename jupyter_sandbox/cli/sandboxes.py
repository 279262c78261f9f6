"""``jupyter sandbox stop|restart|pause|resume|exec``: one sandbox, without a server.

What the server extension offers over REST (``DELETE /api/sandboxes/{id}``, ``POST .../restart``,
``.../pause``, ``.../resume``, ``.../commands``), for those who run kernels from jupyter_client,
nbclient or a script and have no Jupyter Server: a named context (JUPYTER_SANDBOX_CONTEXT)
outlives its kernel and is otherwise only ended by a server's culler. Each verb is an
OwnerCommand (cli/owner.py); ``jupyter sandbox list`` shows the ids.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, ClassVar

from traitlets import Bool, Float, HasTraits, List, Unicode

from jupyter_sandbox.cli.owner import OwnerCommand, reader_left
from jupyter_sandbox.protocol.errors import (
    InvalidRequestError,
    SandboxNotFoundError,
)
from jupyter_sandbox.sandbox.backends.docker.exec_watcher import ExecWatcher
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.commands import (
    DEFAULT_TIMEOUT,
    MAX_STDIN,
    MAX_TIMEOUT,
    CommandRequest,
    run_command,
)
from jupyter_sandbox.sandbox.programs.exec_marks import new_mark
from jupyter_sandbox.sandbox.use_cases import restart_sandbox

# A manager's call on one sandbox of an owner: (owner, sandbox_id).
Change = Callable[[str, str], Awaitable[object]]
TIMED_OUT = 124  # the exit status of a command killed at its time limit, as timeout(1) has it


class StopApp(OwnerCommand):
    description = "Stop and remove sandboxes (a kernel still using one sees it end)."
    usage = "stop SANDBOX_ID... | stop --context=NAME"
    context = Unicode("", config=True, help="Stop the sandbox of this named context.")
    aliases = {"context": "StopApp.context"}

    async def run(self, manager: SandboxManager, owner: str, *sandbox_ids: str) -> int:
        if bool(self.context) == bool(sandbox_ids):  # ids, or a context: one of the two
            self.usage_error()
        if self.context:
            sandbox_ids = (await _sandbox_of_context(manager, owner, self.context),)
        for sandbox_id in sandbox_ids:
            await manager.get(owner, sandbox_id)  # an unknown id is an error, not a quiet no-op
            await manager.remove(owner, sandbox_id)
            print(f"removed {sandbox_id}")
        return 0


async def _sandbox_of_context(manager: SandboxManager, owner: str, context: str) -> str:
    # Not manager.find_context: that would bring a context stopped by a memory snapshot back.
    for info in await manager.list_sandboxes(owner):
        if manager.read_state(info.sandbox_id).get("context") == context:
            return info.sandbox_id
    raise SandboxNotFoundError(
        f"no sandbox of {owner} has context '{context}' (`jupyter sandbox list` shows them)"
    )


class RestartApp(OwnerCommand):
    description = "A fresh interpreter in a sandbox no kernel is using; /workspace is kept."
    usage = "restart SANDBOX_ID"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str) -> int:
        # One held by a running kernel is refused: only that kernel's own restart keeps it.
        await restart_sandbox(manager, owner, sandbox_id)
        print(f"restarted the interpreter of {sandbox_id}")
        return 0


class _StateChange(OwnerCommand):
    """pause and resume: one call of the manager on one sandbox, then a line saying it is done."""

    # verb: the manager's call, and the word printed before the sandbox's id once it returned
    CHANGES: ClassVar[dict[str, tuple[Callable[[SandboxManager], Change], str]]] = {
        "pause": (lambda manager: manager.pause, "paused"),
        "resume": (lambda manager: manager.resume, "resumed"),
    }

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str) -> int:
        change, done = self.CHANGES[self.verb]
        await change(manager)(owner, sandbox_id)
        print(f"{done} {sandbox_id}")
        return 0


class PauseApp(_StateChange):
    description = "Freeze every process of a sandbox (its memory stays); resume thaws it."
    usage = "pause SANDBOX_ID"


class ResumeApp(_StateChange):
    description = "Thaw a paused sandbox."
    usage = "resume SANDBOX_ID"


class CommandOptions(HasTraits):
    """``--env NAME=VALUE`` and ``--cwd=PATH`` of the verbs that start a command (exec, and
    background start), and the request body they make with them."""

    env = List(
        Unicode(),
        config=True,
        help="NAME=VALUE added to the sandbox's environment for this command; repeatable.",
    )
    cwd = Unicode(
        "", config=True, help="Absolute path of the directory the command starts in (/workspace)."
    )

    def command_request(self, argv: list[str], **fields: Any) -> CommandRequest:
        """The checked request for ``argv`` with these options and ``fields``."""
        body = {"command": argv, **fields, "env": _variables(self.env)}
        if self.cwd:
            body["cwd"] = self.cwd
        return CommandRequest.from_json(body)


class ExecApp(CommandOptions, OwnerCommand):
    description = (
        "Run a command in a sandbox as its user (sandbox/operations/commands.py); print its output as it "
        "comes and exit with its status. With -i, what is piped in is the command's standard "
        "input."
    )
    usage = (
        "exec [-i] [--timeout=SECONDS] [--env NAME=VALUE]... [--cwd=PATH] SANDBOX_ID -- "
        "COMMAND [ARGUMENT...]"
    )
    timeout = Float(
        DEFAULT_TIMEOUT,
        config=True,
        help=f"Seconds the command may run before it is killed (at most {MAX_TIMEOUT:g}).",
    )
    stdin = Bool(
        False,
        config=True,
        help="""Send this process's standard input, to its end, as the command's (as docker
        exec -i does); without it the command reads end of file at once. Opt-in: a script
        whose input is a pipe that never closes would otherwise wait forever.""",
    )
    flags = {
        flag: ({"ExecApp": {"stdin": True}}, "Pass standard input to the command.")
        for flag in ("i", "stdin")
    }
    aliases = {
        "timeout": "ExecApp.timeout",
        "env": "ExecApp.env",
        "cwd": "ExecApp.cwd",
    }

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, program: str, *arguments: str
    ) -> int:
        # stdin goes in as bytes, not through the JSON body's string: binary input stays whole.
        request = self.command_request([program, *arguments], timeout=self.timeout)
        if self.stdin:
            request = replace(request, stdin=_standard_input())
        # If this process is killed (SIGKILL) the engine runs the command on: the watcher,
        # another process, kills it then. It stands down once the command ended or was killed.
        mark = new_mark()
        watcher = ExecWatcher.start(sandbox_id, "", mark)
        try:
            result = await run_command(
                manager, owner, sandbox_id, request, output=_print_output, mark=mark
            )
        except BrokenPipeError:
            # What reads this process's output stopped (``| head``): so does the command (its
            # next write fails), and this process, quietly, as a program killed by SIGPIPE.
            return reader_left()
        finally:
            # The wait ended (the command did, or the wait's own kill ran: ExecWatch).
            watcher.release()
        if result.timed_out:
            print(
                f"error: the command ran past its {self.timeout:g}s and was killed (--timeout "
                "gives it longer)",
                file=sys.stderr,
            )
            return TIMED_OUT
        return result.exit_code if 0 <= result.exit_code <= 255 else 1


def _print_output(stream: str, data: bytes) -> None:
    """A piece of the command's output, written as it comes, byte for byte (as docker exec
    does; a terminal decodes it). Called on the engine's executor thread: a reader of this
    process's output that is slower than the command holds the command back."""
    out = sys.stdout if stream == "stdout" else sys.stderr
    out.buffer.write(data)
    out.buffer.flush()


def _variables(settings: list[str]) -> dict[str, str]:
    """``--env`` settings as a mapping (a later one of the same name wins, as in a shell);
    the names and values are checked by CommandRequest.from_json."""
    variables: dict[str, str] = {}
    for setting in settings:
        name, equals, value = setting.partition("=")
        if not equals:
            raise InvalidRequestError(
                f"--env takes NAME=VALUE, not {setting!r}: e.g. --env DEBUG=1 (--env NAME= "
                "sets it empty)"
            )
        variables[name] = value
    return variables


def _standard_input() -> bytes:
    """This process's standard input to its end (``echo hi | jupyter sandbox exec -i ID --
    cat``; from a terminal, until Ctrl-D), as bytes: binary input stays whole."""
    if sys.stdin is None:  # closed
        return b""
    data = sys.stdin.buffer.read(MAX_STDIN + 1)
    if len(data) > MAX_STDIN:
        raise InvalidRequestError(
            f"standard input may hold at most {MAX_STDIN // 1024**2} MiB: copy larger input "
            "into the sandbox with 'jupyter sandbox files put SANDBOX_ID LOCAL_FILE PATH' and "
            "have the command read that file"
        )
    return data
