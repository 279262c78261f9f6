"""`jupyter sandbox terminal`: a shell in a sandbox from a real pseudo-terminal, as a person at
a terminal window uses it."""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager

pytestmark = [pytest.mark.integration, pytest.mark.runc]


def cli(sandbox_id: str, state_dir: Path) -> list[str]:
    return [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "terminal", sandbox_id),
        f"--SandboxSettings.state_dir={state_dir}",
        "--owner=alice",
    ]


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def read_until(fd: int, wanted: str, seen: list[str], timeout: float = 60) -> None:
    """Read the pseudo-terminal until ``wanted`` has appeared in what was read after ``seen``."""
    start = len("".join(seen))
    deadline = time.monotonic() + timeout
    while wanted not in "".join(seen)[start:]:
        left = deadline - time.monotonic()
        assert left > 0, f"{wanted!r} never appeared; the terminal showed: {''.join(seen)!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                seen.append(os.read(fd, 65536).decode(errors="replace"))
            except OSError:  # the other side closed
                assert wanted in "".join(seen)[start:], "".join(seen)
                return


async def test_a_shell_in_a_pseudo_terminal(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    controller, terminal = os.openpty()
    set_size(terminal, 30, 100)
    process = await asyncio.create_subprocess_exec(
        *cli(sandbox_id, state_dir), stdin=terminal, stdout=terminal, stderr=terminal
    )
    os.close(terminal)
    seen: list[str] = []
    try:
        # Typed after the prompt: bash flushes what was typed before its line editor started.
        await asyncio.to_thread(read_until, controller, "$ ", seen)
        os.write(controller, b"stty size; pwd; echo $((6*7))x\r")
        await asyncio.to_thread(read_until, controller, "42x", seen)
        shown = "".join(seen)
        assert "30 100" in shown
        assert "/workspace" in shown

        set_size(controller, 40, 120)  # the window grew: the CLI hears SIGWINCH
        process.send_signal(signal.SIGWINCH)
        await asyncio.sleep(0.5)  # the resize is asynchronous
        os.write(controller, b"stty size\r")
        await asyncio.to_thread(read_until, controller, "40 120", seen)

        os.write(controller, b"sleep 1234 &\r")  # left running: exit must end it too
        os.write(controller, b"exit\r")
        assert await asyncio.wait_for(process.wait(), 60) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(controller)

    listing = await manager.exec(
        "alice", sandbox_id, ["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"]
    )
    processes = listing.stdout.decode()
    assert "sandbox-init" in processes  # the listing sees the sandbox's processes
    assert "sleep 1234" not in processes


async def test_its_exit_status_is_the_shells_or_the_signals(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    for ending, status in ((b"exit 7\r", 7), (None, 128 + signal.SIGTERM)):
        controller, terminal = os.openpty()
        set_size(terminal, 30, 100)  # a new pty is 0 x 0: the prompt would wrap at each character
        process = await asyncio.create_subprocess_exec(
            *cli(sandbox_id, state_dir), stdin=terminal, stdout=terminal, stderr=terminal
        )
        os.close(terminal)
        try:
            await asyncio.to_thread(read_until, controller, "$ ", [])
            if ending is None:
                process.send_signal(signal.SIGTERM)
            else:
                os.write(controller, ending)
            assert await asyncio.wait_for(process.wait(), 60) == status
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
            os.close(controller)


async def test_without_a_terminal_it_says_what_to_use(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    result = await asyncio.to_thread(
        subprocess.run,
        cli(sandbox_id, state_dir),
        input="",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "needs a terminal" in result.stderr
    assert f"jupyter sandbox exec -i {sandbox_id} -- COMMAND" in result.stderr
