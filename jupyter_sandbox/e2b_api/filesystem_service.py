"""envd's ``filesystem.Filesystem`` Connect service (unary calls: Stat, ListDir, MakeDir, Move,
Remove) on the core's file operations (sandbox/operations/files.py), which run inside the sandbox as its
user, never on the host's files. Entries are envd's ``EntryInfo`` in proto JSON, their paths
under E2B's home (home.py). WatchDir and the watcher calls are refused (unsupported): the
core's directory watch is on our own REST API (GET .../files/watch)."""

from __future__ import annotations

import datetime
from typing import Any

from jupyter_sandbox.e2b_api.connect_protocol import Message
from jupyter_sandbox.e2b_api.errors import E2BAlreadyExistsError, E2BUnsupportedError
from jupyter_sandbox.e2b_api.home import to_e2b, to_sandbox
from jupyter_sandbox.sandbox.manager import SandboxManager

FILE_TYPES = {
    "file": "FILE_TYPE_FILE",
    "directory": "FILE_TYPE_DIRECTORY",
    "symlink": "FILE_TYPE_SYMLINK",
}
MAX_PATH = 4096
METHODS = ("Stat", "ListDir", "MakeDir", "Move", "Remove")


def entry_info(entry: dict[str, Any]) -> dict[str, Any]:
    """envd's EntryInfo (proto JSON) for an entry of sandbox/operations/files.py."""
    mode = int(str(entry.get("mode", "0o0")), 8)
    modified = str(entry.get("modified", ""))
    info: dict[str, Any] = {
        "name": entry.get("name", ""),
        "type": FILE_TYPES.get(str(entry.get("type")), "FILE_TYPE_UNSPECIFIED"),
        "path": to_e2b(str(entry.get("path", ""))),
        "size": str(entry.get("size", 0)),  # int64: a string in proto JSON
        "mode": mode,
        "permissions": _permissions(mode, str(entry.get("type"))),
        "owner": "user",
        "group": "user",
    }
    if modified:
        stamp = datetime.datetime.fromisoformat(modified).astimezone(datetime.timezone.utc)
        info["modifiedTime"] = stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if entry.get("type") == "symlink":
        info["isSymlink"] = True
    return info


async def call(
    manager: SandboxManager, owner: str, sandbox_id: str, method: str, request: Message
) -> dict[str, Any]:
    """The response message of Filesystem/``method`` for ``request``."""
    files = manager.files
    if method == "Move":
        source = to_sandbox(request.string("source", limit=MAX_PATH))
        destination = to_sandbox(request.string("destination", limit=MAX_PATH))
        request.done()
        entry = await files.move(owner, sandbox_id, source, destination)
        return {"entry": entry_info(entry)}
    if method not in METHODS:
        raise E2BUnsupportedError(
            f"filesystem.Filesystem/{method} is not supported by jupyter-sandbox's E2B API "
            "(watch a directory with our REST API: GET /api/sandboxes/{id}/files/watch)"
        )
    path = to_sandbox(request.string("path", limit=MAX_PATH) or ".")
    if method == "ListDir":
        depth = request.integer("depth", default=1, high=1)
        request.done()
        if depth not in (0, 1):  # pragma: no cover - bounded above
            raise E2BUnsupportedError("ListDir lists one level: depth 1")
        listing = await files.list(owner, sandbox_id, path)
        return {"entries": [entry_info(entry) for entry in listing["entries"]]}
    request.done()
    if method == "Stat":
        return {"entry": entry_info(await files.info(owner, sandbox_id, path))}
    if method == "MakeDir":
        entry = await files.make_directory(owner, sandbox_id, path)
        if not entry.get("created", True):
            raise E2BAlreadyExistsError(f"directory {to_e2b(path)} already exists")
        return {"entry": entry_info(entry)}
    await files.remove(owner, sandbox_id, path)
    return {}


def _permissions(mode: int, kind: str) -> str:
    letters = "".join(
        char if mode & (1 << (8 - index)) else "-" for index, char in enumerate("rwxrwxrwx")
    )
    return ("d" if kind == "directory" else "l" if kind == "symlink" else "-") + letters
