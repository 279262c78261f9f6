"""The lifeline: a small host process per unnamed kernel that removes the kernel's sandbox once
the kernel process is gone, however it ended (SIGKILL included).

A proxy kernel of an unnamed context removes its sandbox when it shuts down, is sent SIGTERM or
loses its client (kernel/parent_watch.py). A process killed with SIGKILL
(``shutdown_kernel(now=True)``, an OOM kill, a killed process group) can do nothing, so the
removal must not depend on it: the kernel starts this process, in a session of its own (a signal
to the kernel's group does not reach it), with the read end of a pipe as its standard input and
keeps the write end. The operating system closes that end when the kernel process ends in any
way; this process then reads end of file. If the kernel's connection file is gone, its client
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
import sys
import time
from pathlib import Path
from typing import Any

from .contexts import check_context, lock_path
from .errors import SandboxError
from .process_lock import ProcessLock
from .watcher_pipe import WatcherPipe, ended_in_order

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
            "jupyter_sandbox.sandbox.lifeline",
            str(state_dir),
            owner,
            context,
            str(connection_file),
        )


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
    from .hostdir import sandbox_directories
    from .manager import SandboxManager
    from .settings import load_config

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


def _serves(state: dict[str, Any], owner: str, context: str) -> bool:
    return (
        state.get("owner") == owner
        and state.get("context") == context
        and bool(state.get("ephemeral"))
        and not state.get("checkpointed")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jupyter_sandbox.sandbox.lifeline")
    parser.add_argument("state_dir", type=Path)
    parser.add_argument("owner")
    parser.add_argument("context")
    parser.add_argument("connection_file", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="[SandboxedPython lifeline %(asctime)s %(levelname)s] %(message)s",
    )
    # Its stderr is the kernel's, which may be a pipe nobody reads once the kernel's client died.
    logging.raiseExceptions = False
    if not args.state_dir.is_absolute() or not args.connection_file.is_absolute():
        parser.error("the state directory and the connection file must be absolute paths")
    context_lock = lock_path(args.state_dir, args.owner, check_context(args.context))
    if ended_in_order(sys.stdin.fileno()):
        return 0
    log.info("kernel of context %s ended without removing its sandbox", args.context)
    if taken_over(context_lock, args.connection_file, GRACE_SECONDS):
        return 0
    if not args.state_dir.is_dir():
        return 0  # removed with all it held; taking the lock would make it again
    hold = ProcessLock(context_lock)
    if not hold.try_acquire(note=f"lifeline {os.getpid()}"):
        return 0  # a new kernel process took it this very moment
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
