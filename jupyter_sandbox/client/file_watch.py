"""A directory in a sandbox watched for changes: ``sandbox.files.watch(path)`` and, as E2B's
``sandbox.files.watch_dir(path, on_event)`` offers, ``watch_dir`` calling a function for each
change on a thread of its own (``GET /api/sandboxes/{id}/files/watch``).

The server streams the changes as it sees them (a program in the sandbox looks at the directory
every 0.2 s by default); a watch lasts until it is stopped, which closes the connection and so
stops the watcher in the sandbox. A watch that ends on its own (its directory removed, the
sandbox stopped) raises the error that ended it from the iteration, as the server's error.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from jupyter_sandbox.client.errors import SandboxError, error_from_answer
from jupyter_sandbox.client.events import ServerEvent
from jupyter_sandbox.client.file_entry import FileEntry
from jupyter_sandbox.client.transport import Transport


@dataclass(frozen=True)
class FileChange:
    """One change: ``type`` is created, modified or removed, ``path`` absolute in the sandbox,
    ``entry`` what is there now (None after a removal). A rename is the old path's removal,
    then the new one's creation."""

    type: str
    path: str
    entry: FileEntry | None

    @classmethod
    def from_answer(cls, answer: dict[str, Any]) -> FileChange:
        entry = answer.get("entry")
        return cls(
            type=answer["type"],
            path=answer["path"],
            entry=None if entry is None else FileEntry.from_answer(entry),
        )


class DirectoryWatch:
    """The changes under a directory, as they come (iterate it), until :meth:`close` (or the
    end of a ``with`` block). Made once the server has taken the directory's first look, so
    every change after the constructor returned is reported; an error before (a missing
    directory: SandboxFileNotFoundError) is raised by the constructor."""

    def __init__(self, transport: Transport, sandbox_id: str, path: str, recursive: bool) -> None:
        self.sandbox_id = sandbox_id
        self._response: http.client.HTTPResponse | None = None
        self._closed = False
        query = [("path", path), ("recursive", "true" if recursive else "false")]
        self._events: Generator[ServerEvent, None, None] = transport.events(
            "sandboxes", sandbox_id, "files", "watch", query=query, opened=self._opened
        )
        ready = next(self._events)  # the error answer, if any, is raised here
        self.path: str = ready.data.get("path", path)  # the directory, absolute

    def _opened(self, response: http.client.HTTPResponse) -> None:
        self._response = response

    def __iter__(self) -> Iterator[FileChange]:
        return self

    def __next__(self) -> FileChange:
        try:
            for event in self._events:
                if event.name == "change":
                    return FileChange.from_answer(event.data)
                if event.name == "error":
                    raise error_from_answer(
                        None, event.data, f"watching {self.path} in {self.sandbox_id}"
                    )
        except SandboxError:
            if self._closed:  # the connection was cut by close(), from another thread
                raise StopIteration from None
            raise
        raise StopIteration

    def close(self) -> None:
        """Stop watching (the server stops the watcher in the sandbox). From any thread: a
        thread waiting for the next change gets StopIteration."""
        self._closed = True
        if self._response is not None:  # wakes a reader blocked on the socket
            with contextlib.suppress(OSError, AttributeError):
                raw: Any = self._response.fp.raw
                raw._sock.shutdown(socket.SHUT_RDWR)  # the SocketIO's socket
        with contextlib.suppress(ValueError):  # ValueError: it is being read on another thread
            self._events.close()

    def __enter__(self) -> DirectoryWatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class WatchHandle:
    """A watch calling ``on_event`` for each change on a daemon thread (what ``watch_dir``
    returns); :meth:`stop` ends it. If the watch ends on its own, or ``on_event`` raises,
    ``error`` holds why; ``on_exit`` is called with it (None after stop) when the thread ends."""

    def __init__(
        self,
        watch: DirectoryWatch,
        on_event: Callable[[FileChange], object],
        on_exit: Callable[[BaseException | None], object] | None = None,
    ) -> None:
        self.watch = watch
        self.error: BaseException | None = None
        self._on_event = on_event
        self._on_exit = on_exit
        self._thread = threading.Thread(
            target=self._run, name=f"watch {watch.path} in {watch.sandbox_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            for change in self.watch:
                self._on_event(change)
        except Exception as error:  # the caller's function's too: kept for it
            self.error = error
        finally:
            self.watch.close()
            if self._on_exit is not None:
                self._on_exit(self.error)

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the watch and wait (at most ``timeout`` seconds) for its thread to end."""
        self.watch.close()
        if threading.current_thread() is not self._thread:  # stop() from inside on_event
            self._thread.join(timeout)
