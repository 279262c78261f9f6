"""An exclusive ``flock`` held for as long as a process wants it, or until the process ends.

The operating system drops an ``flock`` when its holder ends in any way, SIGKILL included, so a
crashed holder never leaves the lock taken. Used for a kernel's hold on its context
(contexts.py) and for the one process that keeps an owner's warm pool filled (pool_filler.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from jupyter_sandbox.sandbox.host.private_paths import make_private_dir

OPEN_ATTEMPTS = 10  # files a try_acquire may find removed under it before it gives up


class ProcessLock:
    """A non-blocking exclusive lock on the file at ``path`` (made 0600, its directory 0700)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def try_acquire(self, note: str = "", *, make_directory: bool = True) -> bool:
        """Take the lock and write ``note`` into its file; False if another process holds it.
        Its directory (and the missing ones above it) is made first, unless ``make_directory``
        is False: then a lock whose directory is gone is not taken either (False).

        Asked again while held, it checks that the file it holds is still the one at ``path``:
        once that file is removed (its directory deleted, /tmp cleaned), another process can
        lock a new one, and two holders would each believe they are the only one. So the stale
        hold is dropped and the lock taken anew, or refused if that other process has it.
        """
        if self._fd is not None:
            if self._holds_the_file_at_path():
                return True
            self.release()
        for _ in range(OPEN_ATTEMPTS):
            if make_directory:
                make_private_dir(self.path.parent)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:
                if make_directory:
                    raise
                return False
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return False
            self._fd = fd
            if self._holds_the_file_at_path():
                break
            # A holder removed the file (release with remove=True) between our open and our
            # flock: the lock is on a file nobody else will open. Take the one at the path.
            self.release()
        else:
            return False
        if note:
            os.ftruncate(fd, 0)
            os.write(fd, note.encode())
        return True

    def _holds_the_file_at_path(self) -> bool:
        assert self._fd is not None
        try:
            at_path = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(self._fd)
        return (at_path.st_dev, at_path.st_ino) == (held.st_dev, held.st_ino)

    def note_of_holder(self) -> str:
        """What the current holder wrote into the lock file (e.g. its pid), or ''."""
        try:
            return self.path.read_text(errors="replace").strip()
        except OSError:
            return ""

    def release(self, remove: bool = False) -> None:
        """Let go of the lock; with ``remove``, delete its file first (while still holding it,
        and only if it is still the one at the path), so that none is left behind."""
        if self._fd is not None:
            if remove and self._holds_the_file_at_path():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
            with contextlib.suppress(OSError):
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @staticmethod
    def is_held(path: Path) -> bool:
        """Whether some process holds the lock at ``path`` now."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False
