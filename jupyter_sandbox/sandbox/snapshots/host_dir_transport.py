"""The ``host-dir`` transport: archives pass through the sandbox's own host directory.

Every sandbox already has a host directory bind-mounted at /run/sandbox (its ``io/``, where its
kernel's sockets are). Writing the archive there and reading it on the host avoids the engine's
exec stream, a pipe through dockerd (and, under gVisor, through gVisor's slow pipes), which is
several times slower (benchmarks/snapshots.py; figures: docs/explanation/performance.md,
"Figures behind the code").

The directory is the sandbox's: its code can plant a symlink, a FIFO or a directory at any
name there, or keep writing to a file it opened. So the host:

* reads with ``O_NOFOLLOW | O_NONBLOCK`` and accepts only a regular file (fstat), copying at
  most the byte cap into its own private file, which is all it then scans and stores (what
  the sandbox writes to its file later, or to another file of the same name, is never read);
  what it has copied it frees at once (a hole punched in the file), so the archive takes only
  the copy's lag of the sandbox's capped ``io/`` (host/size_caps.py);
* creates what the sandbox will read with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh random
  name (never opening anything the sandbox made), mode 0644 so the sandbox's user can read it;
* removes its file afterwards, whatever happened.

The byte cap is enforced inside the sandbox by ``ulimit -f`` (RLIMIT_FSIZE: tar is stopped by
SIGXFSZ when the archive would pass it) and again by the host's bounded copy. The cost: an
archive being restored takes its whole size in ``io/`` until tar has read it, which the
``exec`` transport never stages; one that would not fit there (:func:`has_room_for`) is
restored over the exec stream instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import stat
import threading
import time
from pathlib import Path
from typing import IO

from jupyter_sandbox.protocol.snapshot_errors import SnapshotFailedError, SnapshotTooLargeError
from jupyter_sandbox.sandbox.backends.base import (
    SANDBOX_IO_DIR,
    ExecOptions,
    SandboxBackend,
    Writable,
)
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.host.size_caps import release_bytes
from jupyter_sandbox.sandbox.programs import image_programs

# tar killed by SIGXFSZ (25), as the engine reports a command a signal ended (128 + its number).
FILE_TOO_LARGE = 128 + 25
CHUNK = 1024**2
FOLLOW_SECONDS = 0.002  # how often a copy looks again for bytes tar has not written yet
# Space kept free beside a staged archive: the clean archive's headers may take a little more
# than the original's, and the sandbox's kernel goes on writing its own files in io/.
STAGING_HEADROOM = 8 * 1024**2


def _name() -> str:
    return f".snapshot-{secrets.token_hex(8)}.tar"


async def archive_to_host_dir(
    backend: SandboxBackend,
    sandbox_id: str,
    io_dir: Path,
    out: Writable,
    *,
    tar: list[str],
    max_bytes: int,
    timeout: float,
) -> ExecResult:
    """Have ``tar`` (a command writing the archive to "-") run in the sandbox, writing into
    ``io_dir`` instead; copy what it writes to ``out``.

    The copy follows the archive as tar writes it (as ``tail -f`` would), so the host's copying
    and hashing overlap the sandbox's archiving instead of waiting for it.
    """
    name = _name()
    limit = f"ulimit -f {max_bytes // 512 + 1} && " if max_bytes else ""
    command = [f"{SANDBOX_IO_DIR}/{name}" if arg == "-" else arg for arg in tar]
    script = f"{limit}exec {shlex.join(command)}"
    finished = threading.Event()
    copying = asyncio.ensure_future(
        asyncio.to_thread(_copy_out, io_dir / name, out, max_bytes, sandbox_id, finished)
    )
    try:
        try:
            result = await backend.exec(
                sandbox_id,
                image_programs.shell(script),
                ExecOptions(timeout=timeout, supervised=False),
            )
        finally:
            finished.set()
        if result.exit_code == FILE_TOO_LARGE:
            raise SnapshotTooLargeError.over_cap(sandbox_id, max_bytes)
        try:
            await copying
        except SnapshotFailedError:
            if result.exit_code == 0:
                raise
            # tar failed, maybe before making the file: its own status says why
        return result
    finally:
        # finished is set: the copy ends at the file's end; it must not write to ``out`` after
        # we return.
        await asyncio.gather(copying, return_exceptions=True)
        with contextlib.suppress(OSError):
            os.unlink(io_dir / name)


def _copy_out(
    path: Path,
    out: Writable,
    max_bytes: int,
    sandbox_id: str,
    finished: threading.Event | None = None,
) -> None:
    """Copy the regular file at ``path`` to ``out``, at most ``max_bytes`` of it. Until
    ``finished`` is set (tar is done), wait for the file to appear and to grow."""
    fd = _open_when_made(path, finished, sandbox_id)
    with os.fdopen(fd, "rb", buffering=0) as archive:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SnapshotFailedError(f"sandbox {sandbox_id} replaced its archive by a non-file")
        copied = 0
        while True:
            done = finished is None or finished.is_set()  # before the read: no end is missed
            chunk = archive.read(CHUNK)
            if chunk:
                copied += len(chunk)
                if max_bytes and copied > max_bytes:
                    raise SnapshotTooLargeError.over_cap(sandbox_id, max_bytes)
                out.write(chunk)
                # Copied: free it while tar writes the rest, so the archive never holds more
                # than the copy's lag of a capped io/ (and of the sandbox's memory).
                release_bytes(fd, copied - len(chunk), len(chunk))
            elif done:
                return
            else:
                time.sleep(FOLLOW_SECONDS)


def _open_when_made(path: Path, finished: threading.Event | None, sandbox_id: str) -> int:
    # Read-write only to punch holes in what was copied (release_bytes), never to write.
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    while True:
        done = finished is None or finished.is_set()
        try:
            return os.open(path, flags)
        except FileNotFoundError:
            if done:
                raise SnapshotFailedError(
                    f"sandbox {sandbox_id} wrote no archive (the file is missing)"
                ) from None
            time.sleep(FOLLOW_SECONDS)
        except PermissionError as exc:
            # While tar runs, a file just made may not be open to us yet (seen once in CI: a
            # server run by an ordinary host user, under runsc; likely gVisor making the file,
            # then giving it its owner and mode). Only once tar has ended is a refusal final.
            if done:
                raise SnapshotFailedError(
                    f"the archive sandbox {sandbox_id} wrote is not readable: {exc.strerror}"
                ) from None
            time.sleep(FOLLOW_SECONDS)
        except OSError as exc:
            raise SnapshotFailedError(
                f"the archive sandbox {sandbox_id} wrote is not readable: {exc.strerror}"
            ) from None


def has_room_for(io_dir: Path, num_bytes: int) -> bool:
    """Whether an archive of ``num_bytes`` can be staged in ``io_dir`` now: its free space, a
    tmpfs of SandboxSettings.io_size when the host's writes are capped, the state directory's
    disk otherwise."""
    free = os.statvfs(io_dir)
    return num_bytes + num_bytes // 64 + STAGING_HEADROOM <= free.f_bavail * free.f_frsize


class HostDirInput:
    """A file the host writes in ``io_dir`` for the sandbox to read; removed on exit."""

    def __init__(self, io_dir: Path) -> None:
        self.name = _name()
        self.path = io_dir / self.name
        self.in_sandbox = f"{SANDBOX_IO_DIR}/{self.name}"

    def __enter__(self) -> IO[bytes]:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(self.path, flags, 0o644)
        os.fchmod(fd, 0o644)  # whatever the umask: the sandbox's user must read it
        self.file = os.fdopen(fd, "wb")
        return self.file

    def __exit__(self, *exc: object) -> None:
        self.file.close()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
