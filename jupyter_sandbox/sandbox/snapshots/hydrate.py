"""Hydrate: restore an archive into a sandbox's /workspace, checked first, unpacked inside.

Nothing is written to the sandbox's /workspace until every check has passed:

1. every member is checked on the host without extracting (archive_scan.py, archive_rules.py)
   and the raw bytes are hashed; the hash must be the one recorded for the snapshot;
2. the files must fit the sandbox's /workspace when it is a size-capped tmpfs;
3. no directory the archive writes into may already be a symlink (or a file) in the sandbox's
   /workspace: a link planted there before the restore is never followed (checked by a short
   script run in the sandbox as its user);
4. a *clean* archive, rewritten on the host from the checked members (canonical names, no
   owners, modes without setuid/setgid/sticky/group- and world-write bits), is unpacked by
   GNU ``tar -x`` running in the sandbox as its non-root user.

With the ``host-dir`` transport, 1 and 4 are one reading: the clean archive is written into a
fresh file in the sandbox's io/ directory while the members are checked, and is removed unread
if any check fails. (It is the owner's own snapshot, bound for the owner's own sandbox, so the
sandbox seeing it early reveals nothing.) Step 3 then runs in the same engine exec as tar,
which it becomes once the target has passed. The ``exec`` transport streams the clean archive
into tar, so it reads the archive twice: checked first, then cleaned as it is sent, and the
second reading's hash must equal the first's. An archive too big for the sandbox's io/ (a
capped tmpfs of SandboxSettings.io_size, or a full disk) takes the ``exec`` transport, whatever
was configured: staging it could only fail.

The archive must not change between the steps: callers pass a file only they can write (a
stored snapshot, or a private copy) or bytes.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO

from jupyter_sandbox.protocol.snapshot_errors import (
    SnapshotFailedError,
    SnapshotIntegrityError,
    SnapshotTooLargeError,
    UnsafeArchiveError,
)
from jupyter_sandbox.sandbox.backends.base import (
    WORKSPACE_DIR,
    ExecOptions,
    SandboxBackend,
    Writable,
)
from jupyter_sandbox.sandbox.backends.records import ExecResult
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.snapshots.archive_scan import (
    ArchiveLimits,
    ArchiveSummary,
    scan_archive,
    write_clean_archive,
)
from jupyter_sandbox.sandbox.snapshots.host_dir_transport import HostDirInput, has_room_for

log = logging.getLogger(__name__)

# Read in records of 1 MiB (see persist.py's RECORD_BLOCKS for why); reading needs no padding.
UNPACK_COMMAND = image_programs.tar(
    "-x",
    "-b",
    "2048",
    "-f",
    "-",
    "-C",
    WORKSPACE_DIR,
    "--no-same-owner",
    "--no-same-permissions",
    "--no-overwrite-dir",
)

TARGET_PLANTED = 3  # TARGET_CHECK's exit status when it found a link or file in the way
# Reads NUL-separated relative directory paths (from the file argv[1], or standard input);
# prints those that exist in /workspace as anything but a real directory (a symlink, a file)
# and exits 3. Otherwise, given a command after the file, becomes it: the unpacking tar, so a
# restore through the host directory costs one engine exec, not two. Run with python -I -S:
# no environment, no user site, and no site module at all (it needs only os, stat and sys;
# -S saves ~20 ms of interpreter start under gVisor).
TARGET_CHECK = r"""
import os, stat, sys
root = b"/workspace/"
if len(sys.argv) > 1:
    with open(sys.argv[1], "rb") as f:
        listing = f.read()
else:
    listing = sys.stdin.buffer.read()
bad = []
for rel in listing.split(b"\0"):
    if not rel:
        continue
    try:
        mode = os.lstat(root + rel).st_mode
    except FileNotFoundError:
        continue
    except NotADirectoryError:
        mode = 0
    if not stat.S_ISDIR(mode):
        bad.append(rel)
if bad:
    sys.stdout.buffer.write(b"\0".join(bad))
    sys.exit(3)  # TARGET_PLANTED
if len(sys.argv) > 2:
    sys.stdout.flush()
    os.execvp(sys.argv[2], sys.argv[2:])
"""
CHECK_TARGET_COMMAND = image_programs.python(TARGET_CHECK)


async def hydrate_workspace(
    backend: SandboxBackend,
    sandbox_id: str,
    open_archive: Callable[[], AbstractContextManager[IO[bytes]]],
    *,
    limits: ArchiveLimits,
    timeout: float,
    expected_sha256: str | None = None,
    workspace_bytes: int | None = None,
    io_dir: Path | None = None,
) -> ArchiveSummary:
    """Restore the archive into ``sandbox_id``'s /workspace; ``open_archive()`` opens it
    afresh (binary, at its start) each time it is read. With ``io_dir`` (the sandbox's host
    directory) the clean archive passes through it (host_dir_transport.py) instead of the exec stream.
    Returns what the check found."""
    if io_dir is not None:
        size = await asyncio.to_thread(_size_of, open_archive)
        if not await asyncio.to_thread(has_room_for, io_dir, size):
            log.info(
                "an archive of %d bytes does not fit sandbox %s's io/ directory; restoring it "
                "over the exec stream instead",
                size,
                sandbox_id,
            )
            io_dir = None
    if io_dir is not None:
        return await _hydrate_from_host_dir(
            backend,
            sandbox_id,
            open_archive,
            limits,
            timeout,
            io_dir,
            expected_sha256,
            workspace_bytes,
        )

    def scan() -> ArchiveSummary:
        with open_archive() as raw:
            return scan_archive(raw, limits)

    summary = await asyncio.to_thread(scan)
    _check_summary(summary, sandbox_id, expected_sha256, workspace_bytes)
    await _check_target(backend, sandbox_id, summary.directories, timeout)

    second: list[ArchiveSummary] = []

    def feed(out: Writable) -> None:
        with open_archive() as raw:
            second.append(write_clean_archive(raw, out, limits))

    result = await backend.exec_stream(sandbox_id, UNPACK_COMMAND, timeout=timeout, feed=feed)
    if second and second[0].sha256 != summary.sha256:
        raise SnapshotIntegrityError(
            "the archive changed while it was being restored; the workspace may hold part of it"
        )
    _check_unpacked(result, sandbox_id)
    return summary


async def _hydrate_from_host_dir(
    backend: SandboxBackend,
    sandbox_id: str,
    open_archive: Callable[[], AbstractContextManager[IO[bytes]]],
    limits: ArchiveLimits,
    timeout: float,
    io_dir: Path,
    expected_sha256: str | None,
    workspace_bytes: int | None,
) -> ArchiveSummary:
    def check_and_stage(out: IO[bytes]) -> ArchiveSummary:
        with open_archive() as raw:
            summary = write_clean_archive(raw, out, limits)
        out.flush()
        return summary

    staged, listing = HostDirInput(io_dir), HostDirInput(io_dir)
    try:
        with staged as out, listing as directories:
            summary = await asyncio.to_thread(check_and_stage, out)
            _check_summary(summary, sandbox_id, expected_sha256, workspace_bytes)
            command = [staged.in_sandbox if arg == "-" else arg for arg in UNPACK_COMMAND]
            if summary.directories:  # the target check first, in the same exec
                directories.write(b"\0".join(d.encode() for d in summary.directories))
                directories.flush()
                command = [*CHECK_TARGET_COMMAND, listing.in_sandbox, *command]
            result = await backend.exec(
                sandbox_id, command, ExecOptions(timeout=timeout, supervised=False)
            )
    except OSError as exc:
        hint = (
            " (its io/ directory is capped at SandboxSettings.io_size: raise that above the "
            "archive's size, or use Snapshots.transport = 'exec')"
            if exc.errno == errno.ENOSPC
            else ""
        )
        raise SnapshotFailedError(
            f"staging the archive in sandbox {sandbox_id}'s host directory failed: "
            f"{exc.strerror}{hint}; nothing was restored"
        ) from None
    _refuse_planted_target(result, sandbox_id)
    _check_unpacked(result, sandbox_id)
    return summary


def _size_of(open_archive: Callable[[], AbstractContextManager[IO[bytes]]]) -> int:
    with open_archive() as raw:
        return raw.seek(0, os.SEEK_END)


def _check_summary(
    summary: ArchiveSummary,
    sandbox_id: str,
    expected_sha256: str | None,
    workspace_bytes: int | None,
) -> None:
    if expected_sha256 is not None and summary.sha256 != expected_sha256:
        raise SnapshotIntegrityError(
            f"the archive's sha256 is {summary.sha256}, not the {expected_sha256} recorded when "
            "the snapshot was made: it was changed or damaged on disk; nothing was restored"
        )
    if workspace_bytes and summary.file_bytes > workspace_bytes:
        raise SnapshotTooLargeError(
            f"the archive holds {summary.file_bytes} bytes of files; sandbox {sandbox_id}'s "
            f"/workspace holds at most {workspace_bytes} (its workspace_size limit); nothing "
            "was restored"
        )


def _check_unpacked(result: ExecResult, sandbox_id: str) -> None:
    if result.exit_code != 0:
        stderr = result.stderr.decode(errors="replace").strip()
        hint = " (/workspace is full)" if "No space left" in stderr else ""
        raise SnapshotFailedError(
            f"unpacking the archive in sandbox {sandbox_id} failed{hint} (tar exit status "
            f"{result.exit_code}): {stderr[:500]}"
        )


async def _check_target(
    backend: SandboxBackend, sandbox_id: str, directories: list[str], timeout: float
) -> None:
    if not directories:
        return
    listing = b"\0".join(d.encode() for d in directories)

    def feed(out: Writable) -> None:
        out.write(listing)

    result = await backend.exec_stream(sandbox_id, CHECK_TARGET_COMMAND, timeout=timeout, feed=feed)
    _refuse_planted_target(result, sandbox_id)
    if result.exit_code != 0:
        raise SnapshotFailedError(
            f"checking sandbox {sandbox_id}'s /workspace before restoring failed: "
            f"{result.stderr.decode(errors='replace').strip()[:500]}"
        )


def _refuse_planted_target(result: ExecResult, sandbox_id: str) -> None:
    if result.exit_code == TARGET_PLANTED:
        first = result.stdout.split(b"\0")[0].decode(errors="replace")
        raise UnsafeArchiveError(
            first,
            "target-symlink",
            f"sandbox {sandbox_id}'s /workspace already has a symlink or file where the "
            "archive needs a directory; it is never followed, nothing was restored",
        )
