"""Size caps on the host directories a sandbox writes to.

Two places of a sandbox's host directory take writes from inside (sandbox_dir.py): ``io/``, which
the kernel must be able to write since it creates its sockets there, and, for a copy-on-write
``/workspace``, the overlay's upper layer. On the state directory's own filesystem nothing
would bound them, so a sandbox could fill the host's disk (security checklist row 9, docs/explanation/design.md). Each is
therefore its own tmpfs of a fixed size: writes past it fail with ENOSPC inside the sandbox.

Memory-backed, as the sandbox's ``/tmp`` and tmpfs ``/workspace`` are: a page of tmpfs is
charged to the memory cgroup of the process that writes it, so what the sandbox writes there
counts against its own memory limit (under runc the writer is in the container's cgroup, under
runsc gVisor's sentry or gofer is), never against the host's disk.

Mounting needs root (``CAP_SYS_ADMIN``) and the engine's mount namespace. A server without
them cannot cap these directories; ``why_no_caps()`` says why and ``jupyter sandbox doctor``
warns. The mounts are made with the ``mount(2)`` system call rather than ``mount(8)``, which is
not in every image the server runs in, and removed lazily (``MNT_DETACH``): a container that
still holds one keeps it until it is gone.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
from pathlib import Path

from jupyter_sandbox.protocol.errors import HostCapError

MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MNT_DETACH = 2
UMOUNT_NOFOLLOW = 8
FALLOC_FL_KEEP_SIZE = 1
FALLOC_FL_PUNCH_HOLE = 2
ENGINE_PROCESS = "dockerd"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def can_cap() -> bool:
    """Whether this process may mount the caps and the engine will see them."""
    return why_no_caps() is None


@functools.cache
def why_no_caps() -> str | None:
    """Why caps mounted here would not work (None: they would).

    A mount is seen only within its mount namespace (and those it propagates to). A server in
    a namespace of its own, as systemd's PrivateTmp or ProtectSystem make, would mount the cap
    where the engine never looks: the container would see the bare directory below it and the
    server the empty tmpfs, so no kernel socket would ever be found. So the server must share
    the namespace of a local engine process (or of init, when none is found: the engine runs
    there or elsewhere, and the state directory's paths then work only if it is there).
    """
    if os.geteuid() != 0:
        return "this process is not root"
    ours = _mount_namespace("self")
    if ours is None or ours not in _engine_mount_namespaces():
        return "this process has a mount namespace of its own, which the engine does not see"
    return None


def _mount_namespace(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _engine_mount_namespaces() -> set[str | None]:
    found = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/comm") as comm:
                if comm.read().strip() != ENGINE_PROCESS:
                    continue
        except OSError:
            continue  # gone meanwhile
        found.add(_mount_namespace(entry.name))
    return found or {_mount_namespace("1")}


def mount_capped(
    target: Path, size_bytes: int, *, uid: int, max_files: int = 0, executable: bool = True
) -> None:
    """Mount a tmpfs of ``size_bytes`` on the empty directory ``target``, owned by ``uid``,
    mode 0700. ``max_files`` bounds its inodes (0: tmpfs's default, half the RAM's pages)."""
    options = f"size={size_bytes},mode=0700,uid={uid},gid={uid}"
    if max_files:
        options += f",nr_inodes={max_files}"
    flags = MS_NOSUID | MS_NODEV | (0 if executable else MS_NOEXEC)
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", flags, options.encode()) != 0:
        code = ctypes.get_errno()
        raise HostCapError(
            f"cannot put a {size_bytes}-byte cap on {target}: {os.strerror(code)}; run the "
            "server as root, or set SandboxSettings.cap_host_writes = False (a sandbox may "
            "then fill the state directory's disk)"
        )


def unmount_caps(*targets: Path) -> None:
    """Unmount whichever of ``targets`` are mount points; others are left alone.

    Never follows a link at a target (``UMOUNT_NOFOLLOW``), and a mount something still uses is
    detached now and freed when its last user goes.
    """
    for target in targets:
        if not os.path.ismount(target):
            continue
        flags = MNT_DETACH | UMOUNT_NOFOLLOW
        if _libc.umount2(os.fsencode(target), flags) != 0:
            code = ctypes.get_errno()
            if code not in (errno.EINVAL, errno.ENOENT):  # not a mount point (any more)
                raise HostCapError(f"cannot unmount the cap on {target}: {os.strerror(code)}")


def release_bytes(fd: int, offset: int, length: int) -> None:
    """Free ``length`` bytes from ``offset`` of the file open at ``fd`` (a hole; the size stays).

    Used on an archive the host has already copied: the rest of it is still being written, and
    on a capped ``io/`` every byte held counts against the sandbox's memory. Best effort: a
    filesystem that cannot punch holes keeps the bytes until the file is removed.
    """
    mode = FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
    _libc.fallocate(fd, mode, offset, length)
