"""Snapshots: the one entry point for the REST API, the CLI and agent code.

Every method takes the ``owner`` first and checks it: another owner's sandbox or snapshot is
"not found". Stored snapshots (SnapshotStore) are made by :meth:`Snapshots.persist` and
:meth:`Snapshots.import_archive`, restored by :meth:`Snapshots.hydrate` (into a running sandbox,
the same one or another) or :meth:`Snapshots.create_sandbox` (into a new one). Agent code that
keeps archives itself uses :meth:`Snapshots.persist_to_file` / :meth:`Snapshots.persist_bytes`
and :meth:`Snapshots.hydrate_file` / :meth:`Snapshots.hydrate_bytes`. Memory snapshots are
refused up front (memory.py).

Usage (agent code)::

    manager = SandboxManager.from_config()
    snapshot = await manager.snapshots.persist(owner, sandbox_id)
    sandbox = await manager.snapshots.create_sandbox(owner, snapshot["id"])
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from jupyter_core.paths import jupyter_data_dir
from traitlets import Bool, Enum, Float, Integer, Unicode, default
from traitlets.config import LoggingConfigurable

from ..backend import SandboxInfo
from ..errors import QuotaExceededError
from ..hostdir import SandboxDirectory
from ..limits import SandboxLimits
from ..sandbox_types import Sandbox
from .archive_scan import ArchiveLimits, ArchiveSummary, scan_archive
from .errors import SnapshotTooLargeError
from .hydrate import hydrate_workspace
from .memory import memory_snapshot_refusal
from .persist import archive_workspace
from .storage import SnapshotStore, new_snapshot_id

if TYPE_CHECKING:
    from ..manager import SandboxManager

KINDS = ("workspace", "memory")


class Snapshots(LoggingConfigurable):
    """Workspace snapshots of ``manager``'s sandboxes (configured as ``c.Snapshots.*``)."""

    snapshot_dir = Unicode(
        config=True,
        help="""Host directory of stored snapshots: one 0700 directory per owner inside.
        Default: <jupyter data dir>/sandbox-snapshots (snapshots outlive the sandboxes and the
        server, unlike the runtime directory that holds the sandboxes' state).""",
    )
    max_archive_bytes = Integer(
        2 * 1024**3,
        config=True,
        help="""Largest snapshot archive in bytes, made or uploaded (0: no cap). A persist
        whose archive grows past it is stopped and nothing is stored.""",
    )
    max_members = Integer(
        100_000,
        config=True,
        help="Most files, directories and links one archive may hold (0: no cap).",
    )
    max_expanded_bytes = Integer(
        4 * 1024**3,
        config=True,
        help="""Most bytes the members of one archive may declare in all, headers included
        (0: no cap). Checked from each header before its data is read, so an archive
        declaring a huge file is refused at once.""",
    )
    allow_external_symlinks = Bool(
        False,
        config=True,
        help="""Accept symlinks whose target leaves /workspace (an absolute path, or '..'
        past the root), e.g. a virtualenv's bin/python. They are restored as they are and
        resolve only inside the sandbox; members under any symlink stay refused. False
        (strict): such an archive is refused, naming the link.""",
    )
    max_snapshots = Integer(
        100,
        config=True,
        help="""Most snapshots one owner may keep (0: no cap). A persist or import past it is
        refused (quota_exceeded) before the sandbox is touched; delete old snapshots first.""",
    )
    transport = Enum(
        ("host-dir", "exec"),
        default_value="host-dir",
        config=True,
        help="""How archives move between a sandbox and the host. 'host-dir': tar in the
        sandbox writes to (or reads from) the sandbox's own host directory, its /run/sandbox
        bind mount, and the host copies from (or writes to) it with O_NOFOLLOW/O_EXCL; this
        needs up to max_archive_bytes of temporary space on the state directory's disk. 'exec':
        streamed over the engine's exec socket, nothing written outside the snapshot
        directory, but 2-4x slower (every byte crosses a pipe in dockerd and, under gVisor,
        gVisor's slow pipes). Both check every member on the host and unpack inside the
        sandbox.""",
    )
    timeout = Float(
        600.0,
        config=True,
        help="Seconds one persist or restore (the tar inside the sandbox) may take.",
    )

    @default("snapshot_dir")
    def _default_snapshot_dir(self) -> str:
        return os.path.join(jupyter_data_dir(), "sandbox-snapshots")

    def __init__(self, manager: SandboxManager, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.manager = manager

    @property
    def store(self) -> SnapshotStore:
        return SnapshotStore(Path(self.snapshot_dir))

    @property
    def limits(self) -> ArchiveLimits:
        return ArchiveLimits(
            max_bytes=self.max_archive_bytes,
            max_members=self.max_members,
            max_expanded_bytes=self.max_expanded_bytes,
            allow_external_links=self.allow_external_symlinks,
        )

    # -- stored snapshots ---------------------------------------------------------------------

    async def persist(
        self, owner: str, sandbox_id: str, *, kind: str = "workspace", note: str = ""
    ) -> dict[str, Any]:
        """Store a snapshot of ``owner``'s sandbox; returns its metadata.

        ``kind`` 'memory' (the live kernel) is refused with MemorySnapshotUnsupportedError,
        before the sandbox is touched.
        """
        info = await self.manager.get(owner, sandbox_id)
        if kind == "memory":
            raise memory_snapshot_refusal(sandbox_id, info.runtime)
        self._check_quota(owner)
        store = self.store
        with store.new_archive(owner) as (out, temporary):
            summary = await archive_workspace(
                self.manager.backend,
                sandbox_id,
                out,
                limits=self.limits,
                timeout=self.timeout,
                io_dir=self._io_dir(sandbox_id),
            )
            return store.commit(owner, temporary, self._metadata(summary, info, note))

    async def import_archive(
        self, owner: str, source: bytes | str | Path, *, note: str = ""
    ) -> dict[str, Any]:
        """Store an archive made elsewhere (bytes, or a file path), checked like any restore."""
        self._check_quota(owner)
        store = self.store
        limits = self.limits

        def copy_and_scan(out: IO[bytes]) -> ArchiveSummary:
            if isinstance(source, bytes):
                out.write(source)
            else:
                with open(source, "rb") as f:
                    shutil.copyfileobj(f, out, 1024**2)
            out.flush()
            out.seek(0)
            return scan_archive(out, limits)

        with store.new_archive(owner) as (out, temporary):
            summary = await asyncio.to_thread(copy_and_scan, out)
            return store.commit(owner, temporary, self._metadata(summary, None, note))

    def list_snapshots(self, owner: str) -> list[dict[str, Any]]:
        return self.store.list(owner)

    def get(self, owner: str, snapshot_id: str) -> dict[str, Any]:
        return self.store.metadata(owner, snapshot_id)

    def archive_path(self, owner: str, snapshot_id: str) -> Path:
        """The stored archive (for a download); SnapshotNotFoundError for another owner's."""
        return self.store.archive_path(owner, snapshot_id)

    def delete(self, owner: str, snapshot_id: str) -> None:
        self.store.delete(owner, snapshot_id)

    async def hydrate(self, owner: str, snapshot_id: str, sandbox_id: str) -> ArchiveSummary:
        """Restore ``owner``'s snapshot into ``owner``'s running sandbox (its own or another).

        Files of the snapshot are written over the sandbox's; other files stay.
        """
        metadata = self.get(owner, snapshot_id)
        path = self.store.archive_path(owner, snapshot_id)
        await self.manager.get(owner, sandbox_id)
        return await hydrate_workspace(
            self.manager.backend,
            sandbox_id,
            lambda: open(path, "rb"),
            limits=self.limits,
            timeout=self.timeout,
            io_dir=self._io_dir(sandbox_id),
            expected_sha256=metadata["sha256"],
            workspace_bytes=self._workspace_cap(sandbox_id),
        )

    async def create_sandbox(self, owner: str, snapshot_id: str, **create: Any) -> Sandbox:
        """A new sandbox for ``owner`` (``create``: SandboxManager.create's keywords) whose
        /workspace holds the snapshot. If the restore fails, the new sandbox is removed."""
        self.get(owner, snapshot_id)  # a missing snapshot fails before anything starts
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
        target = Path(path)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w+b") as out:
                summary = await archive_workspace(
                    self.manager.backend,
                    sandbox_id,
                    out,
                    limits=self.limits,
                    timeout=self.timeout,
                    io_dir=self._io_dir(sandbox_id),
                )
            os.replace(name, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)
            raise
        return summary

    async def persist_bytes(self, owner: str, sandbox_id: str) -> bytes:
        """A checked archive of the sandbox's /workspace, in memory (for small workspaces)."""
        await self.manager.get(owner, sandbox_id)
        out = io.BytesIO()
        await archive_workspace(
            self.manager.backend,
            sandbox_id,
            out,
            limits=self.limits,
            timeout=self.timeout,
            io_dir=self._io_dir(sandbox_id),
        )
        return out.getvalue()

    async def hydrate_bytes(self, owner: str, sandbox_id: str, data: bytes) -> ArchiveSummary:
        """Restore an archive held in memory into ``owner``'s running sandbox."""
        await self.manager.get(owner, sandbox_id)
        return await hydrate_workspace(
            self.manager.backend,
            sandbox_id,
            lambda: io.BytesIO(data),
            limits=self.limits,
            timeout=self.timeout,
            io_dir=self._io_dir(sandbox_id),
            workspace_bytes=self._workspace_cap(sandbox_id),
        )

    async def hydrate_file(self, owner: str, sandbox_id: str, path: str | Path) -> ArchiveSummary:
        """Restore the archive at ``path`` into ``owner``'s running sandbox. It is copied to
        a private file first, so that it cannot change between its check and its restore."""
        await self.manager.get(owner, sandbox_id)
        with self._private_copy(owner, Path(path)) as copy:
            return await hydrate_workspace(
                self.manager.backend,
                sandbox_id,
                lambda: open(copy, "rb"),
                limits=self.limits,
                timeout=self.timeout,
                io_dir=self._io_dir(sandbox_id),
                workspace_bytes=self._workspace_cap(sandbox_id),
            )

    # -- memory snapshots ---------------------------------------------------------------------

    async def checkpoint(self, owner: str, sandbox_id: str) -> None:
        """A memory snapshot of the live kernel: always refused here (see memory.py)."""
        info = await self.manager.get(owner, sandbox_id)
        raise memory_snapshot_refusal(sandbox_id, info.runtime)

    # -- helpers ------------------------------------------------------------------------------

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

    @staticmethod
    def _metadata(summary: ArchiveSummary, info: SandboxInfo | None, note: str) -> dict[str, Any]:
        return {
            "id": new_snapshot_id(),
            "kind": "workspace",
            # Microseconds: listings sort by it, and two snapshots often share a second.
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "source": {
                "sandbox": info.sandbox_id if info else None,
                "image": info.image if info else None,
                "runtime": info.runtime if info else None,
            },
            "size": summary.size,
            "sha256": summary.sha256,
            "members": summary.members,
            "file_bytes": summary.file_bytes,
            "note": note[:200],
        }
