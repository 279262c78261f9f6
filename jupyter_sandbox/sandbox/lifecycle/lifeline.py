"""The lifeline: a small host process per unnamed kernel that removes the kernel's sandbox once
the kernel process is gone, however it ended (SIGKILL included).

A proxy kernel of an unnamed context removes its sandbox when it shuts down, is sent SIGTERM or
loses its client (kernel/parent_watch.py). A process killed with SIGKILL
(``shutdown_kernel(now=True)``, an OOM kill, a killed process group) can do nothing, so the
removal must not depend on it: the kernel starts this process, in a session of its own (a signal
to the kernel's group does not reach it), with the read end of a pipe as its standard input and
keeps the write end. The operating system closes that end when the kernel process ends in any
way; this process then reads end of file, and waits for the kernel process to have ended
(:func:`kernel_process`): a killed process closes its files one by one, and its end of the pipe
may close before the context's lock is released, which would look like a new process of the
kernel holding it. If the kernel's connection file is gone, its client
shut it down (``shutdown_kernel(now=True)`` kills the process, then removes the file; a restart
keeps it): the sandbox is removed at once. Otherwise it waits up to :data:`GRACE_SECONDS` for a
new process of the same kernel to take the context (``restart_kernel(now=True)``, Jupyter's
restarter: each starts a lifeline of its own). If none did, it takes the context's lock itself
and removes the sandbox, as the kernel would have. A kernel that ended in order and dealt with
its sandbox (removed it, or restarts it for the next process) writes ``DONE`` (watcher_pipe.py) first, and
this process exits at once.

While it waits it holds nothing but the pipe and an interpreter with the standard library and
this package's lock code (a few MiB); the manager and the engine's client are imported only to
remove. Sweeps on the start of anything (reaper.py: ``sweep_orphans``) remain the backstop for
a lifeline that was itself killed.
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import sys
import time
from pathlib import Path

from jupyter_sandbox.protocol.errors import SandboxError
from jupyter_sandbox.sandbox.host.process_lock import ProcessLock
from jupyter_sandbox.sandbox.host.state_record import SandboxState
from jupyter_sandbox.sandbox.host.watcher_pipe import WatcherPipe, ended_in_order, log_to_stderr
from jupyter_sandbox.sandbox.lifecycle.contexts import check_context, lock_path

log = logging.getLogger(__name__)

# Seconds a kernel's sandbox waits, once its kernel process is gone while its connection file
# stays, for the next process of the same kernel to take its context: restart_kernel(now=True)
# starts it at once, Jupyter's restarter within its 3 s poll; each takes the lock before
# anything else, but a loaded host can take seconds to start a Python process.
GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1


class Lifeline(WatcherPipe):
    """The kernel's end of the pipe whose read end the lifeline process waits on."""

    @classmethod
    def start(cls, state_dir: Path, owner: str, context: str, connection_file: Path) -> Lifeline:
        """Start the lifeline of ``owner``'s unnamed ``context``, whose lock the caller holds,
        of the kernel whose connection file is ``connection_file``."""
        return cls.spawn(
            "jupyter_sandbox.sandbox.lifecycle.lifeline",
            str(state_dir),
            owner,
            context,
            str(connection_file),
            str(os.getpid()),
        )


def kernel_process(kernel_pid: int) -> int | None:
    """A pidfd of the kernel process ``kernel_pid``, this process's parent; None if the kernel
    has ended already (this process then has another parent, and the pid may be another's)."""
    try:
        pidfd = os.pidfd_open(kernel_pid)
    except ProcessLookupError:
        return None
    # Checked after the open: while the kernel is this process's parent, its pid is its own.
    if os.getppid() != kernel_pid:
        os.close(pidfd)
        return None
    return pidfd


def wait_for_exit(pidfd: int | None, seconds: float) -> bool:
    """Wait up to ``seconds`` for the process of ``pidfd`` to have ended, all its files (and
    so its locks) released: its pidfd is readable from then on. True once it has."""
    if pidfd is None:
        return True
    readable, _, _ = select.select([pidfd], [], [], seconds)
    return bool(readable)


def taken_over(context_lock: Path, connection_file: Path, grace: float) -> bool:
    """Whether another process takes the context within ``grace`` seconds; False at once when
    the kernel's connection file is gone (no process of that kernel will come again)."""
    deadline = time.monotonic() + grace
    while True:
        if ProcessLock.is_held(context_lock):
            return True
        if not connection_file.exists() or time.monotonic() >= deadline:
            return False
        time.sleep(POLL_SECONDS)


async def remove_abandoned(state_dir: Path, owner: str, context: str) -> list[str]:
    """Remove ``owner``'s sandboxes of the unnamed ``context``; their ids.

    Called holding the context's lock, so no kernel can attach meanwhile. A sandbox stopped by
    its memory snapshot is kept for its restore, as the reaper keeps it."""
    from jupyter_sandbox.sandbox.host.sandbox_dir import sandbox_directories
    from jupyter_sandbox.sandbox.manager import SandboxManager
    from jupyter_sandbox.sandbox.settings import load_config

    abandoned = [
        directory.sandbox_id
        for directory in sandbox_directories(state_dir)
        if _serves(directory.read_state(), owner, context)
    ]
    if not abandoned:
        return []
    config = load_config()
    config.SandboxSettings.state_dir = str(state_dir)
    manager = SandboxManager.from_config(config)
    try:
        for sandbox_id in abandoned:
            await manager.remove(owner, sandbox_id)
    finally:
        await manager.close()
    return abandoned


def _serves(state: SandboxState, owner: str, context: str) -> bool:
    return (
        state.get("owner") == owner
        and state.get("context") == context
        and bool(state.get("ephemeral"))
        and not state.get("checkpointed")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_sandbox.sandbox.lifecycle.lifeline")
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("owner")
    parser.add_argument("context")
    parser.add_argument("connection_file", type=Path)
    parser.add_argument("kernel_pid", type=int)
    args = parser.parse_args(argv)
    log_to_stderr("SandboxedPython lifeline")
    if not args.state_dir.is_absolute() or not args.connection_file.is_absolute():
        parser.error("the state directory and the connection file must be absolute paths")
    context_lock = lock_path(args.state_dir, args.owner, check_context(args.context))
    kernel = kernel_process(args.kernel_pid)
    if ended_in_order(sys.stdin.fileno()):
        return 0
    log.info("kernel of context %s ended without removing its sandbox", args.context)
    if not wait_for_exit(kernel, GRACE_SECONDS):
        # Its end of the pipe closed, and it runs on: not something a kernel does. Decided as
        # if it had ended; its lock, if it still holds it, keeps the sandbox.
        log.warning("kernel process %d closed its lifeline and still runs", args.kernel_pid)
    if taken_over(context_lock, args.connection_file, GRACE_SECONDS):
        return 0
    hold = ProcessLock(context_lock)
    # Never made here: a state directory removed with all it held (a test's clean-up, even
    # while it is under way) stays removed.
    if not hold.try_acquire(note=f"lifeline {os.getpid()}", make_directory=False):
        return 0  # a new kernel process took it this very moment, or the directory is gone
    log.info("kernel of context %s ended and nothing took the context over", args.context)
    import asyncio  # only now: the waiting process stays small

    try:
        removed = asyncio.run(remove_abandoned(args.state_dir, args.owner, args.context))
    except SandboxError as exc:  # the engine away: the next sweep (reaper.py) removes it
        log.warning("could not remove the sandbox of ended kernel %s: %s", args.context, exc)
        return 1
    finally:
        hold.release(remove=True)
    for sandbox_id in removed:
        log.info("removed sandbox %s: its kernel process ended", sandbox_id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
