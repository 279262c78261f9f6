"""Hydrate: restore an archive into a sandbox's /workspace, checked first, unpacked inside.

In order, and nothing is written to the sandbox until every check has passed:

1. every member is checked on the host without extracting (archive_scan.py, archive_rules.py)
   and the raw bytes are hashed; the hash must be the one recorded for the snapshot;
2. the files must fit the sandbox's /workspace when it is a size-capped tmpfs;
3. no directory the archive writes into may already be a symlink (or a file) in the sandbox's
   /workspace: a link planted there before the restore is never followed (checked by a short
   script run in the sandbox as its user);
4. a *clean* archive, rewritten on the host from the checked members (canonical names, no
   owners, modes without setuid/setgid/sticky/group- and world-write bits), is streamed to
   GNU ``tar -x`` running in the sandbox as its non-root user.

The archive must not change between the steps: callers pass a file only they can write (a
stored snapshot, or a private copy) or bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO

from ..backend import WORKSPACE_DIR, ExecResult, SandboxBackend, Writable
from .archive_scan import ArchiveLimits, ArchiveSummary, scan_archive, write_clean_archive
from .errors import (
    SnapshotFailedError,
    SnapshotIntegrityError,
    SnapshotTooLargeError,
    UnsafeArchiveError,
)
from .host_dir import HostDirInput

UNPACK_COMMAND = [
    "tar",
    "-x",
    "-f",
    "-",
    "-C",
    WORKSPACE_DIR,
    "--no-same-owner",
    "--no-same-permissions",
    "--no-overwrite-dir",
]

# Reads NUL-separated relative directory paths; prints those that exist in /workspace as
# anything but a real directory (a symlink, a file). Run with python -I: no site, no env.
TARGET_CHECK = r"""
import os, stat, sys
root = b"/workspace/"
bad = []
for rel in sys.stdin.buffer.read().split(b"\0"):
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
sys.stdout.buffer.write(b"\0".join(bad))
sys.exit(3 if bad else 0)
"""


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
    directory) the clean archive passes through it (host_dir.py) instead of the exec stream.
    Returns what the check found."""

    def scan() -> ArchiveSummary:
        with open_archive() as raw:
            return scan_archive(raw, limits)

    summary = await asyncio.to_thread(scan)
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
    await _check_target(backend, sandbox_id, summary.directories, timeout)

    second: list[ArchiveSummary] = []

    def feed(out: Writable) -> None:
        with open_archive() as raw:
            write_clean_archive(raw, out, limits, second.append)

    if io_dir is None:
        result = await backend.exec_stream(sandbox_id, UNPACK_COMMAND, timeout=timeout, feed=feed)
    else:
        result = await _unpack_from_host_dir(backend, sandbox_id, io_dir, feed, timeout)
    if second and second[0].sha256 != summary.sha256:
        raise SnapshotIntegrityError(
            "the archive changed while it was being restored; the workspace may hold part of it"
        )
    if result.exit_code != 0:
        stderr = result.stderr.decode(errors="replace").strip()
        hint = " (/workspace is full)" if "No space left" in stderr else ""
        raise SnapshotFailedError(
            f"unpacking the archive in sandbox {sandbox_id} failed{hint} (tar exit status "
            f"{result.exit_code}): {stderr[:500]}"
        )
    return summary


async def _unpack_from_host_dir(
    backend: SandboxBackend,
    sandbox_id: str,
    io_dir: Path,
    feed: Callable[[Writable], None],
    timeout: float,
) -> ExecResult:
    staged = HostDirInput(io_dir)
    try:
        with staged as out:
            await asyncio.to_thread(feed, out)
            out.flush()
            command = [staged.in_sandbox if arg == "-" else arg for arg in UNPACK_COMMAND]
            return await backend.exec(sandbox_id, command, timeout=timeout)
    except OSError as exc:
        raise SnapshotFailedError(
            f"staging the archive in sandbox {sandbox_id}'s host directory failed: "
            f"{exc.strerror}; nothing was restored"
        ) from None


async def _check_target(
    backend: SandboxBackend, sandbox_id: str, directories: list[str], timeout: float
) -> None:
    if not directories:
        return
    listing = b"\0".join(d.encode() for d in directories)

    def feed(out: Writable) -> None:
        out.write(listing)

    result = await backend.exec_stream(
        sandbox_id, ["python3", "-I", "-c", TARGET_CHECK], timeout=timeout, feed=feed
    )
    if result.exit_code == 3:
        first = result.stdout.split(b"\0")[0].decode(errors="replace")
        raise UnsafeArchiveError(
            first,
            "target-symlink",
            f"sandbox {sandbox_id}'s /workspace already has a symlink or file where the "
            "archive needs a directory; it is never followed, nothing was restored",
        )
    if result.exit_code != 0:
        raise SnapshotFailedError(
            f"checking sandbox {sandbox_id}'s /workspace before restoring failed: "
            f"{result.stderr.decode(errors='replace').strip()[:500]}"
        )
