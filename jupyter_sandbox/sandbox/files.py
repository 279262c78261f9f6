"""Files in a running sandbox: list a directory, read, write and remove, for agent code and the
REST API (``/api/sandboxes/{id}/files``).

Every operation is a short program run *inside* the sandbox, as its own non-root user, through
the engine's exec: it sees exactly the files the sandbox's code sees and can touch only what that
code could, so a symlink planted in /workspace leads nowhere the sandbox could not already go,
and nothing is read or written on the host. (Under ``copy-on-write`` this is the one way to get
a file the notebook wrote: its writes never reach the host's directory.) Relative paths are taken
from /workspace; absolute paths name anything the sandbox's user can reach.

Contents travel over the exec stream, held in memory and capped at ``max_bytes`` each way; for
whole directories or bigger data, persist a snapshot (snapshots/).

Usage (agent code)::

    files = manager.files
    await files.write(owner, sandbox_id, "data/input.csv", b"a,b\\n1,2\\n")
    entries = await files.list(owner, sandbox_id, "data")
    result = await files.read(owner, sandbox_id, "data/output.csv")
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from traitlets import Float, Integer
from traitlets.config import LoggingConfigurable

from .backend import WORKSPACE_DIR, Feed, Writable
from .errors import (
    FileTooLargeError,
    InvalidRequestError,
    SandboxConflictError,
    SandboxFileError,
    SandboxFileNotFoundError,
)

if TYPE_CHECKING:
    from .manager import SandboxManager

FAILED = 3  # the program's exit status when it reports an error (as JSON on stderr)
MAX_PATH_BYTES = 4096
# Most bytes of a listing or of a write's report: the program's output is the sandbox's to
# write, and is held in the server's memory (a directory of ~100,000 entries fits).
MAX_REPORT_BYTES = 32 * 1024**2

# Runs in the sandbox: python3 -I -S -c PROGRAM <operation> <path>. -I: no environment, no user
# site; -S: no site module. Modules are imported where needed: under gVisor json with datetime
# took ~35 ms to import and shutil with tempfile ~45 ms more, as much as the interpreter's own
# start, so a read imports none of them (measured through exec; benchmarks/files.py).
PROGRAM = r"""
import os, stat, sys, time

def emit(stream, value):
    import json
    stream.write(json.dumps(value))

def fail(code, message):
    emit(sys.stderr, {"error": code, "message": message})
    sys.exit(3)  # FAILED

def entry(path):
    st = os.lstat(path)
    mode = st.st_mode
    kind = ("directory" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode)
            else "symlink" if stat.S_ISLNK(mode) else "other")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(st.st_mtime))
    return {"name": os.path.basename(path), "path": path, "type": kind, "size": st.st_size,
            "mode": "0o%03o" % stat.S_IMODE(mode),
            "modified": "%s.%06d+00:00" % (stamp, st.st_mtime_ns // 1000 % 1000000)}

operation = sys.argv[1]
path = os.path.normpath(os.path.join("/workspace", sys.argv[2]))
try:
    if operation == "list":
        entries = []
        for name in sorted(os.listdir(path)):
            try:
                entries.append(entry(os.path.join(path, name)))
            except FileNotFoundError:
                pass  # removed while listed
        emit(sys.stdout, {"path": path, "entries": entries})
    elif operation == "read":
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the read
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            fail("not_a_file", path + " is not a regular file")
        out = sys.stdout.buffer
        while chunk := os.read(fd, 1 << 20):
            out.write(chunk)
    elif operation == "write":
        if os.path.isdir(path):
            fail("is_a_directory", path + " is a directory")
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)  # a replaced file keeps its mode
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        # Written aside, then renamed: a reader never sees half a file.
        temporary = os.path.join(parent, ".upload-" + os.urandom(8).hex())
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(temporary, flags, 0o600)
        try:
            with open(fd, "wb") as out:
                # Whole MiB (a pipe gives 64 KiB a read): under gVisor each write costs.
                while chunk := sys.stdin.buffer.read(1 << 20):
                    out.write(chunk)
                os.fchmod(out.fileno(), mode)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
        emit(sys.stdout, entry(path))
    elif operation == "remove":
        if path in ("/", "/workspace"):
            fail("invalid_path", path + " itself cannot be removed; name what to remove in it")
        if stat.S_ISDIR(os.lstat(path).st_mode):
            import shutil
            shutil.rmtree(path)
        else:
            os.unlink(path)
except FileNotFoundError:
    fail("not_found", "no such file or directory: " + path)
except NotADirectoryError:
    fail("not_a_directory", "not a directory: " + path)
except IsADirectoryError:
    fail("is_a_directory", path + " is a directory")
except PermissionError:
    fail("permission_denied", "the sandbox's user may not do that to " + path)
except OSError as exc:
    fail("os_error", "%s: %s" % (path, exc.strerror))
"""


def check_path(path: Any) -> str:
    """``path`` if it can name a file in a sandbox; InvalidRequestError saying why otherwise."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise InvalidRequestError(
            "path must be a non-empty string without NUL: a path in the sandbox, relative to "
            f"{WORKSPACE_DIR} or absolute"
        )
    try:
        encoded = path.encode()
    except UnicodeEncodeError:
        raise InvalidRequestError("path must be valid UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise InvalidRequestError(f"path must be at most {MAX_PATH_BYTES} bytes")
    return path


class SandboxFiles(LoggingConfigurable):
    """Files of ``manager``'s running sandboxes (configured as ``c.SandboxFiles.*``).

    Every method takes the ``owner`` first; another owner's sandbox is "not found".
    """

    max_bytes = Integer(
        100 * 1024**2,
        config=True,
        help="""Largest file in bytes read from or written to a sandbox through this API
        (0: no cap). Contents are held in the server's memory on the way; for bigger data
        persist a workspace snapshot instead.""",
    )
    timeout = Float(
        120.0,
        config=True,
        help="Seconds one file operation (the program run in the sandbox) may take.",
    )

    def __init__(self, manager: SandboxManager, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager

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
        """The bytes of a regular file (symlinks followed, inside the sandbox)."""
        return await self._run(
            owner, sandbox_id, "read", path, self.max_bytes, self._too_large(path)
        )

    async def write(self, owner: str, sandbox_id: str, path: str, data: bytes) -> dict[str, Any]:
        """Write ``data`` to ``path`` whole (made with its missing parent directories, or
        replaced keeping its mode); returns its entry, as :meth:`list` gives it."""
        if self.max_bytes and len(data) > self.max_bytes:
            raise FileTooLargeError(self._too_large(path))

        def feed(out: Writable) -> None:
            out.write(data)

        report = await self._run(owner, sandbox_id, "write", path, MAX_REPORT_BYTES, "", feed=feed)
        return _decoded(report, sandbox_id)

    async def remove(self, owner: str, sandbox_id: str, path: str) -> None:
        """Remove a file, a link, or a directory with all it holds (not /workspace itself)."""
        await self._run(owner, sandbox_id, "remove", path, MAX_REPORT_BYTES, "")

    async def _run(
        self,
        owner: str,
        sandbox_id: str,
        operation: str,
        path: str,
        max_output: int,
        too_much: str,
        feed: Feed | None = None,
    ) -> bytes:
        """Run the program's ``operation`` on ``path``; its standard output, at most
        ``max_output`` bytes (0: no cap; past it, FileTooLargeError saying ``too_much``)."""
        check_path(path)
        info = await self.manager.get(owner, sandbox_id)
        if not info.running:
            raise SandboxConflictError(
                f"sandbox {sandbox_id} is {info.status}: its files are reachable while it runs"
                + (" (resume it first)" if info.status == "paused" else "")
            )
        received = bytearray()

        def sink(data: bytes) -> None:
            received.extend(data)
            if max_output and len(received) > max_output:
                raise FileTooLargeError(too_much or f"{operation} of {path} answered too much")

        argv = ["python3", "-I", "-S", "-c", PROGRAM, operation, path]
        with self.manager.usage.using(sandbox_id):  # activity, for the idle culler
            result = await self.manager.backend.exec_stream(
                sandbox_id, argv, timeout=self.timeout, feed=feed, sink=sink
            )
        if result.timed_out:
            raise SandboxFileError(
                f"{operation} of {path} in sandbox {sandbox_id} took longer than "
                f"{self.timeout:g}s (SandboxFiles.timeout)"
            )
        if result.exit_code == FAILED:
            raise _reported_error(result.stderr, sandbox_id)
        if result.exit_code != 0:
            raise SandboxFileError(
                f"{operation} of {path} in sandbox {sandbox_id} failed (exit status "
                f"{result.exit_code}): {result.stderr.decode(errors='replace').strip()[:500]}"
            )
        return bytes(received)

    def _too_large(self, path: str) -> str:
        return (
            f"{path} is larger than {self.max_bytes} bytes (SandboxFiles.max_bytes); move "
            "bigger data with a workspace snapshot"
        )


def _decoded(report: bytes, sandbox_id: str) -> dict[str, Any]:
    """The program's JSON report (which code in the sandbox could have tampered with)."""
    try:
        decoded = json.loads(report)
    except ValueError:
        decoded = None
    if not isinstance(decoded, dict):
        raise SandboxFileError(f"sandbox {sandbox_id} answered something unreadable")
    return decoded


def _reported_error(stderr: bytes, sandbox_id: str) -> SandboxFileError:
    """The error the program in the sandbox reported (its stderr is the sandbox's to write, so
    it is only ever shown as text, never trusted for more than picking the error class)."""
    try:
        report = json.loads(stderr)
        code, message = str(report["error"]), str(report["message"])[:1000]
    except (ValueError, KeyError, TypeError):
        code, message = "", stderr.decode(errors="replace").strip()[:500]
    message = f"sandbox {sandbox_id}: {message}"
    if code == "not_found":
        return SandboxFileNotFoundError(message)
    return SandboxFileError(message)
