"""A ``jupyter sandbox run`` killed with SIGKILL leaves no code running in the sandbox's
interpreter (issue 38).

The CLI is a real process the test kills; the code runs in a real sandbox's kernel, on both
runtimes. Nothing in a SIGKILLed process can act, and the kernel runs the code on, with every
later run and cell queued behind it: this is what the CLI's run watcher
(sandbox/operations/run_watcher.py) is for.
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

from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.code_runs import CodeRequest, run_code
from tests.cli import cli_processes

pytestmark = pytest.mark.integration

GONE_SECONDS = 10.0  # the bound
LONG_CODE = "import time\nprint('started', flush=True)\ntime.sleep(600)"


def run_command(state_dir: Path, sandbox_id: str, code: str) -> list[str]:
    return [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "run"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice", sandbox_id, code),
    ]


def watchers_of(sandbox_id: str) -> list[int]:
    return cli_processes.watchers_of("jupyter_sandbox.sandbox.operations.run_watcher", sandbox_id)


@pytest.mark.checklist(
    row=71,
    attack="a `jupyter sandbox run` of long code is killed with SIGKILL (an agent's script or "
    "a terminal killed)",
    expected="within 10 s its code is interrupted: the interpreter answers the next run, with "
    "what earlier runs left; the sandbox stays",
)
async def test_a_killed_run_leaves_no_code_running(
    manager: SandboxManager,
    state_dir: Path,
    tmp_path: Path,
    runtime: str,
    purpose: str,
    observe: Callable[..., None],
) -> None:
    sandbox_id = (await manager.create("alice", runtime=runtime, purpose=purpose)).sandbox_id
    await run_code(manager, "alice", sandbox_id, CodeRequest(code="kept = 41"))
    # The CLI's standard error is its run watcher's too: what it did, should the test fail.
    stderr = tmp_path / "cli.stderr"
    with stderr.open("wb") as stderr_file:
        cli = await asyncio.to_thread(
            subprocess.Popen,
            run_command(state_dir, sandbox_id, LONG_CODE),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr_file,
        )
    try:
        assert cli.stdout is not None
        # Its first line: the code runs in the sandbox.
        assert await asyncio.to_thread(cli.stdout.readline) == b"started\n"
        cli.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        await asyncio.to_thread(cli.wait, 30)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
        if cli.stdout is not None:
            cli.stdout.close()
    # Queued behind the killed run's code, this would wait its 600 s.
    after = asyncio.ensure_future(
        run_code(manager, "alice", sandbox_id, CodeRequest(code="print(kept + 1)"))
    )
    if not (await asyncio.wait({after}, timeout=GONE_SECONDS))[0]:
        # The queued run ends (without a result) once its sandbox is gone.
        await manager.remove("alice", sandbox_id)
        await asyncio.gather(after, return_exceptions=True)
        watcher_log = stderr.read_text(errors="replace")
        pytest.fail(f"the killed run's code still ran {GONE_SECONDS:g} s on; CLI: {watcher_log}")
    assert (after.result().status, after.result().stdout) == ("ok", "42\n")
    observe(f"the next run answered {time.monotonic() - killed:.1f}s after the CLI's SIGKILL")
    await wait_until_no_watcher(sandbox_id)


async def wait_until_no_watcher(sandbox_id: str) -> None:
    for _ in range(100):
        if not watchers_of(sandbox_id):
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"run watcher(s) {watchers_of(sandbox_id)} still running")


async def test_a_run_that_ends_stands_its_watcher_down(
    manager: SandboxManager, state_dir: Path, runtime: str, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime=runtime, purpose=purpose)).sandbox_id
    ran = await asyncio.to_thread(
        subprocess.run,
        run_command(state_dir, sandbox_id, "print(6 * 7)"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"42\n", b"")
    # Its stderr is the CLI's: the read above ended only once the watcher had exited too.
    assert watchers_of(sandbox_id) == []
    # And it interrupted nothing: the next code runs its whole time.
    after = await run_code(
        manager, "alice", sandbox_id, CodeRequest(code="import time; time.sleep(2); print('slept')")
    )
    assert (after.status, after.stdout) == ("ok", "slept\n")
