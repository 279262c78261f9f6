"""REST handlers of the files in a running sandbox (documented in openapi.yaml beside this file).

* ``GET /api/sandboxes/{id}/files?path=P``: the entries of directory P (default /workspace);
* ``PUT /api/sandboxes/{id}/files?path=P`` ``{"type": "directory"}``: make directory P, with its
  missing parents (as Jupyter's contents API makes one: ``PUT`` with the type);
* ``PATCH /api/sandboxes/{id}/files?path=P`` ``{"path": NEW, "overwrite": false}``: move P to
  NEW (as the contents API renames: ``PATCH`` with the new path);
* ``DELETE /api/sandboxes/{id}/files?path=P``: remove P (a directory with all it holds);
* ``GET /api/sandboxes/{id}/files/info?path=P``: the entry of P itself;
* ``GET /api/sandboxes/{id}/files/content?path=P``: the bytes of file P;
* ``PUT /api/sandboxes/{id}/files/content?path=P``: write the request body to P whole;
* ``GET /api/sandboxes/{id}/files/watch?path=P&recursive=false``: the changes in directory P as
  they come, as Server-Sent Events (sandbox/operations/file_watch.py), until the client leaves.

Paths are the sandbox's own, relative to /workspace or absolute; every operation runs inside
the sandbox as its user (sandbox/operations/files.py), never on the host's files. This is how a file a
notebook wrote under ``copy-on-write`` (which never reaches the host's directory) is fetched.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_sandbox.protocol.errors import InvalidRequestError
from jupyter_sandbox.protocol.requests import json_object
from jupyter_sandbox.server_extension.base import SANDBOX_ID, SandboxAPIHandler
from jupyter_sandbox.server_extension.event_stream import EventStreamHandler

MAKE_DIRECTORY = '{"type": "directory"}'
MOVE = '{"path": "results/final.csv", "overwrite": false}'


class SandboxFileAPIHandler(SandboxAPIHandler):
    def path_argument(self, default: str | None = None) -> str:
        """The query argument path, exactly as sent: tornado's get_query_argument would strip
        its spaces and turn its control characters into spaces, naming another file than the
        one asked for (a name may begin with a space). Given once, as UTF-8."""
        given = self.request.query_arguments.get("path", [])
        if len(given) > 1:
            raise InvalidRequestError(
                f"the query argument path is given {len(given)} times: give it once"
            )
        if not given:
            if default is None:
                raise InvalidRequestError(
                    "the query argument path is required: a path in the sandbox, relative to "
                    "/workspace or absolute, e.g. ?path=results/out.csv"
                )
            return default
        try:
            return given[0].decode()
        except UnicodeDecodeError:
            raise InvalidRequestError(
                "the query argument path is not UTF-8: percent-encode the path's UTF-8 bytes"
            ) from None


class SandboxFilesHandler(SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files?path=P``: list a directory; put makes directory P, patch
    moves P, delete removes it."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        path = self.path_argument(".")
        self.write_json(await self.manager.files.list(self.owner, sandbox_id, path))

    @web.authenticated
    @authorized
    async def put(self, sandbox_id: str) -> None:
        path = self.path_argument()
        body = json_object(self.request.body)
        if body != {"type": "directory"}:
            raise InvalidRequestError(
                f"the body must be {MAKE_DIRECTORY}: this route makes directories; a file is "
                "written with PUT /api/sandboxes/{id}/files/content?path=P"
            )
        entry = await self.manager.files.make_directory(self.owner, sandbox_id, path)
        self.write_json(entry, status=201 if entry.get("created") else 200)

    @web.authenticated
    @authorized
    async def patch(self, sandbox_id: str) -> None:
        path = self.path_argument()
        body = json_object(self.request.body)
        unknown = sorted(set(body) - {"path", "overwrite"})
        target, overwrite = body.get("path"), body.get("overwrite", False)
        if unknown or not isinstance(target, str) or not isinstance(overwrite, bool):
            raise InvalidRequestError(
                f"the body must name where to move {path}: {MOVE} (path: the new path, relative "
                "to /workspace or absolute; overwrite: replace what is there, default false)"
            )
        entry = await self.manager.files.move(self.owner, sandbox_id, path, target, overwrite)
        self.write_json(entry)

    @web.authenticated
    @authorized
    async def delete(self, sandbox_id: str) -> None:
        await self.manager.files.remove(self.owner, sandbox_id, self.path_argument())
        self.set_status(204)
        self.finish()


@web.stream_request_body
class SandboxFileContentHandler(SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files/content?path=P``: a file's bytes, read or written whole.

    An upload's body is read only once its owner has a turn (``SandboxExtension.uploads``):
    read first, as tornado does by default, every upload an owner sent was held in the
    server's memory whole while it waited, so one owner's many uploads took memory and the
    network from every other's. Waiting in :meth:`prepare`, an upload's body stays unread in
    its connection (the client's sends stall) until the turn comes; at most the owner's share
    of bodies is read at once. A body larger than SandboxFiles.max_bytes is refused by its
    Content-Length before it is read, or as soon as it passes the cap.
    """

    _turn: str | None = None  # the owner whose upload turn this request holds, if any
    _path = ""

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        await super().prepare(*args, **kwargs)
        self._body = bytearray()
        if self.request.method != "PUT" or self.current_user is None:
            return  # no body to wait for; an anonymous PUT is refused by put(), body unkept
        self._path = self.path_argument()
        declared = self.request.headers.get("Content-Length", "")
        if declared.isascii() and declared.isdigit():
            self.manager.files.check_size(self._path, int(declared))
        self._turn = await self.extension.uploads.acquire(self.owner)

    def data_received(self, chunk: bytes) -> None:
        if self._turn is None:
            return  # not an upload with a turn (refused by put()): its bytes are not kept
        self._body += chunk
        self.manager.files.check_size(self._path, len(self._body))

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        path = self.path_argument()
        data = await self.manager.files.read(self.owner, sandbox_id, path)
        name = os.path.basename(path.rstrip("/")) or "file"
        self.set_header("Content-Type", "application/octet-stream")
        # RFC 6266 / 5987: any file name, percent-encoded as UTF-8.
        self.set_header("Content-Disposition", f"attachment; filename*=UTF-8''{quote(name)}")
        self.finish(data)

    @web.authenticated
    @authorized
    async def put(self, sandbox_id: str) -> None:
        data, self._body = bytes(self._body), bytearray()
        try:
            entry = await self.manager.files.write(self.owner, sandbox_id, self._path, data)
        finally:
            self._give_back_turn()
        self.write_json(entry)

    def on_finish(self) -> None:
        self._give_back_turn()  # whatever ended the request: an error, a refusal
        super().on_finish()

    def on_connection_close(self) -> None:
        self._give_back_turn()  # the client left, maybe before its whole body came
        super().on_connection_close()

    def _give_back_turn(self) -> None:
        if self._turn is not None:
            self.extension.uploads.release(self._turn)
            self._turn = None


class SandboxFileInfoHandler(SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files/info?path=P``: the entry of P itself (404: nothing there)."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        path = self.path_argument()
        self.write_json(await self.manager.files.info(self.owner, sandbox_id, path))


class SandboxFileWatchHandler(EventStreamHandler, SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files/watch?path=P&recursive=false``: ready, then a change event
    each as it is seen (a ping after 15 s without one), until the client closes the
    connection, which stops the watcher in the sandbox; error if the watch ends on its own."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        path = self.path_argument(".")
        recursive = self.get_query_argument("recursive", "false").lower()
        if recursive not in RECURSIVE:
            raise InvalidRequestError(
                f"the query argument recursive must be true or false (1 or 0), not {recursive!r}"
            )
        events = self.manager.files.watch(self.owner, sandbox_id, path, RECURSIVE[recursive])
        await self.send_events(events, f"the watch of {path} in {sandbox_id}")


RECURSIVE = {"true": True, "1": True, "false": False, "0": False}

file_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/files/?", SandboxFilesHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/files/content/?", SandboxFileContentHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/files/info/?", SandboxFileInfoHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/files/watch/?", SandboxFileWatchHandler),
]
