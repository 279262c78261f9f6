"""The directory a /workspace shows, opened once and mounted as opened (checklist row 124).

A gateway checks that a kernel's working directory lies inside its user's root
(``SandboxGateway.user_root``), and the engine mounts the directory later, by its path. The user
owns every directory under that root, so between the two they could swap one of them for a
symbolic link to anywhere the gateway's root may read, and the engine would mount that instead.

So when a plan names a root to stay within (``WorkspacePlan.within``), the host opens the
directory once: from the root, one component at a time, never following a link
(``O_PATH | O_NOFOLLOW | O_DIRECTORY``, each opened relative to the last). A link where a
directory was makes that fail, and the sandbox is refused. What the descriptor names is then
bind-mounted (source ``/proc/self/fd/N``, which the kernel resolves to the very directory it
names, not to a path) on ``<state>/<id>/workspace-source``, a directory of root's alone, and
the engine is given that path: a swap after the walk changes nothing, under runc or runsc, for
bind mounts and the copy-on-write overlay alike. The mount is read-only unless the mode is
read-write (an overlay only reads its lower layer), and ``SandboxDirectory.remove`` unmounts it
(:func:`unpin`) before anything of the directory is removed.

Mounting needs root in the engine's mount namespace (size_caps.py's ``can_cap``). Without it
the directory is still walked and checked, but the engine gets its path, and a link swapped in
after the walk could still win: the log says so.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import logging
import os
import stat
from pathlib import Path, PurePosixPath

from jupyter_sandbox.protocol.errors import HostCapError, InvalidSettingError
from jupyter_sandbox.sandbox.host.size_caps import MNT_DETACH, UMOUNT_NOFOLLOW, can_cap
from jupyter_sandbox.sandbox.workspace.plan import WorkspacePlan

log = logging.getLogger(__name__)

MS_RDONLY = 1
MS_REMOUNT = 32
MS_BIND = 4096
_WALK = os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC

_libc = ctypes.CDLL(None, use_errno=True)


def pin_workspace(plan: WorkspacePlan, target: Path) -> WorkspacePlan:
    """The plan to give the engine: ``plan`` itself when it shows no directory or names no
    root; else its directory, opened within the root, mounted on ``target`` (an empty
    directory's path, made here), which the returned plan names.

    InvalidSettingError when the directory is no longer inside the root by the walk."""
    if plan.source is None or plan.within is None:
        return plan
    fd = open_within(plan.source, plan.within)
    try:
        if not can_cap():
            log.warning(
                "%s was checked within %s but is mounted by its path (this process cannot "
                "mount): a symbolic link swapped in from now on would still be followed",
                plan.source,
                plan.within,
            )
            return plan
        target.mkdir(mode=0o700)
        _bind(fd, target, read_only=plan.mode != "read-write")
    finally:
        os.close(fd)
    return dataclasses.replace(plan, source=str(target))


def open_within(path: str, root: str) -> int:
    """An ``O_PATH`` descriptor of the directory ``path`` (absolute, no ``..``), reached from
    ``root`` without following any link on the way."""
    try:
        parts = PurePosixPath(path).relative_to(root).parts
    except ValueError:
        raise InvalidSettingError(f"{path} is not inside {root}") from None
    if ".." in parts:
        raise InvalidSettingError(f"{path} names a parent directory ('..')")
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            try:
                next_fd = os.open(part, _WALK, dir_fd=fd)
            except OSError as exc:
                raise InvalidSettingError(
                    f"{path} changed while its sandbox started ({part!r}: "
                    f"{os.strerror(exc.errno or 0)}; a symbolic link where a directory was?): "
                    "refused, since it may now lead outside "
                    f"{root}"
                ) from None
            os.close(fd)
            fd = next_fd
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            raise InvalidSettingError(f"{path} is not a directory")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _bind(fd: int, target: Path, *, read_only: bool) -> None:
    source = f"/proc/self/fd/{fd}".encode()
    if _libc.mount(source, os.fsencode(target), None, MS_BIND, None) != 0:
        _failed(target)
    if read_only:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        if _libc.mount(None, os.fsencode(target), None, flags, None) != 0:
            _failed(target)


def _failed(target: Path) -> None:
    code = ctypes.get_errno()
    raise HostCapError(f"cannot mount the workspace on {target}: {os.strerror(code)}")


def unpin(target: Path) -> None:
    """Unmount whatever is mounted on ``target`` (detached, never following a link there).

    Asked of the kernel, not judged by ``os.path.ismount``, which cannot tell a bind mount
    from a directory of the same filesystem: removing the sandbox's directory through a mount
    still there would remove the user's files. Raises HostCapError rather than leave one."""
    if not target.exists():
        return  # never pinned: made only once the mount is possible
    while _libc.umount2(os.fsencode(target), MNT_DETACH | UMOUNT_NOFOLLOW) == 0:
        pass  # once more: nothing may be left stacked on it
    code = ctypes.get_errno()
    if code != errno.EINVAL:  # EINVAL: not a mount point (any more)
        raise HostCapError(f"cannot unmount the workspace on {target}: {os.strerror(code)}")
