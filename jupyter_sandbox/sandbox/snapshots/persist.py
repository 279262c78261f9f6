"""Persist: a tar of a sandbox's /workspace, made inside the sandbox, streamed out to the host.

``tar`` runs in the sandbox as the sandbox's own non-root user (the exec's default user), so it
reads exactly what the sandbox's code can see and nothing more; Docker's own archive API could
not reach /workspace anyway (a tmpfs, or gVisor's private filesystem). Its output is streamed
into a file on the host, counted against the byte cap as it arrives, so a workspace of a
gigabyte costs the server no more memory than a frame. The archive is then scanned like any
archive to be restored, so a workspace that could not be restored (a link leaving it, a FIFO)
is refused now, naming the member, rather than on the day it is needed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import IO

from ..backend import WORKSPACE_DIR, SandboxBackend
from .archive_scan import ArchiveLimits, ArchiveSummary, scan_archive
from .errors import SnapshotFailedError, SnapshotTooLargeError
from .host_dir import archive_to_host_dir

log = logging.getLogger(__name__)

# GNU tar in the sandbox: numeric owners (names mean nothing elsewhere), no atime games.
PERSIST_COMMAND = ["tar", "-c", "-f", "-", "--numeric-owner", "-C", WORKSPACE_DIR, "."]


async def archive_workspace(
    backend: SandboxBackend,
    sandbox_id: str,
    out: IO[bytes],
    *,
    limits: ArchiveLimits,
    timeout: float,
    io_dir: Path | None = None,
) -> ArchiveSummary:
    """Write a tar of ``sandbox_id``'s /workspace to ``out`` (a seekable file opened for
    writing and reading) and check it; returns what the check found (sha256, size, members).

    With ``io_dir`` (the sandbox's host directory) the archive passes through it (host_dir.py)
    instead of the exec stream. The sandbox itself is only read: whatever fails (cap, full disk, a refused member), its
    files and processes are as they were.
    """
    written = 0

    def sink(data: bytes) -> None:
        nonlocal written
        written += len(data)
        if limits.max_bytes and written > limits.max_bytes:
            raise SnapshotTooLargeError(
                f"the archive of sandbox {sandbox_id}'s /workspace exceeds the snapshot cap of "
                f"{limits.max_bytes} bytes (Snapshots.max_archive_bytes); nothing was stored"
            )
        out.write(data)

    if io_dir is None:
        result = await backend.exec_stream(sandbox_id, PERSIST_COMMAND, timeout=timeout, sink=sink)
    else:
        result = await archive_to_host_dir(
            backend, sandbox_id, io_dir, out, max_bytes=limits.max_bytes, timeout=timeout
        )
    if result.timed_out:
        raise SnapshotFailedError(
            f"archiving sandbox {sandbox_id}'s /workspace took longer than {timeout:g}s "
            "(Snapshots.timeout)"
        )
    if result.exit_code != 0:
        raise SnapshotFailedError(
            f"archiving sandbox {sandbox_id}'s /workspace failed (tar exit status "
            f"{result.exit_code}): {result.stderr.decode(errors='replace').strip()[:500]}"
        )
    out.flush()
    out.seek(0)
    summary = await asyncio.to_thread(scan_archive, out, limits)
    log.info(
        "workspace of sandbox %s archived: %d bytes, %d members",
        sandbox_id,
        summary.size,
        summary.members,
    )
    return summary
