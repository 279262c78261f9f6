"""The program SandboxFiles.watch (file_watch.py) runs inside a sandbox to watch a directory,
as the sandbox's own user: ``python3 -I -S -c SOURCE PATH RECURSIVE MAX_ENTRIES INTERVAL``.

It polls: every INTERVAL seconds it lists the directory (with RECURSIVE "1", everything under
it, symlinks not followed) and compares each entry's type, size, modification time and inode
with the last listing's. Polling, not inotify: it works the same under runc and gVisor (whose
inotify does not see every change a host-side mount can bring), on any file system, needs
nothing in the image, and costs what MAX_ENTRIES bounds (past it, it stops with an error
naming the cap) rather than one kernel watch per directory. A change shorter than INTERVAL (a file written then removed between two
listings) is not seen; one whose size and times do not change within the file system's clock
tick is seen at the next write.

It travels as source, stdlib only, as file_program.py does (which says why), and writes JSON
lines on standard output: first ``{"type": "ready", "path": ROOT}`` once the first listing is
taken (a change from then on is reported), then one line a change, ``{"type": "created" |
"modified" | "removed", "path": ABSOLUTE, "entry": ENTRY | null}`` (ENTRY as file_program.py's
``entry``; null for a removal). A path that changes type is removed, then created. A missing
PATH, or one that is not a directory, is an error before "ready"; the directory removed while
watched is a "removed" line for it, then that error. An error is ``{"error": CODE, "message":
TEXT}`` on standard error with exit status FAILED. The host trusts none of it beyond its shape.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time

FAILED = 3
WORKSPACE = "/workspace"


def fail(code: str, message: str) -> None:
    sys.stderr.write(json.dumps({"error": code, "message": message}))
    sys.exit(FAILED)


def emit(value: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(value) + "\n")
    sys.stdout.flush()  # the host waits for each line: none may sit in a buffer


def kind(mode: int) -> str:
    return (
        "directory" if stat.S_ISDIR(mode)
        else "file" if stat.S_ISREG(mode)
        else "symlink" if stat.S_ISLNK(mode)
        else "other"
    )  # fmt: skip


def entry(path: str, st: os.stat_result) -> dict[str, object]:
    """As file_program.py's ``entry``, from a stat already taken."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(st.st_mtime))
    return {
        "name": os.path.basename(path),
        "path": path,
        "type": kind(st.st_mode),
        "size": st.st_size,
        "mode": f"0o{stat.S_IMODE(st.st_mode):03o}",
        "modified": f"{stamp}.{st.st_mtime_ns // 1000 % 1000000:06d}+00:00",
    }


def check_root(root: str) -> None:
    try:
        mode = os.stat(root).st_mode
    except FileNotFoundError:
        fail("not_found", "no such directory: " + root)
    except PermissionError:
        fail("permission_denied", "the sandbox's user may not look at " + root)
    if not stat.S_ISDIR(mode):
        fail("not_a_directory", "not a directory: " + root + " (watch the directory it is in)")


def scan(root: str, recursive: bool, cap: int) -> dict[str, os.stat_result]:
    """Every entry under ``root`` (its direct ones unless ``recursive``), by absolute path."""
    found: dict[str, os.stat_result] = {}
    pending = [root]
    while pending:
        directory = pending.pop()
        try:
            with os.scandir(directory) as items:
                for item in items:
                    try:
                        st = item.stat(follow_symlinks=False)
                    except FileNotFoundError:  # removed while listed
                        continue
                    found[item.path] = st
                    if len(found) > cap:
                        fail(
                            "too_many_entries",
                            f"{root} holds more than {cap} entries"
                            + (" (counting subdirectories)" if recursive else "")
                            + ", the most a watch follows (SandboxFiles.watch_max_entries): "
                            "watch a smaller directory"
                            + (", or not recursively" if recursive else ""),
                        )
                    if recursive and stat.S_ISDIR(st.st_mode):
                        pending.append(item.path)
        except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
            if directory != root:
                continue  # a subdirectory removed meanwhile, or unreadable: seen next time
            if isinstance(exc, PermissionError):
                fail("permission_denied", "the sandbox's user may no longer list " + root)
            emit({"type": "removed", "path": root, "entry": None})
            fail("not_found", "the watched directory " + root + " was removed")
    return found


def changes(before: dict[str, os.stat_result], after: dict[str, os.stat_result]) -> None:
    """Report what differs: removals first, then creations, then modifications, each sorted
    (a rename is the old path's removal, then the new one's creation)."""
    created, modified, removed = [], [], []
    for path in before.keys() - after.keys():
        removed.append(path)
    for path, st in after.items():
        old = before.get(path)
        if old is None:
            created.append(path)
        elif stat.S_IFMT(old.st_mode) != stat.S_IFMT(st.st_mode):
            removed.append(path)
            created.append(path)
        elif (old.st_size, old.st_mtime_ns, old.st_ino) != (st.st_size, st.st_mtime_ns, st.st_ino):
            modified.append(path)
    for path in sorted(removed):
        emit({"type": "removed", "path": path, "entry": None})
    for path in sorted(created):
        emit({"type": "created", "path": path, "entry": entry(path, after[path])})
    for path in sorted(modified):
        emit({"type": "modified", "path": path, "entry": entry(path, after[path])})


def main(argv: list[str]) -> None:
    root = os.path.normpath(os.path.join(WORKSPACE, argv[0]))
    recursive, cap, interval = argv[1] == "1", int(argv[2]), float(argv[3])
    check_root(root)
    before = scan(root, recursive, cap)
    emit({"type": "ready", "path": root})
    while True:
        time.sleep(interval)
        after = scan(root, recursive, cap)
        changes(before, after)
        before = after


if __name__ == "__main__":
    try:  # noqa: SIM105 (contextlib would cost an import)
        main(sys.argv[1:])
    except BrokenPipeError:  # the host stopped reading: the watch is over
        pass
