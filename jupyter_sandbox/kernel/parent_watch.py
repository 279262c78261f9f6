"""The kernel's client: ``JPY_PARENT_PID``, which the proxy kernel outlives no more than ipykernel.

jupyter_client names the process that starts a kernel in the kernel's environment
(``JPY_PARENT_PID``), and ipykernel exits once that process is gone (its ``ParentPoller``): a
script that started kernels and was killed leaves none behind. The proxy kernel does the same,
through a pidfd of that process (readable once it has ended, whatever its pid becomes later),
and ends as on SIGTERM: an unnamed kernel's sandbox is removed, a named context stays.

The variable is inherited by everything a kernel's client starts, so it is believed only when it
names an ancestor of this process: the kernel's parent when jupyter_client started it. A kernel
forked by a zygote (zygote.py) has the zygote for its parent, and with no server above the
zygote (the headless pool's, sandbox/lifecycle/pool_keeper.py) its client is no ancestor of it:
such a kernel looks from its launcher instead, which stands in for it towards the client and
which the client started.
"""

from __future__ import annotations

import logging
import os
import re

log = logging.getLogger(__name__)

PARENT_ENV = "JPY_PARENT_PID"
MAX_ANCESTORS = 64  # a process tree deeper than this is not a kernel's
_PID = re.compile(r"[1-9][0-9]{0,9}", re.ASCII)


def parent_pid_of(pid: int) -> int | None:
    """The parent of ``pid``, from /proc; None if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read(4096)
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1])


def is_ancestor(candidate: int, pid: int) -> bool:
    """Whether ``candidate`` is ``pid``'s parent, its parent's parent, and so on."""
    current: int | None = pid
    for _ in range(MAX_ANCESTORS):
        current = parent_pid_of(current) if current is not None else None
        if current is None or current <= 1:
            return False
        if current == candidate:
            return True
    return False


def open_kernel_client(stand_in: int | None = None) -> int | None:
    """A descriptor that becomes readable when the process that started this kernel ends (its
    pidfd), if ``JPY_PARENT_PID`` names an ancestor of this process, or of ``stand_in`` (the
    pid of a forked kernel's launcher); None otherwise (the kernel then lives until it is shut
    down). The caller closes it."""
    start = os.getpid() if stand_in is None else stand_in
    value = os.environ.get(PARENT_ENV, "")
    if not value:
        return None
    if not _PID.fullmatch(value):
        log.warning("ignoring %s=%r: not a process id", PARENT_ENV, value[:32])
        return None
    pid = int(value)
    if not is_ancestor(pid, start):
        log.info("ignoring %s=%s: not an ancestor of this kernel", PARENT_ENV, pid)
        return None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return _already_gone()
    # It could have ended, and its pid been reused, between the check and the open.
    if not is_ancestor(pid, start):
        os.close(pidfd)
        return _already_gone()
    return pidfd


def _already_gone() -> int:
    """A descriptor that is readable at once, as the pidfd of an ended process is: the client
    ended while this kernel started, and the caller handles that as any later end."""
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    return read_fd
