"""`jupyter sandbox stop|restart|pause|resume` as a person without a Jupyter Server runs them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_sandbox.sandbox.backends.base import ExecOptions
from jupyter_sandbox.sandbox.lifecycle.contexts import ContextLock
from jupyter_sandbox.sandbox.manager import SandboxManager
from jupyter_sandbox.sandbox.operations.commands import MAX_STDIN

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


async def sandbox_exec(
    state_dir: Path, *args: str, stdin: str | int | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``jupyter sandbox exec``; ``stdin`` is text piped in, or a file descriptor. Without
    one its input is /dev/null, never this process's own (a pipe that may never end)."""
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "exec"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice"),
        *args,
    ]
    source: dict[str, Any] = (
        {"input": stdin}
        if isinstance(stdin, str)
        else {"stdin": subprocess.DEVNULL if stdin is None else stdin}
    )
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=300, **source
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
    assert (
        "usage: jupyter sandbox exec [-i] [--timeout=SECONDS] [--env NAME=VALUE]... "
        "[--cwd=PATH] SANDBOX_ID -- COMMAND" in usage.stderr
    )


async def test_exec_takes_env_cwd_and_piped_input(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    show = ["sh", "-c", 'printf "%s|%s|%s\\n" "$A" "$B" "$PWD"']
    ran = await sandbox_exec(
        state_dir, "--env", "A=x=1", "--env=B=", "--env", "A=two words", sandbox_id, "--", *show
    )
    assert (ran.returncode, ran.stdout) == (0, "two words||/workspace\n"), ran.stderr
    ran = await sandbox_exec(state_dir, "--cwd=/tmp", sandbox_id, "--", *show)
    assert (ran.returncode, ran.stdout) == (0, "||/tmp\n"), ran.stderr
    # Options after -- are the command's, not exec's.
    ran = await sandbox_exec(state_dir, sandbox_id, "--", "echo", "--cwd=/tmp", "--env", "A=1")
    assert (ran.returncode, ran.stdout) == (0, "--cwd=/tmp --env A=1\n"), ran.stderr

    missing = await sandbox_exec(state_dir, "--cwd=/workspace/nope", sandbox_id, "--", "true")
    assert missing.returncode == 1
    assert missing.stderr.startswith(
        "error: cwd /workspace/nope does not exist in the sandbox: create it first"
    )
    for bad, says in [
        ("--env=NOVALUE", "--env takes NAME=VALUE, not 'NOVALUE': e.g. --env DEBUG=1"),
        ("--env=1A=x", "env name '1A' is not a variable name"),
        ("--env=JUPYTER_SANDBOX_EXEC=x", "env may not set JUPYTER_SANDBOX_EXEC"),
        ("--cwd=tmp", "cwd must be an absolute path in the sandbox"),
    ]:
        refused = await sandbox_exec(state_dir, bad, sandbox_id, "--", "true")
        assert (refused.returncode, refused.stdout) == (1, ""), bad
        assert refused.stderr.startswith(f"error: {says}"), (bad, refused.stderr)

    # With -i, what is piped in is the command's standard input, byte for byte.
    piped = await sandbox_exec(state_dir, "-i", sandbox_id, "--", "cat", stdin="hi\nü\n")
    assert (piped.returncode, piped.stdout) == (0, "hi\nü\n"), piped.stderr
    counted = await sandbox_exec(state_dir, "--stdin", sandbox_id, "--", "wc", "-c")  # /dev/null
    assert (counted.returncode, counted.stdout.strip()) == (0, "0"), counted.stderr
    flood = await sandbox_exec(
        state_dir, "-i", sandbox_id, "--", "wc", "-c", stdin="x" * (MAX_STDIN + 1)
    )
    assert flood.returncode == 1
    assert flood.stderr.startswith("error: standard input may hold at most 16 MiB"), flood.stderr
    assert "jupyter sandbox files put" in flood.stderr

    # Without -i nothing is read, even from a pipe that never closes: the command sees end of
    # file at once instead of the CLI waiting forever.
    never_closed, writer = os.pipe()
    try:
        quick = await sandbox_exec(state_dir, sandbox_id, "--", "cat", stdin=never_closed)
    finally:
        os.close(never_closed)
        os.close(writer)
    assert (quick.returncode, quick.stdout) == (0, ""), quick.stderr


async def test_exec_prints_the_output_as_it_comes(
    manager: SandboxManager, state_dir: Path, purpose: str
) -> None:
    sandbox_id = (await manager.create("alice", runtime="runc", purpose=purpose)).sandbox_id
    command = [
        *(sys.executable, "-m", "jupyter_sandbox.cli", "exec"),
        *(f"--SandboxSettings.state_dir={state_dir}", "--owner=alice", sandbox_id, "--"),
        *("sh", "-c", "echo first; echo err >&2; sleep 2; echo second; printf '\\377'; exit 3"),
    ]

    def lines_as_they_come() -> tuple[list[tuple[float, bytes]], bytes, int]:
        with subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        ) as process:
            assert process.stdout is not None
            assert process.stderr is not None
            arrived = [(time.monotonic(), line) for line in process.stdout]
            return arrived, process.stderr.read(), process.wait(timeout=60)

    arrived, err, status = await asyncio.to_thread(lines_as_they_come)
    assert [line for _, line in arrived] == [b"first\n", b"second\n", b"\xff"]  # byte for byte
    assert arrived[1][0] - arrived[0][0] >= 1.5, arrived  # the first before the command ended
    assert (err, status) == (b"err\n", 3)

    # A reader that stops (| head) stops the command, and the CLI quietly (SIGPIPE's status).
    pipeline = " ".join(f"'{arg}'" for arg in command[:-3]) + " yes | head -n 2"
    cut = await asyncio.to_thread(
        subprocess.run,
        ["bash", "-o", "pipefail", "-c", pipeline],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (cut.returncode, cut.stdout, cut.stderr) == (141, "y\ny\n", ""), cut
    listing = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done"
    left = await manager.exec("alice", sandbox_id, ["sh", "-c", listing], ExecOptions(timeout=30))
    assert b"yes" not in left.stdout.split(), left
