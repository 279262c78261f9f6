"""Persist: a tar of a sandbox's /workspace, streamed out to the host.

What the host stores must be what /workspace held, not what the sandbox's code chose to write
(security row 43), so the archive is sealed where the backend can make it so: under runsc a
tar as uid 0 with only CAP_DAC_READ_SEARCH that the sandbox's user cannot reach, under runc the
host's own walk of the frozen sandbox (sandbox/backends/docker/sealed_archive.py). Where it
cannot (runc, a server that is not root), ``tar`` runs in the sandbox as the sandbox's own
non-root user, which the sandbox's code can stop and forge; Docker's own archive API could not
reach /workspace anyway (a tmpfs, or gVisor's private filesystem). The output is streamed
into a file on the host, counted against the byte cap as it arrives, so a workspace of a
gigabyte costs the server no more memory than a frame. The archive is then scanned like any
archive to be restored, so a workspace that could not be restored (a link leaving it; a FIFO
or a device, which tar archives and the runc walk skips) is refused now, naming the member,
rather than on the day it is needed.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import queue
import threading
from pathlib import Path
from typing import IO

from jupyter_sandbox.protocol.snapshot_errors import SnapshotFailedError, SnapshotTooLargeError
from jupyter_sandbox.sandbox.backends.base import WORKSPACE_DIR, SandboxBackend
from jupyter_sandbox.sandbox.programs import image_programs
from jupyter_sandbox.sandbox.snapshots.archive_scan import (
    ArchiveLimits,
    ArchiveSummary,
    scan_archive,
)
from jupyter_sandbox.sandbox.snapshots.host_dir_transport import archive_to_host_dir

log = logging.getLogger(__name__)

HASH_QUEUE_CHUNKS = 16  # chunks (of up to 1 MiB) waiting to be hashed, at most

# GNU tar in the sandbox: numeric owners (names mean nothing elsewhere), no atime games.
# Records of 256 KiB (512 blocks) instead of 10 KiB: under gVisor every write leaving the
# sandbox is a round trip to the host, and 200 MiB archived 3-4x faster so (0.25 s against
# 0.93 s, benchmarks/snapshots.py). The cost: the archive ends padded to a whole record.
RECORD_BLOCKS = "512"
PERSIST_COMMAND = image_programs.tar(
    "-c", "-b", RECORD_BLOCKS, "-f", "-", "--numeric-owner", "-C", WORKSPACE_DIR, "."
)


async def archive_workspace(
    backend: SandboxBackend,
    sandbox_id: str,
    out: IO[bytes],
    *,
    limits: ArchiveLimits,
    timeout: float,
    io_dir: Path | None = None,
) -> ArchiveSummary:
    """Write a tar of ``sandbox_id``'s /workspace to ``out`` (a new, empty seekable file opened
    for writing and reading) and check it; returns what the check found (sha256, size, members).

    The archive is sealed (SandboxBackend.sealed_archive: made where the sandbox's code cannot
    stop, read or replace it) wherever the backend can; elsewhere (runc with a server that is
    not root) tar runs in the sandbox as its user, which is logged, and with ``io_dir`` (the
    sandbox's host directory) the archive passes through it (host_dir_transport.py) instead of
    the exec stream. The sandbox itself is only read: whatever fails (cap, full disk, a refused
    member), its files and processes are as they were (a runc sandbox frozen for the sealed
    archive is thawed).
    """
    written = 0
    hashed = _Hashed(out)  # hashed as it arrives, on a second thread; never read again for it

    def sink(data: bytes) -> None:
        nonlocal written
        written += len(data)
        if limits.max_bytes and written > limits.max_bytes:
            raise SnapshotTooLargeError.over_cap(sandbox_id, limits.max_bytes)
        hashed.write(data)

    info = await backend.inspect(sandbox_id)
    why_not = backend.why_not_sealed(info.runtime)
    if why_not:
        log.warning("workspace of sandbox %s archived in the sandbox: %s", sandbox_id, why_not)
    try:
        if not why_not:
            result = await backend.sealed_archive(
                sandbox_id, sink, timeout=timeout, max_members=limits.max_members
            )
        elif io_dir is None:
            result = await backend.exec_stream(
                sandbox_id, PERSIST_COMMAND, timeout=timeout, sink=sink
            )
        else:
            result = await archive_to_host_dir(
                backend,
                sandbox_id,
                io_dir,
                hashed,
                tar=PERSIST_COMMAND,
                max_bytes=limits.max_bytes,
                timeout=timeout,
            )
    finally:
        sha256 = await asyncio.to_thread(hashed.finish)  # at most a queue of chunks left
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
    summary = await asyncio.to_thread(lambda: scan_archive(out, limits, sha256=sha256))
    log.info(
        "workspace of sandbox %s archived: %d bytes, %d members",
        sandbox_id,
        summary.size,
        summary.members,
    )
    return summary


class _Hashed:
    """``out`` (a new, empty file), whose bytes are hashed on a second thread as they are
    written: the copy out of the sandbox need not wait for sha256 (hashlib releases the GIL),
    and the archive is not read again for its hash. Call ``finish`` in any case."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        # Bounded: a writer faster than sha256 waits rather than piling chunks up in memory.
        self.chunks: queue.Queue[bytes | None] = queue.Queue(maxsize=HASH_QUEUE_CHUNKS)
        self.thread = threading.Thread(target=self._hash, name="persist-sha256", daemon=True)
        self.thread.start()

    def write(self, data: bytes) -> int:
        written = self.out.write(data)
        self.chunks.put(data)  # bytes are immutable: the writer cannot change them under us
        return written

    def finish(self) -> str:
        """The sha256 of all that was written (the thread ends)."""
        self.chunks.put(None)
        self.thread.join()
        return self.digest.hexdigest()

    def _hash(self) -> None:
        while (chunk := self.chunks.get()) is not None:
            self.digest.update(chunk)
