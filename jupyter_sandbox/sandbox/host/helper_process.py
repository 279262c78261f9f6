"""Host processes a sandbox keeps beside it, each in a session of its own: its egress proxy
(network/control.py) and the refresher of its copy-on-write /workspace (workspace/refresh.py).

Both are started the same way and answer the same way: ``python -m MODULE ARGS...`` with no
standard input, its standard error appended to a log in the sandbox's directory, and one line on
its standard output once it is ready (``ready...``) or why it is not (``error: ...``). They
outlive the process that started them (a kernel, a server) and end on their own once the
sandbox's directory is gone; the starter reaps those of its children that have ended whenever
it starts another.
"""

from __future__ import annotations

import logging
import os
import select
import subprocess
from collections.abc import Callable
from pathlib import Path

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.python_command import module_command

_children: list[subprocess.Popen[bytes]] = []


def reap() -> None:
    """Collect the exit status of the helpers this process started that have ended."""
    for child in list(_children):
        if child.poll() is not None:
            _children.remove(child)


def start_helper(
    module: str, args: list[str], log: Path, timeout: float
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m module args`` detached and return it with its first line of output
    (stripped; empty if none came within ``timeout`` seconds). OSError if it cannot start."""
    reap()
    with open(log, "ab") as log_file:
        child = subprocess.Popen(
            module_command(module, *args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log_file,
            start_new_session=True,  # not ended by a signal to the kernel's or server's group
        )
    _children.append(child)
    assert child.stdout is not None
    try:
        ready, _, _ = select.select([child.stdout], [], [], timeout)
        line = child.stdout.readline().decode(errors="replace").strip() if ready else ""
    finally:
        child.stdout.close()
    return child, line


def run_helper(root: Path, lock_name: str, name: str, serve: Callable[[], int]) -> int:
    """The helper's own side, in its ``main``: log lines that name the sandbox and ``name``;
    ``error: ...`` and 1 when the sandbox's directory ``root`` is gone; ``ready (already
    running)`` and 0 when another helper holds ``root/lock_name`` (with its pid); else
    ``serve()``'s status, the lock held meanwhile."""
    logging.basicConfig(
        level=logging.WARNING,
        format=f"%(asctime)s sandbox {root.name} {name} %(levelname)s %(message)s",
    )
    if not root.is_dir():
        print(f"error: {root} is gone", flush=True)
        return 1
    lock = ProcessLock(root / lock_name)
    if not lock.try_acquire(str(os.getpid())):
        print("ready (already running)", flush=True)
        return 0
    try:
        return serve()
    finally:
        lock.release()
