"""A tar of a directory that the host reads itself, following no link at any component.

Used on a frozen sandbox's ``/proc/<pid>/root/workspace`` (sandbox/backends/docker/
sealed_archive.py): every name there is the sandbox's, and a symlink swapped in for a directory
or a file would have a walk by path read the host's files. So every step opens by name relative
to the directory fd it came from, with ``O_NOFOLLOW`` (and ``O_DIRECTORY`` for directories), and
checks with ``fstat`` what it opened; a symlink is recorded as a link (its target is never
opened), a hard link as a link to the first name of its inode, and devices, FIFOs and sockets
are skipped (a restore could make none of them). The walk is bounded by a member count, a byte
count (the caller's ``write`` may raise too) and a deadline.

The archive is GNU tar's format, as ``tar -c --numeric-owner`` writes it in a sandbox: names
``./`` and ``./<path>`` (raw bytes of the names kept through surrogateescape), numeric owners,
whole-second mtimes; the host's own archive scanner reads it like any other
(snapshots/archive_scan.py).
"""

from __future__ import annotations

import os
import stat
import tarfile
import time
from collections.abc import Callable

from jupyter_sandbox.protocol.snapshot_errors import (
    SnapshotFailedError,
    SnapshotTooLargeError,
    shown,
)
from jupyter_sandbox.sandbox.host.sandbox_dir import UNTRUSTED_READ
from jupyter_sandbox.sandbox.snapshots.archive_rules import MAX_PATH

BLOCK = 512
CHUNK = 1024**2
DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A file is opened as every file the sandbox may have written (a FIFO swapped in for it between
# lstat and open must not hang the walk).
FILE_FLAGS = UNTRUSTED_READ
# Directories the walk descends at most: it holds a descriptor per level, in the server that
# every owner shares, and a path's length alone (MAX_PATH) allows two thousand levels.
MAX_DEPTH = 128


def open_directory_beneath(root: int, path: str) -> int:
    """The directory at ``path`` (relative, '/'-separated) under the directory fd ``root``,
    opened component by component with no link followed; OSError (ELOOP, ENOTDIR) if any
    component is a link or not a directory."""
    fd = os.dup(root)
    try:
        for part in (p for p in path.split("/") if p):
            if part == "..":
                raise OSError(f"'..' in {path!r}")
            opened = os.open(part, DIRECTORY_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = opened
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_tar(
    directory: int,
    write: Callable[[bytes], object],
    *,
    max_members: int,
    max_bytes: int,
    deadline: float,
    what: str,
) -> int:
    """Write a tar of the directory fd ``directory`` (not closed here) to ``write``; returns
    the members written. ``deadline``: time.monotonic() at which the walk fails;
    ``max_members``/``max_bytes`` (0: no cap) fail it with SnapshotTooLargeError. ``what``
    names the directory in errors."""
    walk = _Walk(write, max_members, max_bytes, deadline, what)
    walk.member("./", os.fstat(directory), tarfile.DIRTYPE)
    walk.directory(directory, "./")
    walk.emit(b"\0" * (2 * BLOCK))
    return walk.members


class _Walk:
    def __init__(
        self,
        write: Callable[[bytes], object],
        max_members: int,
        max_bytes: int,
        deadline: float,
        what: str,
    ) -> None:
        self.write = write
        self.max_members = max_members
        self.waiting = 0  # names listed by the walk and not archived yet
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.what = what
        self.members = 0
        self.written = 0
        self.inodes: dict[tuple[int, int], str] = {}  # hard links: the first name of each

    def emit(self, data: bytes) -> None:
        self.written += len(data)
        if self.max_bytes and self.written > self.max_bytes:
            raise SnapshotTooLargeError(
                f"the archive of {self.what} exceeds {self.max_bytes} bytes "
                "(Snapshots.max_archive_bytes); nothing was stored"
            )
        self.write(data)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise SnapshotFailedError(
                f"archiving {self.what} took longer than its time limit (Snapshots.timeout)"
            )

    def member(
        self, name: str, st: os.stat_result, kind: bytes, *, size: int = 0, link: str = ""
    ) -> None:
        self.check_time()
        self.members += 1
        if self.max_members and self.members > self.max_members:
            raise self.too_many()
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = stat.S_IMODE(st.st_mode)
        info.uid, info.gid = st.st_uid, st.st_gid
        info.uname = info.gname = ""
        info.mtime = int(st.st_mtime)
        info.size = size
        info.linkname = link
        self.emit(info.tobuf(tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))

    def directory(self, top: int, top_prefix: str) -> None:
        # Depth first with a stack of at most MAX_DEPTH levels, each holding one fd and the
        # names of its directory left to archive, sorted, so the same workspace gives the same
        # archive.
        stack: list[tuple[int, str, list[str]]] = [(top, top_prefix, self.names(top))]
        try:
            while stack:
                fd, prefix, names = stack[-1]
                if not names:
                    stack.pop()
                    if fd != top:
                        os.close(fd)
                    continue
                self.waiting -= 1
                child = self.entry(fd, prefix, names.pop())  # the first, by name
                if child is not None:
                    stack.append(child)
                    if len(stack) > MAX_DEPTH:  # closed below, with the others
                        raise SnapshotFailedError(
                            f"{self.what} nests directories deeper than {MAX_DEPTH} levels, "
                            f"which no archive here takes: {shown(child[1])}"
                        )
        finally:
            for fd, _prefix, _names in stack:
                if fd != top:
                    os.close(fd)

    def names(self, fd: int) -> list[str]:
        """The names in the directory ``fd``, sorted last to first (the walk pops the first
        from the end; the same workspace gives the same archive). Read one by one, and no more
        than the entries the archive may still take, counting those listed and not archived
        yet: a directory of millions is refused before it is held."""
        left = self.max_members - self.members - self.waiting if self.max_members else None
        names: list[str] = []
        with os.scandir(fd) as entries:
            for entry in entries:
                names.append(entry.name)
                if left is not None and len(names) > left:
                    raise self.too_many()
        self.waiting += len(names)
        return sorted(names, reverse=True)

    def too_many(self) -> SnapshotTooLargeError:
        return SnapshotTooLargeError(
            f"{self.what} holds more than {self.max_members} entries "
            "(Snapshots.max_members); nothing was stored"
        )

    def entry(self, fd: int, prefix: str, name: str) -> tuple[int, str, list[str]] | None:
        """Archive ``name`` of the directory ``fd``; a directory's (fd, prefix, names) to walk
        next, or None."""
        self.check_time()
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None  # gone since the listing (a sandbox that is not frozen)
        path = prefix + name
        if len(path.encode(errors="surrogateescape")) > MAX_PATH:
            raise SnapshotFailedError(
                f"{self.what}: a path is longer than {MAX_PATH} bytes, which no restore "
                f"accepts: {shown(path)}"
            )
        if stat.S_ISLNK(st.st_mode):
            # Recorded, never followed.
            self.member(path, st, tarfile.SYMTYPE, link=os.readlink(name, dir_fd=fd))
        elif stat.S_ISDIR(st.st_mode):
            child = self._open(name, fd, DIRECTORY_FLAGS, path)
            try:
                self.member(path + "/", os.fstat(child), tarfile.DIRTYPE)
                return child, path + "/", self.names(child)
            except BaseException:
                os.close(child)
                raise
        elif stat.S_ISREG(st.st_mode):
            self.file(name, fd, path)
        # Devices, FIFOs and sockets: skipped (nothing a restore could make).
        return None

    def file(self, name: str, parent: int, path: str) -> None:
        fd = self._open(name, parent, FILE_FLAGS, path)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return  # a FIFO or device swapped in after lstat: skipped like one
            key = (st.st_dev, st.st_ino)
            if st.st_nlink > 1 and key in self.inodes:
                self.member(path, st, tarfile.LNKTYPE, link=self.inodes[key])
                return
            if st.st_nlink > 1:
                self.inodes[key] = path
            size = st.st_size
            self.member(path, st, tarfile.REGTYPE, size=size)
            left = size
            while left:
                self.check_time()
                chunk = os.read(fd, min(CHUNK, left))
                if not chunk:
                    raise SnapshotFailedError(
                        f"{self.what}: {shown(path)} shrank while it was archived"
                    )
                left -= len(chunk)
                self.emit(chunk)
            if size % BLOCK:
                self.emit(b"\0" * (BLOCK - size % BLOCK))
        finally:
            os.close(fd)

    def _open(self, name: str, parent: int, flags: int, path: str) -> int:
        try:
            return os.open(name, flags, dir_fd=parent)
        except OSError as exc:
            # ELOOP: a link swapped in since lstat; ENOTDIR: a file for a directory.
            raise SnapshotFailedError(
                f"{self.what}: {shown(path)} changed while it was archived ({exc.strerror})"
            ) from None
