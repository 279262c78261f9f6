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

import asyncio
import logging
import os
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.http1connection import HTTP1Connection
from tornado.iostream import StreamClosedError

from jupyter_sandbox.protocol.errors import InvalidRequestError, SandboxError
from jupyter_sandbox.server_extension.base import (
    SANDBOX_ID,
    JsonBodyHandler,
    SandboxAPIHandler,
    TurnHoldingHandler,
)
from jupyter_sandbox.server_extension.event_stream import EventStreamHandler

log = logging.getLogger(__name__)

MAKE_DIRECTORY = '{"type": "directory"}'
MOVE = '{"path": "results/final.csv", "overwrite": false}'


class SandboxFileAPIHandler(SandboxAPIHandler):
    def path_argument(self, default: str | None = None) -> str:
        """The query argument path, exactly as sent: tornado's get_query_argument would strip
        its spaces and turn its control characters into spaces, naming another file than the
        one asked for (a name may begin with a space). Given once, as UTF-8."""
        given = self.query_argument("path", default)
        if given is None:
            raise InvalidRequestError(
                "the query argument path is required: a path in the sandbox, relative to "
                "/workspace or absolute, e.g. ?path=results/out.csv"
            )
        return given


class SandboxFilesHandler(JsonBodyHandler, SandboxFileAPIHandler):
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
        body = await self.json_body()
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
        body = await self.json_body()
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
class SandboxFileContentHandler(TurnHoldingHandler, SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files/content?path=P``: a file's bytes, read or written whole.

    An upload's body is read only once its owner has a turn (``SandboxExtension.uploads``):
    read first, as tornado does by default, every upload an owner sent was held in the
    server's memory whole while it waited, so one owner's many uploads took memory and the
    network from every other's. Waiting in :meth:`prepare`, an upload's body stays unread in
    its connection (the client's sends stall) until the turn comes; at most the owner's share
    of bodies is read at once. A body larger than SandboxFiles.max_bytes is refused by its
    Content-Length before it is read, or as soon as it passes the cap.

    A download is streamed (:func:`send_file`) in one of its owner's turns
    (``SandboxExtension.downloads``): sent whole, every file read was held in the server's
    memory, twice at its peak, and then for as long as its client took to read it, forever for
    one that never did.
    """

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
        await self.take_turn(self.extension.uploads)

    def data_received(self, chunk: bytes) -> None:
        if not self.holding_turn:
            return  # not an upload with a turn (refused by put()): its bytes are not kept
        self._body += chunk
        self.manager.files.check_size(self._path, len(self._body))

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        path = self.path_argument()
        name = os.path.basename(path.rstrip("/")) or "file"
        # A download streams in one of its owner's turns: a client that reads slowly, or
        # not at all, holds one of that owner's turns, not another owner's.
        async with self.extension.downloads.slot(self.owner):
            if self._client_left:
                return  # left while waiting for the turn: nothing to read for it
            pieces = self.manager.files.read_stream(self.owner, sandbox_id, path)
            try:
                first = await anext(pieces, b"")  # an error found before any byte: an answer
                self.set_header("Content-Type", "application/octet-stream")
                # RFC 6266 / 5987: any file name, percent-encoded as UTF-8.
                self.set_header(
                    "Content-Disposition", f"attachment; filename*=UTF-8''{quote(name)}"
                )
                await send_file(self, first, pieces, self.manager.files.timeout)
            finally:
                await pieces.aclose()  # stops the read in the sandbox if it still runs

    @web.authenticated
    @authorized
    async def put(self, sandbox_id: str) -> None:
        data, self._body = bytes(self._body), bytearray()
        try:
            entry = await self.manager.files.write(self.owner, sandbox_id, self._path, data)
        finally:
            self.give_back_turn()
        self.write_json(entry)


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
        recursive = (self.query_argument("recursive", "false") or "").lower()
        if recursive not in RECURSIVE:
            raise InvalidRequestError(
                f"the query argument recursive must be true or false (1 or 0), not {recursive!r}"
            )
        events = self.manager.files.watch(self.owner, sandbox_id, path, RECURSIVE[recursive])
        await self.send_events(events, f"the watch of {path} in {sandbox_id}")


RECURSIVE = {"true": True, "1": True, "false": False, "0": False}


async def send_file(
    handler: web.RequestHandler, first: bytes, pieces: AsyncGenerator[bytes, None], seconds: float
) -> None:
    """Send a file's ``first`` piece and the rest of ``pieces`` (SandboxFiles.read_stream)
    as they come, each only once the one before went out to the client, so that a client
    that does not read makes the sandbox wait instead of the server holding the file; then
    finish. All of it within ``seconds`` (SandboxFiles.timeout, the read's own limit), or a
    client that never reads would hold its turn and its connection forever.

    An error once the answer has begun cannot be an answer any more: the connection is cut
    before the chunked body's end, so that the client sees an incomplete download rather
    than a shorter file.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds

    async def sent(piece: bytes) -> None:
        # Only the client is waited for here: the pieces come within the read's own limit.
        handler.write(piece)
        await asyncio.wait_for(handler.flush(), max(0.0, deadline - loop.time()))

    try:
        await sent(first)
        async for piece in pieces:
            await sent(piece)
    except StreamClosedError:
        log.info("the client left %s before the whole file was sent", handler.request.path)
        return
    except (SandboxError, asyncio.TimeoutError) as exc:
        why = exc.message if isinstance(exc, SandboxError) else f"not sent within {seconds:g}s"
        log.warning("download %s cut short: %s", handler.request.path, why)
        _cut(handler)
        return
    except BaseException:
        _cut(handler)  # whatever else ended it, never with an end that makes it look whole
        raise
    handler.finish()


def _cut(handler: web.RequestHandler) -> None:
    """Close the connection of an answer begun, before the chunked body's end: the client
    sees it incomplete."""
    if isinstance(handler.request.connection, HTTP1Connection):
        handler.request.connection.close()


file_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{SANDBOX_ID}/files/?", SandboxFilesHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/files/content/?", SandboxFileContentHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/files/info/?", SandboxFileInfoHandler),
    (rf"/api/sandboxes/{SANDBOX_ID}/files/watch/?", SandboxFileWatchHandler),
]
