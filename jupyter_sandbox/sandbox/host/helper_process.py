"""Host processes a sandbox keeps beside it, each in a session of its own: its egress proxy
(network/control.py) and the refresher of its copy-on-write /workspace (workspace_refresh.py).

Both are started the same way and answer the same way: ``python -m MODULE ARGS...`` with no
standard input, its standard error appended to a log in the sandbox's directory, and one line on
its standard output once it is ready (``ready...``) or why it is not (``error: ...``). They
outlive the process that started them (a kernel, a server) and end on their own once the
sandbox's directory is gone; the starter reaps those of its children that have ended whenever
it starts another.
"""

from __future__ import annotations

import select
import subprocess
from pathlib import Path

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
