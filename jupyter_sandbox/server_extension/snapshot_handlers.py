"""REST handlers of snapshots (documented in openapi.yaml beside this file).

* ``POST /api/sandboxes/{id}/snapshots``: store a snapshot of the sandbox's /workspace
  or, with ``{"kind": "memory"}``, checkpoint its live kernel (501 ``memory_snapshot_unsupported``
  where that cannot work; ``"leave_running": true`` keeps the sandbox running);
* ``GET /api/snapshots``: the user's snapshots; ``POST /api/snapshots``: import a tar (the
  request body: a plain tar, or gzip with ``?compression=gzip``), checked like any restore;
* ``GET`` / ``DELETE /api/snapshots/{id}``; ``GET /api/snapshots/{id}/download``: the tar;
* ``POST /api/snapshots/{id}/restore``: restore into a running sandbox (``{"sandbox": id}``);
  a memory snapshot restores its own sandbox (no body).

A new sandbox from a snapshot is ``POST /api/sandboxes`` with ``"snapshot": id`` (handlers.py).
Like every handler, each is ``@web.authenticated`` and ``@authorized`` (resource ``sandboxes``)
and another user's snapshot or sandbox is 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.utils import url_path_join
from tornado import web

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.sandbox.host.private_paths import make_private_dir
from jupyter_sandbox.sandbox.snapshots.service import KINDS
from jupyter_sandbox.sandbox.snapshots.storage import TEMP_PREFIX
from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    JsonBodyHandler,
    SandboxAPIHandler,
    TurnHoldingHandler,
    bound_body,
)

_SNAPSHOT_ID = r"(?P<snapshot_id>[^/]+)"
# Bytes read from the stored archive per write to the client.
DOWNLOAD_CHUNK = 1024**2


def snapshot_model(metadata: dict[str, Any]) -> dict[str, Any]:
    """The JSON of one snapshot (schema ``Snapshot``): its metadata, no host paths."""
    keys: tuple[str, ...] = (
        "id",
        "owner",
        "kind",
        "created",
        "source",
        "size",
        "sha256",
        "members",
    )
    if metadata.get("kind") == "memory":
        keys += ("checkpoint_seconds", "left_running")
    return {
        **{key: metadata.get(key) for key in keys},
        "file_bytes": metadata.get("file_bytes", 0),
        "note": metadata.get("note", ""),
    }


def _note(data: dict[str, Any]) -> str:
    note = data.get("note", "")
    if not isinstance(note, str) or len(note) > 200 or not note.isprintable():
        raise InvalidRequestError("note must be a printable string of at most 200 characters")
    return note


class SnapshotAPIHandler(SandboxAPIHandler):
    def archive_turn(self) -> contextlib.AbstractAsyncContextManager[str]:
        """A turn to move or scan an archive, shared fairly between owners: one owner's
        uploads wait for each other, not another owner's (SandboxExtension.max_archive_jobs)."""
        return self.extension.archive_jobs.slot(self.owner)

    def created(self, metadata: dict[str, Any]) -> None:
        location = url_path_join(self.base_url, "api/snapshots", metadata["id"])
        self.set_header("Location", location)
        self.write_json(snapshot_model(metadata), 201)


class SandboxSnapshotsHandler(JsonBodyHandler, SnapshotAPIHandler):
    """``/api/sandboxes/{id}/snapshots``: snapshot the sandbox's /workspace."""

    @web.authenticated
    @authorized
    async def post(self, sandbox_id: str) -> None:
        data = await self.json_body(allow_empty=True)
        unknown = sorted(set(data) - {"kind", "note", "leave_running"})
        if unknown:
            raise InvalidRequestError(
                f"unknown field(s) {', '.join(map(repr, unknown))} for a snapshot; known: kind, "
                "note, leave_running"
            )
        kind = data.get("kind", "workspace")
        if kind not in KINDS:
            raise InvalidRequestError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
        leave_running = data.get("leave_running", False)
        if not isinstance(leave_running, bool) or (leave_running and kind != "memory"):
            raise InvalidRequestError("leave_running is true or false, for kind 'memory' only")
        async with self.archive_turn():
            metadata = await self.manager.snapshots.persist(
                self.owner, sandbox_id, kind=kind, note=_note(data), leave_running=leave_running
            )
        self.created(metadata)


@web.stream_request_body
class SnapshotsHandler(TurnHoldingHandler, SnapshotAPIHandler):
    """``/api/snapshots``: list the user's snapshots; import a tar (the request body).

    An import's body is read only once its owner has an archive turn (``archive_turn``), and
    onto disk, not into memory: read first, as tornado does by default, every import an owner
    sent was held whole in the server's memory (up to Jupyter Server's max_body_size) while it
    waited for its turn. Waiting in :meth:`prepare`, its body stays unread in its connection
    (the client's sends stall) until the turn comes; it is then spooled, as it comes, to a
    temporary file beside the owner's snapshots, which the import reads. A body larger than an
    archive may be (Snapshots.max_archive_bytes) is refused by its Content-Length before it is
    read, or by tornado as it passes the cap.
    """

    _spool: IO[bytes] | None = None  # the body, as it comes
    _spool_path: Path | None = None
    _received = 0  # bytes of the body received
    _note_text = ""

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)
        if self.request.method != "POST" or self.current_user is None:
            return  # no body to keep; an anonymous POST is refused by post(), its body unkept
        self._note_text = _note({"note": self.query_argument("note", "")})  # refused unread
        cap = self.manager.snapshots.limits.max_bytes
        if cap:
            bound_body(self, cap, " (an imported archive: Snapshots.max_archive_bytes)")
        if not await self.take_turn(self.extension.archive_jobs):
            return  # the client left while it waited: the turn went to the next at once
        directory = self.manager.snapshots.store.owner_dir(self.owner)
        make_private_dir(directory)
        # A crashed server's spool is removed with the store's other stale temporaries.
        fd, name = tempfile.mkstemp(dir=directory, prefix=TEMP_PREFIX, suffix=".upload")
        self._spool, self._spool_path = os.fdopen(fd, "wb"), Path(name)

    def data_received(self, chunk: bytes) -> None:
        if self._spool is None:
            return  # not an import with a turn (refused by post()): its bytes are not kept
        self._spool.write(chunk)
        self._received += len(chunk)

    @web.authenticated
    @authorized
    async def get(self) -> None:
        snapshots = self.manager.snapshots.list_snapshots(self.owner)
        self.write_json([snapshot_model(m) for m in snapshots])

    @web.authenticated
    @authorized
    async def post(self) -> None:
        try:
            if not self._received or self._spool is None or self._spool_path is None:
                raise InvalidRequestError(
                    "the request body must be a tar archive (plain, or gzip with ?compression=gzip)"
                )
            self._spool.close()
            # Decompressed only when asked: a gzip body sent without it is refused, saying so.
            compression = self.query_argument("compression")
            metadata = await self.manager.snapshots.import_archive(
                self.owner, self._spool_path, note=self._note_text, compression=compression
            )
        finally:
            self._done()
        self.created(metadata)

    def on_finish(self) -> None:
        self._done()  # whatever ended the request: an error, a refusal
        super().on_finish()

    def on_connection_close(self) -> None:
        self._done()  # the client left, maybe before its whole body came
        super().on_connection_close()

    def _done(self) -> None:
        """Give the archive turn back and remove the spooled body, once."""
        if self._spool is not None:
            self._spool.close()
            self._spool = None
        if self._spool_path is not None:
            self._spool_path.unlink(missing_ok=True)
            self._spool_path = None
        self.give_back_turn()


class SnapshotHandler(SnapshotAPIHandler):
    """``/api/snapshots/{id}``: one snapshot's metadata; delete removes it."""

    @web.authenticated
    @authorized
    async def get(self, snapshot_id: str) -> None:
        self.write_json(snapshot_model(self.manager.snapshots.get(self.owner, snapshot_id)))

    @web.authenticated
    @authorized
    async def delete(self, snapshot_id: str) -> None:
        await self.manager.snapshots.delete(self.owner, snapshot_id)
        self.set_status(204)
        self.finish()


class SnapshotDownloadHandler(SnapshotAPIHandler):
    """``/api/snapshots/{id}/download``: the stored tar, streamed."""

    @web.authenticated
    @authorized
    async def get(self, snapshot_id: str) -> None:
        path = self.manager.snapshots.archive_path(self.owner, snapshot_id)
        # Opened before any byte is sent, so that a failure is still a JSON error; read on a
        # worker thread so that a large download never stalls the server's event loop.
        archive = await asyncio.to_thread(open, path, "rb")
        try:
            # An imported archive is kept as it was uploaded: plain tar, or gzip.
            gzip = await asyncio.to_thread(archive.read, 2) == b"\x1f\x8b"
            archive.seek(0)
            name = f"{snapshot_id}.tar.gz" if gzip else f"{snapshot_id}.tar"
            self.set_header("Content-Type", "application/gzip" if gzip else "application/x-tar")
            self.set_header("Content-Disposition", f'attachment; filename="{name}"')
            self.set_header("Content-Length", str(os.fstat(archive.fileno()).st_size))
            while chunk := await asyncio.to_thread(archive.read, DOWNLOAD_CHUNK):
                self.write(chunk)
                await self.flush()
        finally:
            archive.close()
        self.finish()


class SnapshotRestoreHandler(JsonBodyHandler, SnapshotAPIHandler):
    """``/api/snapshots/{id}/restore``: restore into a running sandbox of the user's; a memory
    snapshot restores its own sandbox (no body, or its id)."""

    @web.authenticated
    @authorized
    async def post(self, snapshot_id: str) -> None:
        snapshots = self.manager.snapshots
        data = await self.json_body(allow_empty=True)
        metadata = snapshots.get(self.owner, snapshot_id)
        if metadata["kind"] == "memory":
            await self._restore_memory(metadata, data)
            return
        sandbox_id = data.get("sandbox")
        if set(data) != {"sandbox"} or not isinstance(sandbox_id, str):
            raise InvalidRequestError('the body must be {"sandbox": "<sandbox id>"}')
        async with self.archive_turn():
            summary = await self.manager.snapshots.hydrate(self.owner, snapshot_id, sandbox_id)
        self.write_json(
            {
                "snapshot": snapshot_id,
                "sandbox": sandbox_id,
                "members": summary.members,
                "file_bytes": summary.file_bytes,
            }
        )

    async def _restore_memory(self, metadata: dict[str, Any], data: dict[str, Any]) -> None:
        snapshot_id, own = metadata["id"], metadata["source"]["sandbox"]
        if set(data) - {"sandbox"} or data.get("sandbox", own) != own:
            raise InvalidRequestError(
                f"memory snapshot {snapshot_id} restores only into its own sandbox {own}: send "
                'no body, or {"sandbox": "' + own + '"}'
            )
        async with self.archive_turn():
            sandbox = await self.manager.snapshots.restore_memory(self.owner, snapshot_id)
        self.write_json({"snapshot": snapshot_id, "sandbox": sandbox.sandbox_id})


snapshot_handlers = [
    (rf"/api/sandboxes/{SANDBOX_ID}/snapshots/?", SandboxSnapshotsHandler),
    (r"/api/snapshots/?", SnapshotsHandler),
    (rf"/api/snapshots/{_SNAPSHOT_ID}/?", SnapshotHandler),
    (rf"/api/snapshots/{_SNAPSHOT_ID}/download/?", SnapshotDownloadHandler),
    (rf"/api/snapshots/{_SNAPSHOT_ID}/restore/?", SnapshotRestoreHandler),
]
