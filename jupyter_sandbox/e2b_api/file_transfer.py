"""envd's ``/files``: a file's bytes read (GET ``?path=``) or written (POST: one
``application/octet-stream`` body for ``?path=``, or ``multipart/form-data`` whose parts are
named by their paths, as E2B's SDK sends several files at once), through the core's file
operations (sandbox/operations/files.py): written inside the sandbox as its user, within its limits, each
upload taking its turn among the owner's (SandboxExtension.max_uploads_per_owner).

An upload's body is read only in its owner's turn, and only up to :func:`max_upload_bytes`
(data_plane.py's E2BFilesHandler): it is then parsed here from memory, where its files must be
anyway to be written (SandboxFiles.write takes bytes), so spooling it to disk first would save
nothing but the parse's copy, and the turn already bounds how many are held at once."""

from __future__ import annotations

import os
from typing import Any

from tornado.httputil import HTTPFile, HTTPInputError, parse_body_arguments

from jupyter_sandbox.e2b_api.home import to_e2b, to_sandbox
from jupyter_sandbox.protocol.errors import InvalidRequestError, RequestTooLargeError

MAX_PARTS = 100  # files one multipart upload may hold: tornado refuses more first
MAX_PATH = 4096
# What a multipart body holds besides its files: a boundary and the headers of each of its
# parts, each naming a path of up to MAX_PATH characters.
MULTIPART_OVERHEAD = MAX_PARTS * (2 * MAX_PATH + 512)


def max_upload_bytes(max_file_bytes: int) -> int:
    """The most bytes one upload's body may hold, for files of at most ``max_file_bytes``
    (SandboxFiles.max_bytes; 0: no cap, and then none here either) in all."""
    return max_file_bytes + MULTIPART_OVERHEAD if max_file_bytes else 0


def check_upload_size(size: int, max_file_bytes: int) -> None:
    """RequestTooLargeError, saying what to do, if an upload's body of ``size`` bytes is
    past :func:`max_upload_bytes`."""
    cap = max_upload_bytes(max_file_bytes)
    if cap and size > cap:
        raise RequestTooLargeError(
            f"an upload holds at most {max_file_bytes} bytes of files in all "
            "(SandboxFiles.max_bytes): send fewer files a request, and move bigger data "
            "with a workspace snapshot"
        )


def uploads(content_type: str, body: bytes, path: str | None) -> list[tuple[str, bytes]]:
    """The (sandbox path, bytes) of each file an upload holds: ``body`` itself, or the parts
    of a multipart body (parsed by tornado within its own limits: at most 100 parts,
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
    parts: dict[str, list[HTTPFile]] = {}
    try:
        parse_body_arguments(content_type, body, {}, parts)
    except HTTPInputError as exc:
        raise InvalidRequestError(f"the multipart upload cannot be read: {exc}") from None
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
