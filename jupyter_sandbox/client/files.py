"""Files in a sandbox, as its own code sees them: ``/api/sandboxes/{id}/files`` and
``.../files/content``. Each operation runs inside the sandbox as its user, so it reaches what
the sandbox's code can and nothing of the host's; under copy-on-write, this is how a file the
code wrote is fetched.

Agent code reaches it as ``sandbox.files`` (:class:`~jupyter_sandbox.client.Sandbox` makes
one). Relative paths start at ``/workspace``. A file passes whole through the server's memory,
at most ``SandboxFiles.max_bytes`` (100 MiB by default: FileTooLargeError past it).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable

from jupyter_sandbox.client.errors import SandboxFileNotFoundError
from jupyter_sandbox.client.file_entry import FileEntry
from jupyter_sandbox.client.file_watch import DirectoryWatch, FileChange, WatchHandle
from jupyter_sandbox.client.transport import Transport

__all__ = ["FileEntry", "SandboxFiles"]


class SandboxFiles:
    """The files of one sandbox (``sandbox.files``): read, write, list, look up, make
    directories, move, remove, watch a directory for changes."""

    def __init__(self, transport: Transport, sandbox_id: str) -> None:
        self._transport = transport
        self.sandbox_id = sandbox_id

    def __repr__(self) -> str:
        return f"SandboxFiles({self.sandbox_id!r})"

    def _route(self, *rest: str) -> tuple[str, ...]:
        return ("sandboxes", self.sandbox_id, "files", *rest)

    def read(self, path: str, max_bytes: int | None = None) -> bytes:
        """The bytes of the file at ``path``, whole (SandboxFileNotFoundError if none); with
        ``max_bytes``, FileTooLargeError for a larger file, of which no more than that is read
        into this process's memory."""
        route = self._route("content")
        return self._transport.read_bytes(*route, query=[("path", path)], limit=max_bytes)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The file at ``path``, decoded."""
        return self.read(path).decode(encoding)

    def write(self, path: str, data: bytes | str) -> FileEntry:
        """Write ``data`` (a str as UTF-8) to the file at ``path``, whole: missing parent
        directories are made, a file already there is replaced (keeping its mode) by a rename,
        so no reader sees half of it. Its entry as written."""
        content = data.encode() if isinstance(data, str) else bytes(data)
        answer = self._transport.send_bytes(
            "PUT", *self._route("content"), data=content, query=[("path", path)]
        )
        return FileEntry.from_answer(answer)

    def list(self, path: str = "/workspace") -> builtins.list[FileEntry]:
        """The entries of the directory at ``path``, sorted by name."""
        answer = self._transport.call("GET", *self._route(), query=[("path", path)])
        return [FileEntry.from_answer(entry) for entry in answer["entries"]]

    def info(self, path: str) -> FileEntry:
        """The entry of ``path`` itself (a symlink is not followed); SandboxFileNotFoundError
        when there is nothing there."""
        return FileEntry.from_answer(
            self._transport.call("GET", *self._route("info"), query=[("path", path)])
        )

    def exists(self, path: str) -> bool:
        """Whether anything (a file, directory, symlink, ...) is at ``path``."""
        try:
            self.info(path)
        except SandboxFileNotFoundError:
            return False
        return True

    def make_dir(self, path: str) -> FileEntry:
        """Make the directory ``path`` with its missing parents (one already there is
        fine); SandboxFileExistsError when a file is there."""
        body = {"type": "directory"}
        answer = self._transport.call("PUT", *self._route(), body=body, query=[("path", path)])
        return FileEntry.from_answer(answer)

    def move(self, path: str, target: str, overwrite: bool = False) -> FileEntry:
        """Move (rename) ``path`` to ``target``, made with its missing parents; the entry at
        ``target``. SandboxFileExistsError when something is there already, unless
        ``overwrite`` (a file, or an empty directory, is then replaced)."""
        body = {"path": target, "overwrite": overwrite}
        answer = self._transport.call("PATCH", *self._route(), body=body, query=[("path", path)])
        return FileEntry.from_answer(answer)

    def remove(self, path: str) -> None:
        """Remove the file, link or directory (with all it holds) at ``path``; not
        /workspace itself."""
        self._transport.call("DELETE", *self._route(), query=[("path", path)])

    def watch(self, path: str = ".", recursive: bool = False) -> DirectoryWatch:
        """Watch the directory ``path`` (with what is under its subdirectories if
        ``recursive``): an iterator of FileChange as they happen, from the moment this
        returns, until it is closed (``close()``, or use it in a ``with`` block). A change is
        seen within about 0.2 s; SandboxFileNotFoundError if there is no such directory."""
        return DirectoryWatch(self._transport, self.sandbox_id, path, recursive)

    def watch_dir(
        self,
        path: str,
        on_event: Callable[[FileChange], object],
        recursive: bool = False,
        on_exit: Callable[[BaseException | None], object] | None = None,
    ) -> WatchHandle:
        """As E2B's ``watch_dir``: call ``on_event`` with each change under ``path`` on a
        thread of its own, until the handle's ``stop()``; ``on_exit`` is called with the error
        that ended the watch, if it ended on its own (None after ``stop()``)."""
        return WatchHandle(self.watch(path, recursive), on_event, on_exit)
