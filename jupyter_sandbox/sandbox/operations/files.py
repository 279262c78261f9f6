"""Files in a running sandbox: list a directory, read, write, remove, look one up, make a
directory and move, for agent code and the REST API (``/api/sandboxes/{id}/files``).

Every operation is a short program run *inside* the sandbox, as its own non-root user, through
the engine's exec: it sees exactly the files the sandbox's code sees and can touch only what that
code could, so a symlink planted in /workspace leads nowhere the sandbox could not already go,
and nothing is read or written on the host. (Under ``copy-on-write`` this is the one way to get
a file the notebook wrote: its writes never reach the host's directory.) Relative paths are taken
from /workspace; absolute paths name anything the sandbox's user can reach.

Contents travel over the exec stream, capped at ``max_bytes`` each way; for whole directories
or bigger data, persist a snapshot (snapshots/). A write's bytes are held in memory; a read's
can be taken as they come (:meth:`SandboxFiles.read_stream`, as the REST and E2B downloads do),
through a bounded crossing (command_stream.Channel): a reader slower than the sandbox makes the
program in the sandbox wait, so a download held by a client that does not read holds about a
MiB of the server's memory, not the file.

:meth:`SandboxFiles.watch` watches a directory for changes with a program of its own that
runs until the watch is closed (file_watch.py, watch_program.py).

Usage (agent code)::

    files = manager.files
    await files.write(owner, sandbox_id, "data/input.csv", b"a,b\\n1,2\\n")
    entries = await files.list(owner, sandbox_id, "data")
    result = await files.read(owner, sandbox_id, "data/output.csv")
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

from jupyter_sandbox.protocol import strict_json
from jupyter_sandbox.protocol.errors import (
    FileTooLargeError,
    SandboxConflictError,
    SandboxFileError,
)
from jupyter_sandbox.sandbox.backends.base import Feed, Sink, Writable
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.host.fair_share import OwnerCap
from jupyter_sandbox.sandbox.operations.command_stream import Channel
from jupyter_sandbox.sandbox.operations.file_checks import check_path, reported_error
from jupyter_sandbox.sandbox.operations.file_watch import watch_directory
from jupyter_sandbox.sandbox.programs import file_program, image_programs

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxAccess

# Most bytes of a listing or of a write's report: the program's output is the sandbox's to
# write, and is held in the server's memory (a directory of ~100,000 entries fits).
MAX_REPORT_BYTES = 32 * 1024**2

# The program each operation runs in the sandbox, sent as source (file_program.py says why).
PROGRAM = Path(file_program.__file__).read_text()


class SandboxFiles(LoggingConfigurable):
    """Files of ``manager``'s running sandboxes (configured as ``c.SandboxFiles.*``).

    Every method takes the ``owner`` first; another owner's sandbox is "not found".
    """

    max_bytes = Integer(
        100 * 1024**2,
        config=True,
        help="""Largest file in bytes read from or written to a sandbox through this API
        (0: no cap). A written file's contents are held in the server's memory on the way
        (a read's are streamed); for bigger data persist a workspace snapshot instead.""",
    )
    timeout = Float(
        120.0,
        config=True,
        help="""Seconds one file operation (the program run in the sandbox) may take; a
        streamed read (a download) counts the time its client takes to receive it.""",
    )

    watch_interval = Float(
        0.2,
        min=0.05,
        config=True,
        help="""Seconds between two looks of a directory watch at its directory (file_watch.py):
        a change is seen within about this long. Each look lists the whole directory.""",
    )
    watch_max_entries = Integer(
        10_000,
        min=1,
        config=True,
        help="""Most entries a watched directory (with everything under it, for a recursive
        watch) may hold: past it the watch ends with an error naming this cap.""",
    )
    max_watches = Integer(
        64,
        min=0,
        config=True,
        help="""Most directory watches (a count) this server follows at once, all owners
        together (0: no cap): each holds one of the engine's long-call threads
        (DockerBackend.engine_long_threads) while it lasts.""",
    )
    max_watches_per_owner = Integer(
        8,
        min=0,
        config=True,
        help="""Most directory watches (a count) one owner has at once, all their sandboxes
        together (0: no cap), so that one owner cannot take every watch of a shared server.""",
    )
    watch_timeout = Float(
        86400.0,
        config=True,
        help="Most seconds a directory watch lasts; it then ends with an error.",
    )

    def __init__(self, manager: SandboxAccess, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        # Directory watches running now, by owner (file_watch.py).
        self.watches = OwnerCap(
            "directory watches", "SandboxFiles.max_watches_per_owner", "SandboxFiles.max_watches"
        )

    @property
    def watch_count(self) -> int:
        """Directory watches running now, all owners together."""
        return self.watches.in_use

    async def list(self, owner: str, sandbox_id: str, path: str = ".") -> dict[str, Any]:
        """The entries of a directory: ``{"path": absolute, "entries": [entry, ...]}``, each
        entry ``name, path, type (file|directory|symlink|other), size, mode (octal text),
        modified (ISO 8601, UTC)``."""
        too_long = (
            f"the listing of {path} is larger than {MAX_REPORT_BYTES} bytes; list a subdirectory"
        )
        report = await self._run(owner, sandbox_id, "list", path, MAX_REPORT_BYTES, too_long)
        return _decoded(report, sandbox_id)

    async def read(self, owner: str, sandbox_id: str, path: str) -> bytes:
        """The bytes of a regular file (symlinks followed, inside the sandbox), whole."""
        received = bytearray()
        async for piece in self.read_stream(owner, sandbox_id, path):
            received += piece
        return bytes(received)

    async def read_stream(
        self, owner: str, sandbox_id: str, path: str
    ) -> AsyncGenerator[bytes, None]:
        """The bytes of a regular file in pieces as the sandbox sends them, each taken before
        the next is read (about a MiB waits between the sandbox and the reader).

        An error found before the first piece (no such file, not a file, larger than
        ``max_bytes``, a stopped sandbox) is raised before any is yielded, so that a caller
        can still answer with it; one after (the file grew past the cap while read, the
        time limit) is raised after the pieces, which are then not the whole file. Closing
        the generator early stops the program in the sandbox.
        """
        check_path(path)
        await self.check_running(owner, sandbox_id)
        channel = Channel(asyncio.get_running_loop())
        cap, too_large = self.max_bytes, self._too_large(path)
        received = 0

        def sink(data: bytes) -> None:  # on the engine's thread
            nonlocal received
            received += len(data)
            # The program checked the file's size first; this is for one that grew since (or
            # a program the sandbox's code replaced): nothing past the cap is handed on.
            if cap and received > cap:
                raise FileTooLargeError(too_large)
            channel.send("stdout", data)

        # The program refuses a file larger than the cap before it writes any of it.
        arguments = (str(cap),)
        run = asyncio.ensure_future(self._exec(sandbox_id, "read", path, sink, None, arguments))
        try:
            while (pieces := await channel.next(run)) is not None:
                yield b"".join(data for _, data in pieces)
            result = run.result()
            if result.exit_code == file_program.TOO_LARGE:
                raise FileTooLargeError(too_large)
            self._check(result, sandbox_id, "read", path)
        finally:
            await channel.close_and_stop(run)  # stops the program if it still runs

    async def write(self, owner: str, sandbox_id: str, path: str, data: bytes) -> dict[str, Any]:
        """Write ``data`` to ``path`` whole (made with its missing parent directories, or
        replaced keeping its mode); returns its entry, as :meth:`list` gives it."""
        self.check_size(path, len(data))

        def feed(out: Writable) -> None:
            out.write(data)

        report = await self._run(owner, sandbox_id, "write", path, MAX_REPORT_BYTES, "", feed=feed)
        return _decoded(report, sandbox_id)

    async def remove(self, owner: str, sandbox_id: str, path: str) -> None:
        """Remove a file, a link, or a directory with all it holds (not /workspace itself)."""
        await self._run(owner, sandbox_id, "remove", path, MAX_REPORT_BYTES, "")

    async def info(self, owner: str, sandbox_id: str, path: str) -> dict[str, Any]:
        """The entry of ``path`` itself (a symlink is not followed), as :meth:`list` gives
        entries; SandboxFileNotFoundError when there is none."""
        report = await self._run(owner, sandbox_id, "info", path, MAX_REPORT_BYTES, "")
        return _decoded(report, sandbox_id)

    async def make_directory(self, owner: str, sandbox_id: str, path: str) -> dict[str, Any]:
        """Make the directory ``path`` with its missing parents; its entry, with ``created``
        false when it was already there. SandboxFileExistsError when a file is."""
        report = await self._run(owner, sandbox_id, "mkdir", path, MAX_REPORT_BYTES, "")
        return _decoded(report, sandbox_id)

    async def move(
        self, owner: str, sandbox_id: str, path: str, target: str, overwrite: bool = False
    ) -> dict[str, Any]:
        """Move (rename) ``path`` to ``target``, made with its missing parents; the entry at
        ``target``. A target already there is SandboxFileExistsError unless ``overwrite`` (a
        file, or an empty directory, is then replaced); neither may be /workspace itself."""
        check_path(target)
        how = "overwrite" if overwrite else "keep"
        report = await self._run(
            owner, sandbox_id, "move", path, MAX_REPORT_BYTES, "", arguments=(target, how)
        )
        return _decoded(report, sandbox_id)

    def watch(
        self, owner: str, sandbox_id: str, path: str = ".", recursive: bool = False
    ) -> AsyncGenerator[tuple[str, dict[str, Any]], None]:
        """The changes under the directory ``path`` as they come: ("ready", ...), then
        ("change", {"type": created|modified|removed, "path", "entry"}) each, until closed
        (closing it stops the watcher in the sandbox). file_watch.py has the details."""
        return watch_directory(self, owner, sandbox_id, path, recursive)

    async def check_running(self, owner: str, sandbox_id: str) -> None:
        """SandboxConflictError, naming the fix, unless the owner's sandbox runs."""
        info = await self.manager.get(owner, sandbox_id)
        if not info.running:
            raise SandboxConflictError(
                f"sandbox {sandbox_id} is {info.status}: its files are reachable while it runs"
                + (" (resume it first)" if info.status == "paused" else "")
            )

    async def _run(
        self,
        owner: str,
        sandbox_id: str,
        operation: str,
        path: str,
        max_output: int,
        too_much: str,
        feed: Feed | None = None,
        arguments: tuple[str, ...] = (),
    ) -> bytes:
        """Run the program's ``operation`` on ``path`` (and ``arguments``); its standard
        output, at most ``max_output`` bytes (0: no cap; past it, FileTooLargeError saying
        ``too_much``)."""
        check_path(path)
        await self.check_running(owner, sandbox_id)
        received = bytearray()

        def sink(data: bytes) -> None:
            received.extend(data)
            if max_output and len(received) > max_output:
                raise FileTooLargeError(too_much or f"{operation} of {path} answered too much")

        result = await self._exec(sandbox_id, operation, path, sink, feed, arguments)
        self._check(result, sandbox_id, operation, path)
        return bytes(received)

    async def _exec(
        self,
        sandbox_id: str,
        operation: str,
        path: str,
        sink: Sink,
        feed: Feed | None,
        arguments: tuple[str, ...],
    ) -> ExecResult:
        """Run the program's ``operation`` in the sandbox, its standard output to ``sink``."""
        argv = image_programs.python(PROGRAM, operation, path, *arguments)
        with self.manager.usage.using(sandbox_id):  # activity, for the idle culler
            return await self.manager.backend.exec_stream(
                sandbox_id, argv, timeout=self.timeout, feed=feed, sink=sink
            )

    def _check(self, result: ExecResult, sandbox_id: str, operation: str, path: str) -> None:
        """The error the program's ``result`` stands for, raised; nothing if it succeeded."""
        if result.timed_out:
            raise SandboxFileError(
                f"{operation} of {path} in sandbox {sandbox_id} took longer than "
                f"{self.timeout:g}s (SandboxFiles.timeout)"
            )
        if result.exit_code == file_program.FAILED:
            raise reported_error(result.stderr, sandbox_id)
        if result.exit_code != 0:
            raise SandboxFileError(
                f"{operation} of {path} in sandbox {sandbox_id} failed (exit status "
                f"{result.exit_code}): {result.stderr.decode(errors='replace').strip()[:500]}"
            )

    def check_size(self, path: str, size: int) -> None:
        """FileTooLargeError if ``size`` bytes written to ``path`` would pass ``max_bytes``:
        for a caller that learns a body's size before it has all of it."""
        if self.max_bytes and size > self.max_bytes:
            raise FileTooLargeError(self._too_large(path))

    def _too_large(self, path: str) -> str:
        return (
            f"{path} is larger than {self.max_bytes} bytes (SandboxFiles.max_bytes); move "
            "bigger data with a workspace snapshot"
        )


def _decoded(report: bytes, sandbox_id: str) -> dict[str, Any]:
    """The program's JSON report (which code in the sandbox could have tampered with)."""
    try:
        decoded = strict_json.loads(report, max_bytes=MAX_REPORT_BYTES)
    except strict_json.MalformedJSONError:
        decoded = None
    if not isinstance(decoded, dict):
        raise SandboxFileError(f"sandbox {sandbox_id} answered something unreadable")
    return decoded
