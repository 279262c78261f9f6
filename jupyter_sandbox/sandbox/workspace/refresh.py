"""Keeping a copy-on-write /workspace's listings current while the host changes the folder.

A copy-on-write /workspace is the host kernel's overlayfs (lower: the notebook's folder; upper:
the sandbox's changes). overlayfs caches the entries of a merged directory (one present in both
layers; the root always is) for as long as any descriptor on it is open, and drops that cache
only when something changes *through the overlay*. gVisor's sentry keeps each directory it has
read open, so under runsc a file the host adds to the folder (an upload, a download in a host
terminal) stayed out of every listing until the sandbox itself created or removed a name there
(issue 36; runc opens the directory anew for each listing, but a program in the sandbox holding
one open would freeze it the same way).

So the host makes that change itself: this process watches the folder with inotify (one watch
per directory, at most :data:`MAX_WATCHES`) and, when a name in a directory is created, removed
or renamed, creates a file of a random name in the same directory *through the merged mount*
and removes it again, which drops the overlay's cache of that directory; gVisor, whose volumes
are shared (``--file-access-mounts=shared``, the default), reads the directory anew for each
listing. Only merged directories are touched: one only in the lower layer is read straight from
it, and touching it would copy it up.

Nothing the sandbox does reaches this process: its writes land in the upper layer, which
inotify on the folder does not see, and every path is walked one component at a time with
``O_NOFOLLOW`` from the mount's root (a directory the sandbox replaced by a symbolic link is
skipped, never followed out of the overlay). The merged mount is found in the host's
``/proc/self/mountinfo`` by its upper directory, and checked by device number before each
change, so a mount the engine has already taken down is never written to.

``python -m jupyter_sandbox.sandbox.workspace.refresh ROOT LOWER UPPER``: ``ROOT`` is the
sandbox's host directory, ``LOWER`` the folder shown, ``UPPER`` the overlay's upper directory.
It holds ``workspace-refresh.lock`` (with its pid) while it runs; prints ``ready`` once the
folder is watched and its merged folders were refreshed once (for what the host changed before
the watches existed), or ``error: ...``; and exits within a second once ``ROOT`` is gone (the
sandbox was removed). The engine mounts the overlay in its own mount namespace, so the process
must share it and be allowed to write there: a server run as root on the engine's host (as the
size caps need, ``host/size_caps.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import select
import struct
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jupyter_sandbox.sandbox.host.helper_process import run_helper, start_helper
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock

if TYPE_CHECKING:  # not imported by the process itself, which stays small (see main)
    from jupyter_sandbox.sandbox.host.sandbox_dir import SandboxDirectory

log = logging.getLogger(__name__)

REFRESH_LOCK = "workspace-refresh.lock"
REFRESH_LOG = "workspace-refresh.log"
MAX_WATCHES = 4096  # directories of the folder watched; deeper or further ones are not refreshed
SETTLE_SECONDS = 0.05  # a burst of changes (an unzip) is refreshed once, after this quiet time
MAX_DELAY_SECONDS = 0.25  # ... but never later than this after its first change
WATCH_SECONDS = 1.0  # how often the process checks that its sandbox still exists
START_TIMEOUT = 10.0  # seconds the starter waits for "ready" (a loaded host starts Python slowly)
MOUNT_WAIT_SECONDS = 5.0  # the engine mounts the overlay as the container starts
POKE_PREFIX = ".jupyter-sandbox-refresh-"

_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_MOVED_FROM = 0x40
_IN_MOVED_TO = 0x80
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ONLYDIR = 0x1000000
_IN_DONT_FOLLOW = 0x2000000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = os.O_NONBLOCK
_IN_CLOEXEC = os.O_CLOEXEC
_NAMES_CHANGED = _IN_CREATE | _IN_DELETE | _IN_MOVED_FROM | _IN_MOVED_TO
_WATCH_MASK = _NAMES_CHANGED | _IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR | _IN_DONT_FOLLOW
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then the name)
_READ_SIZE = 64 * 1024
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_OCTAL = re.compile(rb"\\([0-7]{3})")

_libc = ctypes.CDLL(None, use_errno=True)

Relative = tuple[bytes, ...]  # a directory of the folder, as names below its root


class Inotify:
    """A non-blocking inotify instance (the standard library has none)."""

    def __init__(self) -> None:
        fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd: int = fd

    def add(self, path: bytes) -> int:
        wd = _libc.inotify_add_watch(self.fd, path, _WATCH_MASK)
        if wd < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch", os.fsdecode(path))
        return int(wd)

    def remove(self, wd: int) -> None:
        _libc.inotify_rm_watch(self.fd, wd)  # fails only for a watch already gone

    def read(self) -> list[tuple[int, int, bytes]]:
        """The events queued now: (watch, mask, name) each; none when the queue is empty."""
        try:
            data = os.read(self.fd, _READ_SIZE)
        except BlockingIOError:
            return []
        events = []
        offset = 0
        while offset + _EVENT.size <= len(data):
            wd, mask, _, length = _EVENT.unpack_from(data, offset)
            start = offset + _EVENT.size
            events.append((wd, mask, data[start : start + length].rstrip(b"\0")))
            offset = start + length
        return events

    def close(self) -> None:
        os.close(self.fd)


def merged_mount(upper: Path) -> tuple[bytes, int] | None:
    """The mount point and device of the overlay whose upper directory is ``upper``, from this
    process's mountinfo (the host kernel's, so trusted), or None if none is mounted."""
    wanted = b"upperdir=" + os.fsencode(upper)
    with open("/proc/self/mountinfo", "rb") as f:
        for line in f:
            mount, _, filesystem = line.rstrip(b"\n").partition(b" - ")
            fields, super_fields = mount.split(b" "), filesystem.split(b" ")
            if len(fields) < 5 or len(super_fields) < 3 or super_fields[0] != b"overlay":
                continue
            options = [_unescape(option) for option in super_fields[2].split(b",")]
            if wanted in options:
                major, _, minor = fields[2].partition(b":")
                return _unescape(fields[4]), os.makedev(int(major), int(minor))
    return None


def _unescape(text: bytes) -> bytes:
    return _OCTAL.sub(lambda match: bytes([int(match.group(1), 8)]), text)


def open_beneath(base: bytes, relative: Relative, device: int | None = None) -> int | None:
    """A descriptor of the directory ``base/relative``, each name opened with ``O_NOFOLLOW``
    (a symbolic link or anything but a directory ends the walk), and, with ``device``, each on
    that device (the overlay's; nothing else mounted there is entered); None if there is none."""
    try:
        fd = os.open(base, _DIRECTORY)
    except OSError:
        return None
    try:
        for name in (b"", *relative):
            if name:
                parent = fd
                fd = os.open(name, _DIRECTORY, dir_fd=parent)
                os.close(parent)
            if device is not None and os.fstat(fd).st_dev != device:
                os.close(fd)
                return None
    except OSError:
        os.close(fd)
        return None
    return fd


def refresh_directory(upper: Path, relative: Relative) -> bool:
    """Drop the overlay's cached listing of ``relative`` by creating and removing a name in it
    through the merged mount. False if there was nothing to do (no overlay mounted, or the
    directory is not merged); OSError if the name could not be made (the sandbox filled its
    upper layer)."""
    found = merged_mount(upper)
    if found is None:
        return False
    in_upper = open_beneath(os.fsencode(upper), relative)
    if in_upper is None:  # only in the lower layer: read straight from it, never cached
        return False
    os.close(in_upper)
    merged, device = found
    fd = open_beneath(merged, relative, device)
    if fd is None:
        return False
    try:
        while True:
            name = POKE_PREFIX + os.urandom(8).hex()
            try:
                new = os.open(
                    name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600, dir_fd=fd
                )
            except FileExistsError:  # the sandbox made one of these names: another
                continue
            os.close(new)
            # The sandbox (which owns the folder) may have moved or removed it meanwhile: then
            # it is that change which dropped the cache, and an empty file of root's is all it
            # kept in its own upper layer.
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
            return True
    finally:
        os.close(fd)


class Refresher:
    """Watches ``lower`` and refreshes the merged directories whose names changed."""

    def __init__(self, lower: Path, upper: Path, max_watches: int = MAX_WATCHES) -> None:
        self.lower = os.fsencode(lower)
        self.upper = upper
        self.max_watches = max_watches
        self.inotify = Inotify()
        self.watches: dict[int, Relative] = {}
        self.full = False
        self.failures: set[int | None] = set()

    def watch_tree(self, top: Relative) -> list[Relative]:
        """Watch ``top`` and every directory under it (not through symbolic links), breadth
        first, up to the bound; return those now watched."""
        added: list[Relative] = []
        queue = [top]
        while queue:
            relative = queue.pop(0)
            if len(self.watches) >= self.max_watches:
                if not self.full:
                    log.warning(
                        "more than %d directories: deeper ones are not refreshed", self.max_watches
                    )
                    self.full = True
                return added
            path = os.path.join(self.lower, *relative) if relative else self.lower
            try:
                wd = self.inotify.add(path)
                with os.scandir(path) as entries:
                    names = [e.name for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue  # gone or unreadable meanwhile
            self.watches[wd] = relative
            added.append(relative)
            queue.extend((*relative, name) for name in sorted(names))
        return added

    def unwatch_tree(self, top: Relative) -> None:
        for wd, relative in list(self.watches.items()):
            if relative[: len(top)] == top:
                self.inotify.remove(wd)
                del self.watches[wd]

    def changed_directories(self, events: list[tuple[int, int, bytes]]) -> set[Relative]:
        """Follow ``events`` (new and moved directories are watched) and return the
        directories whose names changed."""
        changed: set[Relative] = set()
        for wd, mask, name in events:
            if mask & _IN_Q_OVERFLOW:
                changed.update(self.watches.values())
                continue
            relative = self.watches.get(wd)
            if relative is None:
                continue
            if mask & _IN_IGNORED:
                del self.watches[wd]
                continue
            if not mask & _NAMES_CHANGED:
                continue
            changed.add(relative)
            if mask & _IN_ISDIR:
                child = (*relative, name)
                if mask & (_IN_DELETE | _IN_MOVED_FROM):
                    self.unwatch_tree(child)
                else:  # what was made in it before its watch was refreshed with it
                    changed.update(self.watch_tree(child))
        return changed

    def run(self, root: Path) -> None:
        """Refresh until ``root`` (the sandbox's directory) is gone."""
        while root.is_dir():
            ready, _, _ = select.select([self.inotify.fd], [], [], WATCH_SECONDS)
            if not ready:
                continue
            events = self.inotify.read()
            first = time.monotonic()
            while time.monotonic() - first < MAX_DELAY_SECONDS:
                more, _, _ = select.select([self.inotify.fd], [], [], SETTLE_SECONDS)
                if not more:
                    break
                events.extend(self.inotify.read())
            self.refresh(self.changed_directories(events))

    def refresh(self, directories: set[Relative]) -> None:
        """Refresh each of ``directories`` that is merged; a failure is logged, once a cause."""
        for relative in sorted(directories):
            try:
                refresh_directory(self.upper, relative)
            except OSError as exc:  # said once for each cause: the log is on the host
                if exc.errno not in self.failures:
                    self.failures.add(exc.errno)
                    log.warning(
                        "cannot refresh /workspace/%s: %s",
                        os.fsdecode(b"/".join(relative)),
                        exc,
                    )


def running(directory: SandboxDirectory) -> bool:
    return ProcessLock.is_held(directory.root / REFRESH_LOCK)


def start_refresher(directory: SandboxDirectory, lower: str) -> str | None:
    """Start the refresher of a sandbox with a copy-on-write /workspace (blocking; run it on a
    thread) and wait until it watches the folder. None once it does, else why not (the start
    of the sandbox goes on: listings are then as overlayfs keeps them)."""
    if running(directory):
        return None
    try:
        child, line = start_helper(
            "jupyter_sandbox.sandbox.workspace.refresh",
            [str(directory.root), lower, str(directory.overlay_upper)],
            directory.root / REFRESH_LOG,
            START_TIMEOUT,
        )
    except OSError as exc:
        return str(exc)
    if line.startswith("ready"):
        return None
    with contextlib.suppress(ProcessLookupError):
        child.kill()
    return line or "no answer"


def main(argv: list[str]) -> int:
    """Run as a process of its own. It imports little beyond the standard library, since one
    runs per sandbox (its memory: docs/explanation/performance.md)."""
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    root, lower, upper = Path(argv[1]), Path(argv[2]), Path(argv[3])
    return run_helper(root, REFRESH_LOCK, "workspace refresh", lambda: serve(root, lower, upper))


def serve(root: Path, lower: Path, upper: Path) -> int:
    """Find the overlay, watch ``lower``, say ready, and refresh until ``root`` is gone."""
    try:
        deadline = time.monotonic() + MOUNT_WAIT_SECONDS
        while (found := merged_mount(upper)) is None:
            if time.monotonic() > deadline:
                print(
                    "error: no overlay is mounted on this sandbox's upper directory here",
                    flush=True,
                )
                return 1
            time.sleep(0.05)
        merged = open_beneath(found[0], (), found[1])
        if merged is None:  # not root, or not in the engine's mount namespace
            print(f"error: cannot open the overlay mounted at {os.fsdecode(found[0])}", flush=True)
            return 1
        os.close(merged)
        refresher = Refresher(lower, upper)
        refresher.watch_tree(())
        if not refresher.watches:
            print(f"error: cannot watch {lower}", flush=True)
            return 1
        # What the host changed between the container's start and these watches is not in
        # any event, and the sandbox may have listed before it: refresh what is merged now.
        refresher.refresh(set(refresher.watches.values()))
        print("ready", flush=True)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # the starter has read what it waited for
        refresher.run(root)
        return 0
    except OSError as exc:
        print(f"error: {exc}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
