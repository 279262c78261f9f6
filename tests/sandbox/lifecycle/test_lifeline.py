"""The lifeline's decisions that need no engine: leave at once when told, give way to a kernel
process that takes the context over, wait while the kernel lives. What it removes, with a real
engine and kernel, is tested in tests/kernel/test_lifetimes.py.

The kernel whose lifeline is watched is a process of its own here (``KERNEL``), killed with
SIGKILL as jupyter_client's ``shutdown_kernel(now=True)`` kills one: the lifeline acts once the
kernel process has ended, not merely closed its end of the pipe."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock, lock_path
from jupyter_sandbox.sandbox.lifecycle.lifeline import GRACE_SECONDS, Lifeline

CONTEXT = "kernel-0123456789abcdef"

# A kernel process: it takes its context's lock if asked, starts its lifeline, says the
# lifeline's pid and waits to be killed. With "dying", it first closes its end of the pipe and
# keeps the lock: a killed process closes its files one at a time, and its pipe may go before
# its lock; here that instant lasts until the test kills it.
KERNEL = """
import os, sys, time
from pathlib import Path
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock
from jupyter_sandbox.sandbox.lifecycle.lifeline import Lifeline
state_dir, connection_file, context, how = Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:]
if how == "dying":
    ContextLock(state_dir, "alice", context).acquire()
lifeline = Lifeline.start(state_dir, "alice", context, connection_file)
if how == "dying":
    os.close(lifeline._write_fd)
print(lifeline.process.pid, flush=True)
time.sleep(60)
"""


def connection_file(directory: Path) -> Path:
    """A kernel's connection file, kept as jupyter_client keeps it across a restart."""
    path = directory / "kernel-1.json"
    path.write_text("{}")
    return path


@contextmanager
def kernel_process(
    state_dir: Path, connection: Path, how: str = "running"
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """A ``KERNEL`` process and a pidfd of its lifeline; the kernel is killed at the end."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", KERNEL, str(state_dir), str(connection), CONTEXT, how],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert kernel.stdout is not None
    try:
        lifeline = os.pidfd_open(int(kernel.stdout.readline()))
        try:
            yield kernel, lifeline
        finally:
            os.close(lifeline)
    finally:
        kernel.kill()
        kernel.wait(timeout=10)
        kernel.stdout.close()


def kill(kernel: subprocess.Popen[str]) -> None:
    kernel.send_signal(signal.SIGKILL)
    kernel.wait(timeout=10)


def ends_within(pidfd: int, seconds: float) -> bool:
    readable, _, _ = select.select([pidfd], [], [], seconds)
    return bool(readable)


def test_a_released_lifeline_exits_at_once(state_dir: Path, tmp_path: Path) -> None:
    lifeline = Lifeline.start(state_dir, "alice", CONTEXT, connection_file(tmp_path))
    time.sleep(0.3)
    assert lifeline.process.poll() is None  # waits while the kernel lives
    lifeline.release()
    assert lifeline.process.wait(timeout=5) == 0


def test_a_lifeline_gives_way_to_the_next_kernel_process(state_dir: Path, tmp_path: Path) -> None:
    # The next process of the kernel takes the context, and this one ends.
    with (
        kernel_process(state_dir, connection_file(tmp_path)) as (kernel, lifeline),
        ContextLock(state_dir, "alice", CONTEXT) as lock,
    ):
        kill(kernel)
        started = time.monotonic()
        assert ends_within(lifeline, GRACE_SECONDS + 5)
        assert time.monotonic() - started < GRACE_SECONDS  # it saw the new holder: no wait
        assert ContextLock.is_held(lock.path)  # and left it alone


def test_a_lifeline_whose_state_directory_was_removed_leaves_it_removed(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    connection = connection_file(tmp_path)
    with kernel_process(state_dir, connection) as (kernel, lifeline):
        state_dir.rmdir()  # everything removed (a test's clean-up) ...
        connection.unlink()  # ... and the kernel shut down by its client: nothing to wait for
        kill(kernel)
        assert ends_within(lifeline, GRACE_SECONDS)
    assert not state_dir.exists()  # taking the context's lock would have made it again


def test_a_lifeline_does_not_take_its_dying_kernel_for_the_next(
    state_dir: Path, tmp_path: Path
) -> None:
    """The lock a killed kernel still holds for an instant is not a new process's: the lifeline
    waits for the kernel process to have ended, then removes (here it takes the context and
    finds no sandbox). Before, it gave way, and the sandbox stayed (issue 38)."""
    connection = tmp_path / "kernel-1.json"  # gone: the kernel's client shut it down
    with kernel_process(state_dir, connection, "dying") as (kernel, lifeline):
        # Time for the lifeline to start, read end of file and look at the lock: it must still
        # be waiting, for the kernel process to end.
        assert not ends_within(lifeline, 3.0)
        kill(kernel)
        assert ends_within(lifeline, GRACE_SECONDS)
    # It took the context, as a kernel gone for good leaves it, and let go of it, file and all.
    assert not lock_path(state_dir, "alice", CONTEXT).exists()
