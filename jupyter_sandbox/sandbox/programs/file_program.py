"""The program SandboxFiles (files.py) runs inside a sandbox for each file operation, as the
sandbox's own user: ``python3 -I -S -c SOURCE OPERATION PATH [ARGUMENT...]``.

It travels as source (the sandbox has no jupyter_sandbox to import), so it uses the standard
library alone, and as little of it as each operation needs: under gVisor importing json with
datetime, and shutil with tempfile, costs as much as the interpreter's own start, so a read
imports none of them (benchmarks/files.py; figures: docs/explanation/performance.md, "Figures
behind the code"). ``-I``: no
environment, no user site; ``-S``: no site module.

A relative path is taken from /workspace. What an operation reports is JSON on standard output
(a read: the file's bytes); an error is ``{"error": CODE, "message": TEXT}`` on standard error
with exit status FAILED. The host trusts none of it beyond its shape: the sandbox's code could
have replaced anything this program runs with.
"""

from __future__ import annotations

import os
import stat
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # never true when it runs: typing costs an import
    from collections.abc import Callable

FAILED = 3
TOO_LARGE = 4  # a read of a file larger than its limit (nothing written)
WORKSPACE = "/workspace"


def emit(value: object, error: bool = False) -> None:
    """Report ``value`` as JSON (json is imported only by an operation that reports)."""
    import json

    (sys.stderr if error else sys.stdout).write(json.dumps(value))


def fail(code: str, message: str) -> None:
    """Report an error and end (typed None, not NoReturn: typing is not worth its import)."""
    emit({"error": code, "message": message}, error=True)
    sys.exit(FAILED)


def absolute(path: str) -> str:
    return os.path.normpath(os.path.join(WORKSPACE, path))


def entry(path: str) -> dict[str, object]:
    """The path's entry (not following a symlink): name, path, type, size, mode, modified."""
    st = os.lstat(path)
    mode = st.st_mode
    kind = (
        "directory" if stat.S_ISDIR(mode)
        else "file" if stat.S_ISREG(mode)
        else "symlink" if stat.S_ISLNK(mode)
        else "other"
    )  # fmt: skip
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(st.st_mtime))
    return {
        "name": os.path.basename(path),
        "path": path,
        "type": kind,
        "size": st.st_size,
        "mode": f"0o{stat.S_IMODE(mode):03o}",
        "modified": f"{stamp}.{st.st_mtime_ns // 1000 % 1000000:06d}+00:00",
    }


def untouchable(path: str, what: str) -> None:
    if path in ("/", WORKSPACE):
        fail("invalid_path", path + " itself cannot be " + what + "; name what is in it")


def list_directory(path: str) -> None:
    entries: list[dict[str, object]] = []
    for name in sorted(os.listdir(path)):
        try:  # noqa: SIM105 (contextlib would cost an import)
            entries.append(entry(os.path.join(path, name)))
        except FileNotFoundError:
            pass  # removed while listed
    emit({"path": path, "entries": entries})


def read(path: str, limit: str = "0") -> None:
    """Write the file's bytes; a file larger than ``limit`` bytes (0: no cap) ends with
    TOO_LARGE before any is written, so that the host, which streams them on as they come,
    can still answer with an error."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not hang the read
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        fail("not_a_file", path + " is not a regular file")
    if int(limit) and status.st_size > int(limit):
        sys.exit(TOO_LARGE)
    out = sys.stdout.buffer
    while chunk := os.read(fd, 1 << 20):
        out.write(chunk)


def write(path: str) -> None:
    if os.path.isdir(path):
        fail("is_a_directory", path + " is a directory")
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # a replaced file keeps its mode
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    # Written aside, then renamed: a reader never sees half a file.
    temporary = os.path.join(parent, ".upload-" + os.urandom(8).hex())
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "wb") as out:
            # Whole MiB (a pipe gives 64 KiB a read): under gVisor each write costs.
            while chunk := sys.stdin.buffer.read(1 << 20):
                out.write(chunk)
            os.fchmod(out.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    emit(entry(path))


def remove(path: str) -> None:
    untouchable(path, "removed")
    if stat.S_ISDIR(os.lstat(path).st_mode):
        import shutil

        shutil.rmtree(path)
    else:
        os.unlink(path)


def info(path: str) -> None:
    emit(entry(path))


def make_directory(path: str) -> None:
    """Make ``path`` with its missing parents; one already there is fine (``created`` false)."""
    try:
        os.makedirs(path)
        created = True
    except FileExistsError:
        if not os.path.isdir(path):
            fail("file_exists", path + " exists and is not a directory")
        created = False
    emit(dict(entry(path), created=created))


def move(path: str, target: str, overwrite: str) -> None:
    """Rename ``path`` to ``target`` (made with its missing parents). A target already there
    is refused unless ``overwrite`` is "overwrite" (then a file, or an empty directory, is
    replaced). Between file systems (/workspace and /tmp) the bytes are copied, then removed."""
    target = absolute(target)
    untouchable(path, "moved")
    untouchable(target, "replaced")
    os.lstat(path)  # a missing source is named before anything is made
    if (target + "/").startswith(path + "/"):
        fail("invalid_path", "cannot move " + path + " into itself (" + target + ")")
    if os.path.lexists(target) and overwrite != "overwrite":
        fail("file_exists", target + " already exists: choose another name, or overwrite it")
    parent = os.path.dirname(target)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:  # a file where a directory should be
        fail("not_a_directory", "not a directory: " + parent)
    except PermissionError:
        fail("permission_denied", "the sandbox's user may not make " + parent)
    try:
        os.replace(path, target)
    except OSError as exc:
        import errno

        if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            fail("permission_denied", f"the sandbox's user may not move {path} to {target}")
        if exc.errno == errno.ENOTEMPTY or exc.errno == errno.EEXIST:
            fail("file_exists", target + " is a directory that is not empty: remove it first")
        if exc.errno == errno.EISDIR:
            fail("is_a_directory", target + " is a directory: a file cannot replace it")
        if exc.errno == errno.ENOTDIR:
            fail("not_a_directory", target + " is not a directory: a directory cannot replace it")
        if exc.errno != errno.EXDEV:
            raise
        import shutil

        if os.path.lexists(target):  # overwrite, and shutil.move would move *into* a directory
            if os.path.isdir(target) and not os.path.islink(target):
                fail("file_exists", target + " is a directory on another file system: remove it")
            os.unlink(target)
        shutil.move(path, target)
    emit(entry(target))


OPERATIONS: dict[str, Callable[..., None]] = {
    "list": list_directory,
    "read": read,
    "write": write,
    "remove": remove,
    "info": info,
    "mkdir": make_directory,
    "move": move,
}


def main(argv: list[str]) -> None:
    operation, path, arguments = argv[0], absolute(argv[1]), argv[2:]
    try:
        OPERATIONS[operation](path, *arguments)
    except FileNotFoundError:
        fail("not_found", "no such file or directory: " + path)
    except NotADirectoryError:
        fail("not_a_directory", "not a directory: " + path)
    except IsADirectoryError:
        fail("is_a_directory", path + " is a directory")
    except PermissionError:
        fail("permission_denied", "the sandbox's user may not do that to " + path)
    except OSError as exc:
        import errno

        if exc.errno == errno.EROFS:  # the image's root: read-only, as a permission refuses
            fail(
                "permission_denied", f"{path}: {exc.strerror}: the sandbox's user may not change it"
            )
        fail("os_error", f"{path}: {exc.strerror}")


if __name__ == "__main__":
    main(sys.argv[1:])
