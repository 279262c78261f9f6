"""A directory in a running sandbox watched for changes, as E2B's
``sandbox.files.watch_dir(path, on_event)`` offers: what ``SandboxFiles.watch`` gives agent
code, ``GET /api/sandboxes/{id}/files/watch`` streams (server_extension/file_handlers.py) and
``jupyter sandbox files watch`` prints.

The watching is done inside the sandbox, as its user, by watch_program.py (which polls, and
says why), started through the engine's exec as every file operation is; its JSON lines cross
from the engine's thread to the event loop through command_stream.Channel, bounded, so a
reader slower than the changes holds the program back instead of filling the server's memory.
The lines are the sandbox's to write: each is capped (MAX_LINE) and checked for its shape, and
one that is not a change is dropped (logged at debug level).

The events have the shape of the other streams' (command_stream.py, background_follow.py):
``ready`` first, once the directory's first listing is taken (a change from then on is
reported), then a ``change`` each, a ``ping`` after HEARTBEAT seconds without one (so neither
a client's read timeout nor a proxy's cuts a quiet watch), and, if the watch ends on its own
(the directory removed, the sandbox stopped, SandboxFiles.watch_timeout reached), ``error``.
A watch has no result: it lasts until its consumer closes it, which kills the program in the
sandbox (the exec's wait is cancelled: backends/docker/exec.py's ExecWatch kills its marked
processes).

Each watch holds one of the engine's long-call threads while it lasts (the exec's output is
read there), so a server follows at most SandboxFiles.max_watches at once, and one owner at most
SandboxFiles.max_watches_per_owner (one owner's watches must not refuse another's). A watch is not
activity: its start counts as one action, but a forgotten watch must not keep its sandbox
alive, so the idle culler removes a sandbox nothing else used for its idle timeout, watched or
not, and the watch then ends with ``error``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import (
    SandboxDiedError,
    SandboxError,
    SandboxFileError,
    SandboxNotFoundError,
    TooManyWatchesError,
)
from jupyter_sandbox.sandbox.operations.command_stream import Channel, Event
from jupyter_sandbox.sandbox.operations.file_checks import check_path, reported_error
from jupyter_sandbox.sandbox.programs import image_programs, watch_program

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.host.fair_share import OwnerCap
    from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

log = logging.getLogger(__name__)

PROGRAM = Path(watch_program.__file__).read_text()
# Bytes of one line of the program's: a change of a 4096-byte path, escaped, fits many times.
MAX_LINE = 64 * 1024
# Seconds without an event after which a ``ping`` is sent (as background_follow.HEARTBEAT).
HEARTBEAT = 15.0
ENTRY_TYPES = ("file", "directory", "symlink", "other")
ENTRY_FIELDS = {"name": str, "path": str, "type": str, "size": int, "mode": str, "modified": str}


class LineSplitter:
    """The program's output as whole lines; a line longer than MAX_LINE is dropped whole."""

    def __init__(self) -> None:
        self._pending = bytearray()
        self._skipping = False  # in a line too long, dropped up to its end

    def feed(self, data: bytes) -> list[bytes]:
        self._pending += data
        lines = []
        while (end := self._pending.find(b"\n")) >= 0:
            line = bytes(self._pending[:end])
            del self._pending[: end + 1]
            if self._skipping:
                self._skipping = False
            elif len(line) <= MAX_LINE:
                lines.append(line)
            else:
                log.debug("a watch dropped a line of %d bytes", len(line))
        if len(self._pending) > MAX_LINE:
            log.debug("a watch is dropping a line of more than %d bytes", MAX_LINE)
            self._pending.clear()
            self._skipping = True
        return lines


def parsed(line: bytes) -> Event | None:
    """The event one line of the program's stands for, or None if it is not one."""
    try:
        value = strict_json.loads(line, max_bytes=MAX_LINE + 1)  # its newline too
    except strict_json.MalformedJSONError:
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("path"), str):
        value = {}
    change, path, entry = value.get("type"), value.get("path"), value.get("entry")
    if change == "ready":
        return "ready", {"path": path}
    if change == "removed" and entry is None:
        return "change", {"type": change, "path": path, "entry": None}
    checked = _entry(entry)
    if change in ("created", "modified") and checked is not None:
        return "change", {"type": change, "path": path, "entry": checked}
    log.debug("a watch dropped a line that is not a change: %.200r", line)
    return None


def _entry(value: Any) -> dict[str, Any] | None:
    """The entry ``value`` holds, its fields alone, if it has the shape of one."""
    if not isinstance(value, dict) or value.get("type") not in ENTRY_TYPES:
        return None
    for name, kind in ENTRY_FIELDS.items():
        if not isinstance(value.get(name), kind) or isinstance(value.get(name), bool):
            return None
    return {name: value[name] for name in ENTRY_FIELDS}


class WatchedFiles(Protocol):
    """What a watch needs of files.py's SandboxFiles, which starts it: its sandboxes, its
    settings and its count of watches (named here, not imported, as files.py imports this)."""

    manager: SandboxAccess
    watches: OwnerCap
    max_watches: int
    max_watches_per_owner: int
    watch_max_entries: int
    watch_interval: float
    watch_timeout: float

    async def check_running(self, owner: str, sandbox_id: str) -> None: ...


async def watch_directory(
    files: WatchedFiles,
    owner: str,
    sandbox_id: str,
    path: str = ".",
    recursive: bool = False,
    heartbeat: float = HEARTBEAT,
) -> AsyncGenerator[Event, None]:
    """The changes under directory ``path`` of the owner's running sandbox, as they are seen:
    ("ready", {"path": absolute}), then ("change", {"type": created|modified|removed, "path",
    "entry": an entry as SandboxFiles.list gives them, or None for a removal}) each, ("ping",
    {}) after ``heartbeat`` seconds without one, until closed; ("error", ...) if it ends on its
    own. A SandboxError before "ready" is raised: an unknown or stopped sandbox, a missing path
    (SandboxFileNotFoundError), one that is not a directory or holds too many entries
    (SandboxFileError), too many watches (TooManyWatchesError)."""
    check_path(path)
    manager = files.manager
    await files.check_running(owner, sandbox_id)
    refusal = files.watches.refusal(owner, files.max_watches_per_owner, files.max_watches)
    if refusal is not None:
        raise TooManyWatchesError(refusal)
    manager.usage.record(sandbox_id)  # the start is an action; the watch is not (see above)
    files.watches.take(owner)
    channel = Channel(asyncio.get_running_loop())
    arguments = [path, "1" if recursive else "0", str(files.watch_max_entries)]
    argv = image_programs.python(PROGRAM, *arguments, repr(files.watch_interval))
    run = asyncio.ensure_future(
        manager.backend.exec_stream(
            sandbox_id,
            argv,
            timeout=files.watch_timeout,
            sink=lambda data: channel.send("stdout", data),
        )
    )
    lines = LineSplitter()
    ready = False
    try:
        while True:
            try:
                pieces = await asyncio.wait_for(channel.next(run), heartbeat)
            except TimeoutError:
                if ready:
                    yield "ping", {}
                continue
            if pieces is None:
                break
            for _, data in pieces:
                for line in lines.feed(data):
                    event = parsed(line)
                    if event is None or ready == (event[0] == "ready"):
                        continue  # "ready" comes once, and first
                    ready = True
                    yield event
        error = await _ending(run, files, owner, sandbox_id, path)
        if not ready:
            raise error
        yield "error", error.to_dict()
    finally:
        files.watches.give_back(owner)
        await channel.close_and_stop(run)  # kills the watch program if it still runs


async def _ending(
    run: asyncio.Future[Any], files: WatchedFiles, owner: str, sandbox_id: str, path: str
) -> SandboxError:
    """Why the watch program ended: it never does on its own unless something went wrong."""
    stopped = SandboxDiedError(f"sandbox {sandbox_id} stopped while {path} was watched")
    try:
        result = run.result()
    except SandboxDiedError:  # the exec saw the sandbox end before its program's end was read
        return stopped  # one answer, whichever of the two saw it first
    except SandboxError as error:
        return error
    if result.exit_code != watch_program.FAILED:  # killed: with its sandbox?
        try:
            running = (await files.manager.get(owner, sandbox_id)).running
        except SandboxNotFoundError:
            running = False
        if not running:
            return stopped
    if result.timed_out:
        return SandboxFileError(
            f"the watch of {path} in sandbox {sandbox_id} lasted {files.watch_timeout:g}s, the "
            "longest a watch may (SandboxFiles.watch_timeout): watch again"
        )
    if result.exit_code == watch_program.FAILED:
        return reported_error(result.stderr, sandbox_id)
    return SandboxFileError(
        f"the watch of {path} in sandbox {sandbox_id} ended (exit status {result.exit_code}): "
        f"{result.stderr.decode(errors='replace').strip()[:500]}"
    )
