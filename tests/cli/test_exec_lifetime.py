"""A ``jupyter sandbox exec`` killed with SIGKILL leaves nothing running in its sandbox (issue 38).

The CLI is a real process the test kills; the command runs in a real sandbox, on both runtimes.
Nothing in a SIGKILLed process can act, and the engine lets an exec run on when its attach
connection drops, so this is what the CLI's exec watcher (sandbox/backends/docker/exec_watcher.py) is for.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.cli import cli_processes

pytestmark = pytest.mark.integration

GONE_SECONDS = 10.0  # the bound
# Every process's command line in the sandbox, one a line (a marker argument finds the command).
LISTING = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"


async def commands_in(manager: SandboxManager, sandbox_id: str, marker: str) -> list[str]:
    """The command lines in the sandbox that hold ``marker`` as an argument."""
    listed = await manager.exec("alice", sandbox_id, ["sh", "-c", LISTING], ExecOptions(timeout=30))
    return [line for line in listed.stdout.decode().splitlines() if marker in line.split()]


@pytest.mark.checklist(
    row=69,
    attack="a `jupyter sandbox exec` of a long command is killed with SIGKILL (an agent's "
    "script or a terminal killed)",
    expected="within 10 s no process of the command is left in the sandbox; the sandbox stays",
)
async def test_a_killed_exec_leaves_no_process(
    manager: SandboxManager,
    state_dir: Path,
    runtime: str,
    purpose: str,
    observe: Callable[..., None],
) -> None:
    sandbox_id = (await manager.create("alice", runtime=runtime, purpose=purpose)).sandbox_id
    marker = "301.5"  # sleep's argument, which nothing else in the sandbox has
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "exec"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice", sandbox_id, "--"),
        *("sh", "-c", f"echo started; sleep {marker}"),
    ]
    cli = await asyncio.to_thread(
        subprocess.Popen,
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert cli.stdout is not None
        # Its first line: the command runs in the sandbox.
        assert await asyncio.to_thread(cli.stdout.readline) == b"started\n"
        assert await commands_in(manager, sandbox_id, marker) != []
        cli.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        await asyncio.to_thread(cli.wait, 30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        if cli.stdout is not None:
            cli.stdout.close()
    left = await commands_in(manager, sandbox_id, marker)
    while left and time.monotonic() - killed < GONE_SECONDS:
        await asyncio.sleep(0.2)
        left = await commands_in(manager, sandbox_id, marker)
    assert left == [], f"still running {GONE_SECONDS:g}s after the CLI's SIGKILL: {left}"
    observe(f"the command was gone {time.monotonic() - killed:.1f}s after the CLI's SIGKILL")
    # The sandbox was not the CLI's to remove: it stays, and runs the next command.
    assert (
        await manager.exec("alice", sandbox_id, ["true"], ExecOptions(timeout=30))
    ).exit_code == 0


def watchers_of(sandbox_id: str) -> list[int]:
    return cli_processes.watchers_of(
        "jupyter_sandbox.sandbox.backends.docker.exec_watcher", sandbox_id
    )


async def test_an_exec_that_ends_stands_its_watcher_down(
    manager: SandboxManager, state_dir: Path, runtime: str, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime=runtime, purpose=purpose)).sandbox_id
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "exec"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice", sandbox_id, "--", "true"),
    ]
    ran = await asyncio.to_thread(
        subprocess.run, command, stdin=subprocess.DEVNULL, capture_output=True, timeout=120
    )
    assert ran.returncode == 0, ran.stderr
    # Its stderr is the CLI's: the read above ended only once the watcher had exited too.
    assert watchers_of(sandbox_id) == []
    assert ran.stderr == b""
