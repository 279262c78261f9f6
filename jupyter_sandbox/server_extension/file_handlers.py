"""REST handlers of the files in a running sandbox (documented in openapi.yaml beside this file).

* ``GET /api/sandboxes/{id}/files?path=P``: the entries of directory P (default /workspace);
* ``DELETE /api/sandboxes/{id}/files?path=P``: remove P (a directory with all it holds);
* ``GET /api/sandboxes/{id}/files/content?path=P``: the bytes of file P;
* ``PUT /api/sandboxes/{id}/files/content?path=P``: write the request body to P whole.

Paths are the sandbox's own, relative to /workspace or absolute; every operation runs inside
the sandbox as its user (sandbox/files.py), never on the host's files. This is how a file a
notebook wrote under ``copy-on-write`` (which never reaches the host's directory) is fetched.
"""

from __future__ import annotations

import os
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..sandbox.errors import InvalidRequestError
from .handlers import _ID, SandboxAPIHandler


class SandboxFileAPIHandler(SandboxAPIHandler):
    def path_argument(self, default: str | None = None) -> str:
        path = self.get_query_argument("path", default)
        if path is None:
            raise InvalidRequestError(
                "the query argument path is required: a path in the sandbox, relative to "
                "/workspace or absolute, e.g. ?path=results/out.csv"
            )
        return path


class SandboxFilesHandler(SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files?path=P``: list a directory; delete removes P."""

    @web.authenticated
    @authorized
    async def get(self, sandbox_id: str) -> None:
        path = self.path_argument(".")
        self.write_json(await self.manager.files.list(self.owner, sandbox_id, path))

    @web.authenticated
    @authorized
    async def delete(self, sandbox_id: str) -> None:
        await self.manager.files.remove(self.owner, sandbox_id, self.path_argument())
        self.set_status(204)
        self.finish()


class SandboxFileContentHandler(SandboxFileAPIHandler):
    """``/api/sandboxes/{id}/files/content?path=P``: a file's bytes, read or written whole."""

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
        path = self.path_argument()
        entry = await self.manager.files.write(self.owner, sandbox_id, path, self.request.body)
        self.write_json(entry)


file_handlers: list[tuple[str, type[SandboxAPIHandler]]] = [
    (rf"/api/sandboxes/{_ID}/files/?", SandboxFilesHandler),
    (rf"/api/sandboxes/{_ID}/files/content/?", SandboxFileContentHandler),
]
