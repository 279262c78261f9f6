"""Background commands: started in a sandbox, left running, looked at and stopped later, as
E2B's ``commands.run(background=True)`` and OpenSandbox's background commands are: a dev
server, a long training job, a watcher. ``POST /api/sandboxes/{id}/commands`` with
``"background": true`` starts one (server_extension/command_handlers.py); the routes under
``/commands/{command_id}`` show, read (or follow as it comes: background_follow.py) and stop it;
``SandboxManager.background`` in Python.

A command runs as the sandbox's user under its isolation, limits and network policy, like a
command run to its end (commands.py): same request, same checks, but no standard input and no
time limit. It is started detached (``SandboxBackend.spawn``: its parent is outside the
sandbox, so a kernel restart leaves it alone) with its output, standard output and error
interleaved as a terminal shows them, appended to a log in the sandbox's /tmp (so it counts
against ``tmp_size``, and the command's own code can read it too). It runs under a supervisor
that holds every process it starts, each of which also carries its exec mark (exec_deadline.py):
that is how stopping it reaches them all.

What the host keeps is the record (argv, cwd, start, the engine's exec id, the mark) in the
sandbox's state file: the records outlive a server restart, as the processes do, and go with
the sandbox. A background command is not activity: the sandbox's deadlines and idle timeout
apply while it runs, and reading its output is activity (so a client that follows a job keeps
its sandbox).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncGenerator
from typing import Any, Final

from traitlets import Integer
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol.errors import (
    CommandNotFoundError,
    InvalidRequestError,
    ProcessNotFoundError,
    SandboxConflictError,
    SandboxError,
    TooManyCommandsError,
)
from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.host.clock import now_iso
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.operations.background_follow import follow_output
from jupyter_sandbox.sandbox.operations.background_records import BackgroundCommand, CommandOutput
from jupyter_sandbox.sandbox.operations.command_stream import Event
from jupyter_sandbox.sandbox.operations.commands import CommandRequest
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.programs.exec_marks import (
    EXEC_MARK,
    kill_argv,
    new_mark,
    supervised,
)
from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

LOG_DIR = "/tmp/.jupyter-sandbox-commands"  # in the sandbox
MAX_READ = 1024**2  # bytes of output one read returns at most
STATUS_MAX_BYTES = 16  # bytes of a command's status file the host reads: "255\n" is 4
STATE_KEY: Final = "background_commands"
# Bytes of a command's argv and cwd as its record keeps them in the sandbox's state file (JSON,
# escapes and all): that file is read whole on the server's event loop, and must stay under its
# cap (host/state_record.py's MAX_STATE_BYTES) with max_per_sandbox records at their largest.
MAX_STORED_ARGV = 8 * 1024
_COMMAND_ID = re.compile(r"[0-9a-f]{12}")
# Runs as "sh -c LAUNCH sh LOG CWD ARGV..." (image_programs.shell: its own commands looked up
# on read-only directories, the command on the caller's PATH): output to the log first, so that a cwd the sandbox
# lacks is reported there ("can't cd") rather than lost; then the command, whose exit status
# the shell writes beside the log (LOG.status). The engine's own record of the exec says it
# too, but the engine forgets an ended exec after about five minutes (and all of them when it
# restarts): the file is what tells it then. A command removed (killed with its shell) writes
# none, and needs none.
LAUNCH = (
    'mkdir -p "$(dirname "$1")" && exec >>"$1" 2>&1 </dev/null || exit 126; '
    'log=$1; cd "$2" || { echo 127 >"$log.status"; exit 127; }; shift 2; '
    'PATH=$sandbox_path; "$@"; status=$?; echo "$status" >"$log.status"; exit "$status"'
)
# Prints the log from byte $2 on, at most $3 bytes of it, after its total size on a line of
# its own (so the reader knows whether more is there). A missing log: size 0.
READ = 'size=$(stat -c %s "$1" 2>/dev/null || echo 0); echo "$size"; tail -c +"$2" "$1" 2>/dev/null | head -c "$3"'


class BackgroundCommands(LoggingConfigurable):
    """The background commands of ``manager``'s sandboxes (configured as
    ``c.BackgroundCommands.*``). Every method takes the owner first; another owner's sandbox
    is "not found", as is a command id the sandbox does not have."""

    max_per_sandbox = Integer(
        32,
        config=True,
        help="""Background commands one sandbox may keep, running or ended (0: no cap). An
        ended command is kept, with its output, until it is removed (DELETE).""",
    )

    def __init__(self, manager: SandboxAccess, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager

    async def start(
        self, owner: str, sandbox_id: str, request: CommandRequest
    ) -> BackgroundCommand:
        """Start ``request`` in the owner's running sandbox and return at once."""
        if request.stdin is not None or request.stream:
            raise InvalidRequestError(
                "a background command takes no stdin and is not streamed: leave those out, "
                "and read its output with GET /api/sandboxes/{id}/commands/{command_id}/output"
            )
        cwd = request.cwd or "/workspace"
        stored = len(json.dumps([request.argv, cwd]))
        if stored > MAX_STORED_ARGV:
            raise InvalidRequestError(
                f"a background command is kept with its sandbox, and may hold at most "
                f"{MAX_STORED_ARGV // 1024} KiB (its command and cwd written as JSON), not "
                f"{stored} bytes: write a longer script to a file "
                "(PUT /api/sandboxes/{id}/files/content) and run that file"
            )
        await self.manager.running(owner, sandbox_id)
        command_id = secrets.token_hex(6)
        mark = new_mark()
        started = now_iso("auto")
        record = {
            "argv": request.argv,
            "cwd": cwd,
            "started": started,
            "spawn": None,  # until the engine has started it
            "mark": mark[EXEC_MARK],
        }
        # Its place is taken under the state's lock before it starts: two starts at once
        # cannot both pass the cap.
        self._directory(sandbox_id).modify_state(
            lambda state: self._with_place_for(state, sandbox_id, command_id, record)
        )
        launch = image_programs.shell(LAUNCH, "sh", _log(command_id), cwd, *request.argv)
        argv = supervised(launch, mark)
        try:
            spawn_id = await self.manager.backend.spawn(
                sandbox_id, argv, environment={**request.env, **mark}
            )
        except BaseException:
            self._directory(sandbox_id).modify_state(lambda state: _without(state, command_id))
            raise
        self._directory(sandbox_id).modify_state(
            lambda state: _with_fields(state, command_id, spawn=spawn_id)
        )
        self.manager.usage.record(sandbox_id)
        self.log.info("background command %s started in sandbox %s", command_id, sandbox_id)
        return BackgroundCommand(command_id, request.argv, cwd, started, True, None)

    async def list(self, owner: str, sandbox_id: str) -> list[BackgroundCommand]:
        """The sandbox's background commands, oldest first."""
        await self.manager.get(owner, sandbox_id)
        records = self._records(sandbox_id)
        found = [await self._command(sandbox_id, c, record) for c, record in records.items()]
        return sorted(found, key=lambda c: c.started)

    async def get(self, owner: str, sandbox_id: str, command_id: str) -> BackgroundCommand:
        await self.manager.get(owner, sandbox_id)
        return await self._command(sandbox_id, command_id, self._record(sandbox_id, command_id))

    async def output(
        self, owner: str, sandbox_id: str, command_id: str, offset: int = 0, limit: int = MAX_READ
    ) -> CommandOutput:
        """Its output from byte ``offset`` on, at most ``limit`` bytes (MAX_READ at most). A
        character cut at the end is left for the next read, which starts at ``next_offset``."""
        if offset < 0 or not 0 < limit <= MAX_READ:
            raise InvalidRequestError(
                f"offset must be 0 or more and limit between 1 and {MAX_READ} bytes "
                f"(offset {offset}, limit {limit})"
            )
        # Its state first: a command found ended has written all it will before the read.
        command = await self.get(owner, sandbox_id, command_id)
        result = await self.manager.exec(
            owner,
            sandbox_id,
            image_programs.shell(READ, "sh", _log(command_id), str(offset + 1), str(limit)),
            ExecOptions(timeout=60, max_output=limit + 64, supervised=False),
        )
        head, _, data = result.stdout.partition(b"\n")
        size = int(head or 0)
        if command.running or offset + len(data) < size:
            # More will come, or is there: a character cut at the end waits for its rest.
            # At the end of an ended command's log nothing completes it: it is replaced.
            data = _whole_characters(data)
        return CommandOutput(
            text=data.decode(errors="replace"),
            offset=offset,
            next_offset=offset + len(data),
            size=size,
            running=command.running,
        )

    def follow(
        self, owner: str, sandbox_id: str, command_id: str, offset: int = 0
    ) -> AsyncGenerator[Event, None]:
        """Its output from byte ``offset`` on as it comes, then how it ended: the events of
        background_follow.follow_output (closing them stops the following, not the command)."""
        return follow_output(self, owner, sandbox_id, command_id, offset)

    async def remove(self, owner: str, sandbox_id: str, command_id: str) -> None:
        """Stop the command with everything it started (if it still runs), and forget it
        and its output."""
        info = await self.manager.get(owner, sandbox_id)
        record = self._record(sandbox_id, command_id)
        if info.status == "paused":  # its processes exist, frozen: they cannot be killed now
            raise SandboxConflictError(
                f"sandbox {sandbox_id} is paused: resume it before removing a command"
            )
        # Removed from here on: every read finds it gone (a follower hears that it was removed,
        # not that it ended, killed), and so does a second removal. It comes back only if it
        # could not be stopped.
        directory = self._directory(sandbox_id)
        directory.modify_state(lambda state: _with_fields(state, command_id, removing=True))
        try:
            if info.running:  # a stopped sandbox's processes are gone already
                mark = f"{EXEC_MARK}={record['mark']}"
                await self.manager.backend.exec(
                    sandbox_id, kill_argv(mark), ExecOptions(timeout=30, supervised=False)
                )
                forget = image_programs.shell('rm -f "$1" "$1.status"', "sh", _log(command_id))
                await self.manager.backend.exec(
                    sandbox_id, forget, ExecOptions(timeout=30, supervised=False)
                )
        except BaseException:
            directory.modify_state(lambda state: _with_fields(state, command_id, removing=False))
            raise
        directory.modify_state(lambda state: _without(state, command_id))
        self.manager.usage.record(sandbox_id)
        self.log.info("background command %s of sandbox %s removed", command_id, sandbox_id)

    # -- helpers ------------------------------------------------------------------------------

    def _with_place_for(
        self, state: SandboxState, sandbox_id: str, command_id: str, record: dict[str, Any]
    ) -> SandboxState:
        kept = state.get(STATE_KEY, {})
        if self.max_per_sandbox and len(kept) >= self.max_per_sandbox:
            raise TooManyCommandsError(
                f"sandbox {sandbox_id} keeps {len(kept)} background commands, the most allowed "
                "(BackgroundCommands.max_per_sandbox): remove ended ones first "
                f"(DELETE /api/sandboxes/{sandbox_id}/commands/<id>)"
            )
        return {**state, STATE_KEY: {**kept, command_id: record}}

    def _directory(self, sandbox_id: str) -> SandboxDirectory:
        return SandboxDirectory(self.manager.settings.state_path, sandbox_id)

    def _records(self, sandbox_id: str) -> dict[str, dict[str, Any]]:
        """The records of the sandbox's commands, but those being removed."""
        records = self.manager.read_state(sandbox_id).get(STATE_KEY, {})
        return {c: record for c, record in records.items() if not record.get("removing")}

    def _record(self, sandbox_id: str, command_id: str) -> dict[str, Any]:
        record = (
            self._records(sandbox_id).get(command_id) if _COMMAND_ID.fullmatch(command_id) else None
        )
        if record is None:
            raise CommandNotFoundError(
                f"sandbox {sandbox_id} has no background command {command_id!r:.40} "
                f"(GET /api/sandboxes/{sandbox_id}/commands lists them)"
            )
        return record

    async def _command(
        self, sandbox_id: str, command_id: str, record: dict[str, Any]
    ) -> BackgroundCommand:
        """The command as it is now. Once seen ended, its exit status is kept in its record:
        the engine forgets an ended exec within minutes."""
        ended = "exit_code" in record
        exit_code = record.get("exit_code")
        if not ended and record.get("spawn") is not None:  # (None: being started now)
            try:
                exit_code = await self.manager.backend.spawned_exit_code(record["spawn"])
                ended = exit_code is not None
            except ProcessNotFoundError:  # forgotten by the engine: it ended a while ago
                ended, exit_code = True, await self._status_file(sandbox_id, command_id)
            if ended:
                self._directory(sandbox_id).modify_state(
                    lambda state: _with_fields(state, command_id, exit_code=exit_code)
                )
        return BackgroundCommand(
            command_id,
            list(record["argv"]),
            record["cwd"],
            record["started"],
            not ended,
            exit_code,
        )

    async def _status_file(self, sandbox_id: str, command_id: str) -> int | None:
        """The exit status the command's shell wrote; None if it wrote none (its sandbox
        restarted, or it was killed with its shell) or the file cannot be read now."""
        # The file is the sandbox's to overwrite: a status is at most 3 ASCII digits (0 to 255),
        # and a longer file is refused before it is read whole (int() raised ValueError on
        # 5000 digits, a 500 from the commands API).
        try:
            result = await self.manager.backend.exec(
                sandbox_id,
                [image_programs.CAT, f"{_log(command_id)}.status"],
                ExecOptions(timeout=30, max_output=STATUS_MAX_BYTES, supervised=False),
            )
        except SandboxError:  # OutputTooLargeError too
            return None
        text = result.stdout.strip()
        if result.exit_code != 0 or not (text.isdigit() and len(text) <= 3):  # bytes: ASCII only
            return None
        status = int(text)
        return status if status <= 255 else None


def _with_fields(state: SandboxState, command_id: str, **fields: Any) -> SandboxState:
    """``state`` with ``fields`` set in the command's record (unless it was removed meanwhile)."""
    commands = dict(state.get(STATE_KEY, {}))
    if command_id in commands:
        commands[command_id] = {**commands[command_id], **fields}
    return {**state, STATE_KEY: commands}


def _without(state: SandboxState, command_id: str) -> SandboxState:
    kept = {k: v for k, v in state.get(STATE_KEY, {}).items() if k != command_id}
    return {**state, STATE_KEY: kept}


def _log(command_id: str) -> str:
    return f"{LOG_DIR}/{command_id}.log"


def _whole_characters(data: bytes) -> bytes:
    """``data`` without a UTF-8 character its end cuts in two (at most 3 bytes go)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # the last character's first byte
            length = 1 if byte < 0x80 else 2 if byte >> 5 == 0x6 else 3 if byte >> 4 == 0xE else 4
            return data[:-back] if length > back else data
    return data
