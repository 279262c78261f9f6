"""The lifeline's decisions that need no engine: leave at once when told, give way to a kernel
process that takes the context over, wait while the kernel lives. What it removes, with a real
engine and kernel, is tested in tests/kernel/test_lifetimes.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

from jupyter_sandbox.sandbox.contexts import ContextLock
from jupyter_sandbox.sandbox.lifeline import GRACE_SECONDS, Lifeline

CONTEXT = "kernel-0123456789abcdef"


def connection_file(directory: Path) -> Path:
    """A kernel's connection file, kept as jupyter_client keeps it across a restart."""
    path = directory / "kernel-1.json"
    path.write_text("{}")
    return path


def test_a_released_lifeline_exits_at_once(state_dir: Path, tmp_path: Path) -> None:
    lifeline = Lifeline.start(state_dir, "alice", CONTEXT, connection_file(tmp_path))
    time.sleep(0.3)
    assert lifeline.process.poll() is None  # waits while the kernel lives
    lifeline.release()
    assert lifeline.process.wait(timeout=5) == 0


def test_a_lifeline_gives_way_to_the_next_kernel_process(state_dir: Path, tmp_path: Path) -> None:
    lifeline = Lifeline.start(state_dir, "alice", CONTEXT, connection_file(tmp_path))
    # The kernel process ends (its end of the pipe closes) and the next one takes the context.
    assert lifeline._write_fd is not None
    os.close(lifeline._write_fd)
    lifeline._write_fd = None
    with ContextLock(state_dir, "alice", CONTEXT) as lock:
        started = time.monotonic()
        assert lifeline.process.wait(timeout=GRACE_SECONDS + 5) == 0
        assert time.monotonic() - started < GRACE_SECONDS  # it saw the new holder: no wait
        assert ContextLock.is_held(lock.path)  # and left it alone


def test_a_lifeline_whose_state_directory_was_removed_leaves_it_removed(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    connection = connection_file(tmp_path)
    lifeline = Lifeline.start(state_dir, "alice", CONTEXT, connection)
    state_dir.rmdir()  # everything removed (a test's clean-up) ...
    connection.unlink()  # ... and the kernel shut down by its client: nothing to wait for
    assert lifeline._write_fd is not None
    os.close(lifeline._write_fd)
    lifeline._write_fd = None
    assert lifeline.process.wait(timeout=GRACE_SECONDS) == 0
    assert not state_dir.exists()  # taking the context's lock would have made it again
