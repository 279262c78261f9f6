"""``jupyter sandbox background start|list|output|rm``: commands left running in a sandbox.

What ``POST /api/sandboxes/{id}/commands`` with ``"background": true`` and the routes under
``.../commands/{command_id}`` offer over REST, without a server: a dev server, a training
job or a watcher started now, its output read later (or followed as it comes), and stopped
with everything it started. Each verb is an OwnerCommand (cli/owner.py) over
SandboxManager.background (sandbox/operations/background.py); the ``background`` group that holds them
is cli/main.py's BackgroundApp.
"""

from __future__ import annotations

import datetime
import logging
import shlex
import sys

from traitlets import Bool, default

from jupyter_sandbox.cli.owner import OwnerCommand, reader_left
from jupyter_sandbox.cli.sandboxes import CommandOptions
from jupyter_sandbox.cli.text import print_table, shown
from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.background import BackgroundCommands
from jupyter_sandbox.sandbox.operations.background_records import BackgroundCommand
from jupyter_sandbox.sandbox.settings import SandboxSettings

INTERRUPTED = 130  # Ctrl-C, as a shell has it (SIGINT)


class _BackgroundCommand(OwnerCommand):
    classes = [SandboxSettings, BackgroundCommands]
    group = "background"

    @default("log_level")
    def _quieter(self) -> int:
        # The core logs each start and removal at INFO, which these verbs print already (and
        # stderr keeps start's hint alone); --Application.log_level=INFO brings them back.
        return logging.WARNING

    def _owner_option(self) -> str:
        """``--owner=NAME`` when one was given, for the commands a hint suggests."""
        return f" --owner={shlex.quote(self.owner)}" if self.owner else ""


class StartApp(CommandOptions, _BackgroundCommand):
    description = (
        "Start a command in a running sandbox and leave it running; print its id (its output "
        "goes to a log that 'background output' reads)."
    )
    usage = "start [--env NAME=VALUE]... [--cwd=PATH] SANDBOX_ID -- COMMAND [ARGUMENT...]"
    examples = "\n".join(
        [
            "id=$(jupyter sandbox background start 0123456789ab -- python3 -m http.server 8000)",
            "jupyter sandbox background start --env EPOCHS=20 --cwd=/workspace/model "
            "0123456789ab -- python3 train.py",
        ]
    )
    aliases = {"env": "StartApp.env", "cwd": "StartApp.cwd"}

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, program: str, *arguments: str
    ) -> int:
        request = self.command_request([program, *arguments], background=True)
        started = await manager.background.start(owner, sandbox_id, request)
        # The id alone on stdout, so that id=$(jupyter sandbox background start ...) takes it.
        print(started.command_id, flush=True)
        print(
            f"started; its output: jupyter sandbox background output --follow{self._owner_option()} "
            f"{sandbox_id} {started.command_id}",
            file=sys.stderr,
        )
        return 0


class ListApp(_BackgroundCommand):
    description = "List a sandbox's background commands, running or ended, oldest first."
    usage = "list SANDBOX_ID"
    examples = "jupyter sandbox background list 0123456789ab"

    async def run(self, manager: SandboxManager, owner: str, sandbox_id: str) -> int:
        commands = await manager.background.list(owner, sandbox_id)
        print_table(COLUMNS, map(_row, commands))
        return 0


class OutputApp(_BackgroundCommand):
    description = (
        "Print a background command's output so far (standard output and error, as they were "
        "interleaved); with --follow, print it as it comes until the command ends, and exit "
        "with its status."
    )
    usage = "output [--follow] SANDBOX_ID COMMAND_ID"
    examples = "\n".join(
        [
            "jupyter sandbox background output 0123456789ab 5f3a9c0d1e2b",
            "jupyter sandbox background output --follow 0123456789ab 5f3a9c0d1e2b  # Ctrl-C "
            "stops following, not the command",
        ]
    )
    follow = Bool(
        False,
        config=True,
        help="""Keep printing the output as it comes until the command ends, then exit with
        its status (Ctrl-C stops following and leaves the command running).""",
    )
    flags = {
        flag: ({"OutputApp": {"follow": True}}, "Print the output as it comes until the end.")
        for flag in ("f", "follow")
    }
    _read: tuple[str, ...] = ("SANDBOX_ID", "COMMAND_ID")  # what is read, for the Ctrl-C hint

    def start(self) -> None:
        try:
            super().start()
        except KeyboardInterrupt:
            # Only the reading stops: the command is the sandbox's, and runs on.
            print(
                "interrupted: the command runs on ('jupyter sandbox background rm"
                f"{self._owner_option()} {' '.join(self._read)}' stops it)",
                file=sys.stderr,
            )
            self.exit(INTERRUPTED)

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, command_id: str
    ) -> int:
        self._read = (sandbox_id, command_id)
        try:
            if self.follow:
                return await _followed(manager.background, owner, sandbox_id, command_id)
            await _printed(manager.background, owner, sandbox_id, command_id)
            return 0
        except BrokenPipeError:
            # What reads this process's output stopped (``| head``): end quietly, as a program
            # killed by SIGPIPE; the command runs on.
            return reader_left()


class RmApp(_BackgroundCommand):
    description = (
        "Stop background commands with everything they started, and forget them and their output."
    )
    usage = "rm SANDBOX_ID COMMAND_ID..."
    examples = "jupyter sandbox background rm 0123456789ab 5f3a9c0d1e2b"

    async def run(
        self, manager: SandboxManager, owner: str, sandbox_id: str, first: str, *more: str
    ) -> int:
        for command_id in (first, *more):
            await manager.background.remove(owner, sandbox_id, command_id)
            print(f"removed {command_id}")
        return 0


async def _printed(
    background: BackgroundCommands, owner: str, sandbox_id: str, command_id: str
) -> None:
    """Print the output there is now, read by pieces of at most MAX_READ."""
    offset = 0
    while True:
        out = await background.output(owner, sandbox_id, command_id, offset)
        _write(out.text)
        stalled = out.next_offset == offset
        offset = out.next_offset
        # All that exists is printed once a read gives nothing more, but for at most a
        # character cut in two while the command runs, which waits for its rest.
        if offset >= out.size or stalled:
            return


async def _followed(
    background: BackgroundCommands, owner: str, sandbox_id: str, command_id: str
) -> int:
    """Print the output as it comes (background_follow.py reads it) until the command ends;
    its exit status, as exec has it: a status a process cannot exit with (negative, or none
    known) is failure."""
    events = background.follow(owner, sandbox_id, command_id)
    try:
        async for name, data in events:
            if name == "output":
                _write(data["text"])
            elif name == "error":  # after output was printed: the command or sandbox went
                raise SandboxError(data["message"])  # printed as any other: "error: ..."
            elif name == "result":
                exit_code = data["exit_code"]
                return exit_code if exit_code is not None and 0 <= exit_code <= 255 else 1
    finally:
        await events.aclose()
    raise AssertionError("unreachable: a follow ends with its result or error")


COLUMNS = [("COMMAND", "12"), ("STATUS", "9"), ("STARTED", "20"), ("COMMAND LINE", "")]


def _row(command: BackgroundCommand) -> tuple[str, ...]:
    """A command's row in ``list``."""
    status = (
        "running"
        if command.running
        else "ended"
        if command.exit_code is None
        else f"exit {command.exit_code}"
    )
    return (command.command_id, status, _utc(command.started), _command_line(command.argv))


def _utc(started: str) -> str:
    """An ISO 8601 start to the second, in UTC: "2025-05-01T09:30:00Z"."""
    when = datetime.datetime.fromisoformat(started).astimezone(datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _command_line(argv: list[str]) -> str:
    """The command as a shell would take it back, on one line (a table's row), its control
    characters escaped: the record it is read from lies in the sandbox, which can rewrite it."""
    return shown(shlex.join(argv))


def _write(text: str) -> None:
    # As bytes, flushed at once: followed output appears as it comes, and text the locale
    # cannot encode is still printed (as UTF-8).
    sys.stdout.buffer.write(text.encode("utf-8", "replace"))
    sys.stdout.buffer.flush()
