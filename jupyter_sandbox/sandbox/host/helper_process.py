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

import asyncio
import contextlib
import logging
import os
import select
import subprocess
from collections.abc import Callable
from pathlib import Path

from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.python_command import module_command
from jupyter_sandbox.sandbox.host.timeouts import within

_children: list[subprocess.Popen[bytes]] = []
FIRST_LINE_MOST = 4096  # bytes of a helper's first answer read: one line, short


def reap() -> None:
    """Collect the exit status of the helpers this process started that have ended."""
    for child in list(_children):
        if child.poll() is not None:
            _children.remove(child)


def start_helper(
    module: str, args: list[str], log: Path, timeout: float
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``python -m module args`` detached and return it with its first line of output
    (stripped; empty if none came within ``timeout`` seconds). OSError if it cannot start.
    Blocking: :func:`start_helper_async` waits on the event loop instead."""
    child = _spawn(module, args, log)
    assert child.stdout is not None
    try:
        ready, _, _ = select.select([child.stdout], [], [], timeout)
        line = child.stdout.readline().decode(errors="replace").strip() if ready else ""
    finally:
        child.stdout.close()
    return child, line


async def start_helper_async(
    module: str, args: list[str], log: Path, timeout: float
) -> tuple[subprocess.Popen[bytes], str]:
    """:func:`start_helper`, its first line awaited on the event loop: a helper whose
    readiness hangs on its sandbox (the egress proxy's waits for the sandbox's forwarder, which
    the sandbox's own code can stop) holds no thread of the pool every owner's host work shares
    for as long as it keeps silent. A cancelled wait ends the helper, whose answer nobody reads."""
    child = _spawn(module, args, log)
    assert child.stdout is not None
    try:
        return child, await _first_line(child.stdout.fileno(), timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        raise
    finally:
        child.stdout.close()


def _spawn(module: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
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
    return child


async def _first_line(fd: int, timeout: float) -> str:
    """The first line read from the pipe ``fd`` within ``timeout`` seconds (stripped; what came
    by then if it did not end, empty if nothing did), at most FIRST_LINE_MOST bytes of it."""
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)
    deadline = loop.time() + timeout
    received = b""
    while b"\n" not in received and len(received) < FIRST_LINE_MOST:
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _set_once, readable)
        try:
            await within(readable, deadline - loop.time())
        except asyncio.TimeoutError:
            break
        finally:
            loop.remove_reader(fd)
        try:
            chunk = os.read(fd, FIRST_LINE_MOST - len(received))
        except BlockingIOError:
            continue
        if not chunk:  # it ended without a word more
            break
        received += chunk
    return received.split(b"\n", 1)[0].decode(errors="replace").strip()


def _set_once(future: asyncio.Future[None]) -> None:
    # A reader is called again on each turn of the loop while readable, until removed.
    if not future.done():
        future.set_result(None)


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
