"""`jupyter sandbox stop|restart|pause|resume` as a person without a Jupyter Server runs them."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox import SandboxManager
from jupyter_sandbox.sandbox.contexts import ContextLock

pytestmark = [pytest.mark.integration, pytest.mark.runc]


async def sandbox_cli(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli"),
        *args,
        f"--SandboxSettings.state_dir={state_dir}",
        "--owner=alice",
    ]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=300
    )


async def test_pause_resume_restart_and_stop(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    named = await manager.create("alice", runtime="runc", context="nightly", purpose=purpose)
    plain = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    named_id = named.sandbox_id

    paused = await sandbox_cli("pause", plain, state_dir=state_dir)
    assert (paused.returncode, paused.stdout) == (0, f"paused {plain}\n"), paused.stderr
    assert (await manager.get("alice", plain)).status == "paused"
    frozen = await sandbox_cli("restart", plain, state_dir=state_dir)
    assert frozen.returncode == 1
    assert frozen.stderr == f"error: sandbox {plain} is paused: resume it first\n"
    resumed = await sandbox_cli("resume", plain, state_dir=state_dir)
    assert resumed.returncode == 0, resumed.stderr
    assert (await manager.get("alice", plain)).status == "running"

    restarted = await sandbox_cli("restart", named_id, state_dir=state_dir)
    assert restarted.returncode == 0, restarted.stderr
    assert manager.read_state(named_id)["generation"] == 1  # its kernel answered, a new one

    # A kernel holding the context (here: this process, as a proxy kernel would).
    lock = ContextLock(state_dir, "alice", "nightly")
    lock.acquire()
    try:
        refused = await sandbox_cli("restart", named_id, state_dir=state_dir)
    finally:
        lock.release()
    assert refused.returncode == 1
    assert f"error: sandbox {named_id} is in use by a running kernel" in refused.stderr
    assert manager.read_state(named_id)["generation"] == 1

    stopped = await sandbox_cli("stop", "--context=nightly", state_dir=state_dir)
    assert (stopped.returncode, stopped.stdout) == (0, f"removed {named_id}\n"), stopped.stderr
    gone = await sandbox_cli("stop", "--context=nightly", state_dir=state_dir)
    assert gone.returncode == 1
    assert "no sandbox of alice has context 'nightly'" in gone.stderr
    unknown = await sandbox_cli("stop", "0123456789ab", state_dir=state_dir)
    assert unknown.returncode == 1
    assert "0123456789ab" in unknown.stderr
    assert (await sandbox_cli("stop", plain, state_dir=state_dir)).returncode == 0
    assert await manager.list_sandboxes("alice") == []


async def test_stop_without_a_sandbox_prints_the_usage(state_dir: Path) -> None:
    result = await sandbox_cli("stop", state_dir=state_dir)
    assert result.returncode == 2
    assert "usage: jupyter sandbox stop SANDBOX_ID... | stop --context=NAME" in result.stderr


async def sandbox_exec(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "exec"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice"),
        *args,
    ]
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=300
    )


async def test_exec_prints_the_output_and_exits_with_the_status(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    ran = await sandbox_exec(
        state_dir, sandbox_id, "--", "sh", "-c", "echo out; echo err >&2; exit 7"
    )
    assert (ran.returncode, ran.stdout, ran.stderr) == (7, "out\n", "err\n")
    # what follows -- is the command's, options included
    ran = await sandbox_exec(state_dir, sandbox_id, "--", "ls", "-d", "--", "/workspace")
    assert (ran.returncode, ran.stdout) == (0, "/workspace\n"), ran.stderr
    slow = await sandbox_exec(state_dir, "--timeout=1", sandbox_id, "--", "sleep", "60")
    assert slow.returncode == 124
    assert "ran past its 1s and was killed" in slow.stderr
    bad = await sandbox_exec(state_dir, "--timeout=0", sandbox_id, "--", "true")
    assert bad.returncode == 1
    assert "timeout must be a number of seconds above 0" in bad.stderr
    usage = await sandbox_exec(state_dir, sandbox_id)
    assert usage.returncode == 2
    assert "usage: jupyter sandbox exec [--timeout=SECONDS] SANDBOX_ID -- COMMAND" in usage.stderr
