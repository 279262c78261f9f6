"""Snapshots: the one entry point for the REST API, the CLI and agent code.

Every method takes the ``owner`` first and checks it: another owner's sandbox or snapshot is
"not found". Stored snapshots (SnapshotStore) are made by :meth:`Snapshots.persist` and
:meth:`Snapshots.import_archive`, restored by :meth:`Snapshots.hydrate` (into a running sandbox,
the same one or another) or :meth:`Snapshots.create_sandbox` (into a new one). Agent code that
keeps archives itself uses :meth:`Snapshots.persist_to_file` / :meth:`Snapshots.persist_bytes`
and :meth:`Snapshots.hydrate_file` / :meth:`Snapshots.hydrate_bytes`. Memory snapshots
(:meth:`Snapshots.checkpoint`, :meth:`Snapshots.restore_memory`) are kept by the engine with
their sandbox (memory.py); listing, getting and deleting cover both kinds.

Usage (agent code)::

    manager = SandboxManager.from_config()
    snapshot = await manager.snapshots.persist(owner, sandbox_id)
    sandbox = await manager.snapshots.create_sandbox(owner, snapshot["id"])
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import shutil
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from jupyter_sandbox.protocol.errors import InvalidRequestError, QuotaExceededError
from jupyter_sandbox.protocol.snapshot_errors import (
    SnapshotNotFoundError,
    SnapshotTooLargeError,
    shown,
)
from jupyter_sandbox.sandbox.host.fair_share import FairShare
from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory, replaced_atomically
from jupyter_sandbox.sandbox.limits import SandboxLimits
from jupyter_sandbox.sandbox.sandbox_types import Sandbox
from jupyter_sandbox.sandbox.snapshots.archive_scan import (
    ArchiveSummary,
    decompress_gzip,
    scan_archive,
)
from jupyter_sandbox.sandbox.snapshots.hydrate import hydrate_workspace
from jupyter_sandbox.sandbox.snapshots.memory import MemorySnapshots
from jupyter_sandbox.sandbox.snapshots.persist import archive_workspace
from jupyter_sandbox.sandbox.snapshots.settings import SnapshotSettings
from jupyter_sandbox.sandbox.snapshots.storage import workspace_metadata

if TYPE_CHECKING:
    from jupyter_sandbox.sandbox.sandbox_access import SandboxLifecycle

KINDS = ("workspace", "memory")
COMPRESSIONS = (None, "gzip")  # what an import may declare (import_archive)


class Snapshots(SnapshotSettings):
    """Workspace snapshots of ``manager``'s sandboxes (configured as ``c.Snapshots.*``)."""

    def __init__(self, manager: SandboxLifecycle, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager
        self.memory = MemorySnapshots(manager)
        # Turns of the archive work of restores (hashing, scanning, copying archives), shared
        # fairly between owners: the server extension hands its own, which its snapshot
        # requests take too (SandboxExtension.max_archive_jobs; FairShare.slot is re-entrant,
        # so a request holding one takes no second here). Taken here, in the core, so that
        # every path to a restore takes one: POST /api/sandboxes with a snapshot too, which
        # else runs as many at once as the owner may have sandboxes. None (a CLI verb, agent
        # code in a process of its own): no turns.
        self.archive_turns: FairShare | None = None

    # -- stored snapshots ---------------------------------------------------------------------

    async def persist(
        self,
        owner: str,
        sandbox_id: str,
        *,
        kind: str = "workspace",
        note: str = "",
        leave_running: bool = False,
    ) -> dict[str, Any]:
        """Store a snapshot of ``owner``'s sandbox; returns its metadata.

        ``kind`` 'memory' is :meth:`checkpoint` (``leave_running`` is its option).
        """
        if kind == "memory":
            return await self.checkpoint(owner, sandbox_id, leave_running=leave_running, note=note)
        info = await self.manager.get(owner, sandbox_id)
        self._check_quota(owner)
        store = self.store
        with store.new_archive(owner) as (out, temporary):
            summary = await self._archive(sandbox_id, out)
            metadata = workspace_metadata(summary, info, note)
            # Off the event loop: the commit's fsync waits for the disk.
            return await asyncio.to_thread(store.commit, owner, temporary, metadata)

    async def import_archive(
        self,
        owner: str,
        source: bytes | str | Path,
        *,
        note: str = "",
        compression: str | None = None,
    ) -> dict[str, Any]:
        """Store an archive made elsewhere (bytes, or a file path), checked like any restore.

        A plain tar is read as it is; ``compression='gzip'`` decompresses it first (within
        the byte and ratio caps) and the plain tar is what is stored. Nothing else is ever
        decompressed: a compressed archive not declared so is refused, saying what to do.
        """
        if compression not in COMPRESSIONS:
            raise InvalidRequestError(
                f"compression is 'gzip' or not given (a plain tar), not {shown(compression)!r}"
            )
        self._check_quota(owner)
        store = self.store
        limits = self.limits

        def copy_and_scan(out: IO[bytes]) -> ArchiveSummary:
            with contextlib.ExitStack() as stack:
                raw = (
                    io.BytesIO(source)
                    if isinstance(source, bytes)
                    else stack.enter_context(open(source, "rb"))
                )
                if compression == "gzip":
                    decompress_gzip(raw, out, limits)
                else:
                    shutil.copyfileobj(raw, out, 1024**2)
            out.flush()
            out.seek(0)
            return scan_archive(out, limits)

        with store.new_archive(owner) as (out, temporary):
            summary = await asyncio.to_thread(copy_and_scan, out)
            metadata = workspace_metadata(summary, None, note)
            return await asyncio.to_thread(store.commit, owner, temporary, metadata)

    def list_snapshots(self, owner: str) -> list[dict[str, Any]]:
        """Both kinds, oldest first."""
        found = self.store.list(owner) + self.memory.list_for(owner)
        return sorted(found, key=lambda metadata: str(metadata.get("created")))

    def get(self, owner: str, snapshot_id: str) -> dict[str, Any]:
        try:
            return self.store.metadata(owner, snapshot_id)
        except SnapshotNotFoundError:
            return self.memory.find(owner, snapshot_id)[1]

    def archive_path(self, owner: str, snapshot_id: str) -> Path:
        """The stored archive (for a download); SnapshotNotFoundError for another owner's."""
        return self.store.archive_path(owner, self._workspace_snapshot(owner, snapshot_id))

    async def delete(self, owner: str, snapshot_id: str) -> None:
        if self.get(owner, snapshot_id)["kind"] == "memory":
            await self.memory.delete(owner, snapshot_id)
        else:
            self.store.delete(owner, snapshot_id)

    async def hydrate(self, owner: str, snapshot_id: str, sandbox_id: str) -> ArchiveSummary:
        """Restore ``owner``'s snapshot into ``owner``'s running sandbox (its own or another).

        Files of the snapshot are written over the sandbox's; other files stay.
        """
        metadata = self.get(owner, self._workspace_snapshot(owner, snapshot_id))
        path = self.store.archive_path(owner, snapshot_id)
        await self.manager.get(owner, sandbox_id)
        return await self._restore(owner, sandbox_id, lambda: open(path, "rb"), metadata["sha256"])

    async def create_sandbox(self, owner: str, snapshot_id: str, **create: Any) -> Sandbox:
        """A new sandbox for ``owner`` (``create``: SandboxManager.create's keywords) whose
        /workspace holds the snapshot. If the restore fails, the new sandbox is removed."""
        # A missing (or memory) snapshot fails before anything starts.
        self._workspace_snapshot(owner, snapshot_id)
        sandbox = await self.manager.create(owner, **create)
        try:
            await self.hydrate(owner, snapshot_id, sandbox.sandbox_id)
        except BaseException:
            await asyncio.shield(self.manager.remove(owner, sandbox.sandbox_id))
            raise
        return sandbox

    # -- archives the caller keeps ------------------------------------------------------------

    async def persist_to_file(
        self, owner: str, sandbox_id: str, path: str | Path
    ) -> ArchiveSummary:
        """Write a checked archive of the sandbox's /workspace to ``path`` (atomically)."""
        await self.manager.get(owner, sandbox_id)
        with replaced_atomically(Path(path)) as out:
            return await self._archive(sandbox_id, out)

    async def persist_bytes(self, owner: str, sandbox_id: str) -> bytes:
        """A checked archive of the sandbox's /workspace, in memory (for small workspaces)."""
        await self.manager.get(owner, sandbox_id)
        out = io.BytesIO()
        await self._archive(sandbox_id, out)
        return out.getvalue()

    async def hydrate_bytes(self, owner: str, sandbox_id: str, data: bytes) -> ArchiveSummary:
        """Restore an archive held in memory into ``owner``'s running sandbox."""
        await self.manager.get(owner, sandbox_id)
        return await self._restore(owner, sandbox_id, lambda: io.BytesIO(data))

    async def hydrate_file(self, owner: str, sandbox_id: str, path: str | Path) -> ArchiveSummary:
        """Restore the archive at ``path`` into ``owner``'s running sandbox. It is copied to
        a private file first, so that it cannot change between its check and its restore."""
        await self.manager.get(owner, sandbox_id)
        with self._private_copy(owner, Path(path)) as copy:
            return await self._restore(owner, sandbox_id, lambda: open(copy, "rb"))

    # -- memory snapshots ---------------------------------------------------------------------

    async def checkpoint(
        self, owner: str, sandbox_id: str, *, leave_running: bool = False, note: str = ""
    ) -> dict[str, Any]:
        """A memory snapshot of the live kernel (memory.py); the sandbox stops unless
        ``leave_running``. Refused with MemorySnapshotUnsupportedError where it cannot work."""
        return await self.memory.checkpoint(
            owner, sandbox_id, leave_running=leave_running, note=note
        )

    async def restore_memory(self, owner: str, snapshot_id: str) -> Sandbox:
        """Bring a memory snapshot's sandbox back to that moment; returns it, kernel answering."""
        async with self._archive_turn(owner):
            return await self.memory.restore(owner, snapshot_id)

    # -- helpers ------------------------------------------------------------------------------

    def _workspace_snapshot(self, owner: str, snapshot_id: str) -> str:
        """``snapshot_id`` when it names a workspace snapshot; a memory one has no archive."""
        if self.get(owner, snapshot_id)["kind"] == "memory":
            raise InvalidRequestError(
                f"snapshot {snapshot_id} is a memory snapshot: it has no archive and restores "
                "only into its own sandbox (POST /api/snapshots/<id>/restore with no sandbox, "
                "or Snapshots.restore_memory)"
            )
        return snapshot_id

    @contextlib.contextmanager
    def _private_copy(self, owner: str, source: Path) -> Iterator[Path]:
        with self.store.new_archive(owner) as (out, temporary):
            with open(source, "rb") as f:
                copied = 0
                while chunk := f.read(1024**2):
                    copied += len(chunk)
                    if self.max_archive_bytes and copied > self.max_archive_bytes:
                        raise SnapshotTooLargeError(
                            f"{source} is larger than {self.max_archive_bytes} bytes "
                            "(Snapshots.max_archive_bytes)"
                        )
                    out.write(chunk)
            out.flush()
            try:
                yield temporary
            finally:
                temporary.unlink(missing_ok=True)

    async def _archive(self, sandbox_id: str, out: IO[bytes]) -> ArchiveSummary:
        return await archive_workspace(
            self.manager.backend,
            sandbox_id,
            out,
            limits=self.limits,
            timeout=self.timeout,
            io_dir=self._io_dir(sandbox_id),
        )

    def _archive_turn(self, owner: str) -> contextlib.AbstractAsyncContextManager[object]:
        """One of ``owner``'s turns of :attr:`archive_turns` while in the block (none without)."""
        if self.archive_turns is None:
            return contextlib.nullcontext()
        return self.archive_turns.slot(owner)

    async def _restore(
        self,
        owner: str,
        sandbox_id: str,
        open_archive: Callable[[], AbstractContextManager[IO[bytes]]],
        expected_sha256: str | None = None,
    ) -> ArchiveSummary:
        async with self._archive_turn(owner):
            return await hydrate_workspace(
                self.manager.backend,
                sandbox_id,
                open_archive,
                limits=self.limits,
                timeout=self.timeout,
                io_dir=self._io_dir(sandbox_id),
                expected_sha256=expected_sha256,
                workspace_bytes=self._workspace_cap(sandbox_id),
            )

    def _check_quota(self, owner: str) -> None:
        kept = len(self.store.list(owner))
        if self.max_snapshots and kept >= self.max_snapshots:
            raise QuotaExceededError(
                f"{owner} keeps {kept} snapshots, the most allowed (Snapshots.max_snapshots); "
                "delete some first"
            )

    def _io_dir(self, sandbox_id: str) -> Path | None:
        """The sandbox's host directory when archives pass through it (transport 'host-dir')."""
        if self.transport != "host-dir":
            return None
        return SandboxDirectory(self.manager.settings.state_path, sandbox_id).io

    def _workspace_cap(self, sandbox_id: str) -> int | None:
        """Bytes /workspace holds when it is a size-capped tmpfs (the sandbox has no launch
        directory); None when it shows a host directory."""
        state = self.manager.read_state(sandbox_id)
        if (state.get("workspace") or {}).get("mode", "none") != "none":
            return None
        limits = state.get("limits")
        if not limits:
            return None
        return SandboxLimits.parse(**limits).workspace_bytes
