"""envd's ``/files``: a file's bytes read (GET ``?path=``) or written (POST: one
``application/octet-stream`` body for ``?path=``, or ``multipart/form-data`` whose parts are
named by their paths, as E2B's SDK sends several files at once), through the core's file
operations (sandbox/operations/files.py): written inside the sandbox as its user, within its limits, each
upload taking its turn among the owner's (SandboxExtension.max_uploads_per_owner)."""

from __future__ import annotations

import os
from typing import Any

from tornado.httputil import HTTPFile

from jupyter_sandbox.e2b_api.home import to_e2b, to_sandbox
from jupyter_sandbox.protocol.errors import InvalidRequestError

MAX_PARTS = 100  # files one multipart upload may hold: tornado refuses more first
MAX_PATH = 4096


def uploads(
    content_type: str, body: bytes, parts: dict[str, list[HTTPFile]], path: str | None
) -> list[tuple[str, bytes]]:
    """The (sandbox path, bytes) of each file an upload holds: ``body`` itself, or the
    ``parts`` tornado parsed from a multipart body (within its own limits: at most 100 parts,
    tornado.httputil.ParseMultipartConfig)."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/octet-stream":
        if not path:
            raise InvalidRequestError("an octet-stream upload needs ?path=FILE")
        return [(to_sandbox(path), body)]
    if kind != "multipart/form-data":
        raise InvalidRequestError(
            "upload a file as application/octet-stream with ?path=FILE, or as "
            "multipart/form-data with a part a file"
        )
    found = [part for named in parts.values() for part in named]
    if not found:
        raise InvalidRequestError("the multipart upload holds no file part")
    if len(found) > MAX_PARTS:
        raise InvalidRequestError(f"one upload may hold at most {MAX_PARTS} files")
    if len(found) == 1 and path:
        return [(to_sandbox(path), found[0].body)]
    named = []
    for part in found:
        if not part.filename or len(part.filename) > MAX_PATH:
            raise InvalidRequestError("each file part must be named by its path (filename=)")
        named.append((to_sandbox(part.filename), part.body))
    return named


def write_info(entry: dict[str, Any]) -> dict[str, Any]:
    """envd's answer for one written file."""
    path = to_e2b(str(entry.get("path", "")))
    return {"name": os.path.basename(path), "type": "file", "path": path}
