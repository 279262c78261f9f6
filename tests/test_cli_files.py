"""`jupyter sandbox files ls|get|put|rm` as a person runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox import SandboxManager

pytestmark = [pytest.mark.integration, pytest.mark.runc]
JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli", "files"]


async def files_cli(
    *args: str, state_dir: Path, stdin: bytes = b"", cwd: Path | None = None
) -> subprocess.CompletedProcess[bytes]:
    command = [*JUPYTER, *args, f"--SandboxSettings.state_dir={state_dir}", "--owner=alice"]
    return await asyncio.to_thread(
        subprocess.run, command, input=stdin, capture_output=True, timeout=300, cwd=cwd
    )


async def test_put_ls_get_rm(
    manager: SandboxManager, state_dir: Path, tmp_path: Path, purpose: str
) -> None:
    sandbox = await manager.create("alice", runtime="runc", purpose=purpose)
    sandbox_id = sandbox.sandbox_id
    local = tmp_path / "local.bin"
    local.write_bytes(os.urandom(100_000))

    put = await files_cli("put", sandbox_id, str(local), "in/data.bin", state_dir=state_dir)
    assert put.returncode == 0, put.stderr
    assert put.stdout.decode() == "/workspace/in/data.bin (100000 bytes)\n"
    piped = await files_cli("put", sandbox_id, "-", "in/note.txt", state_dir=state_dir, stdin=b"hi")
    assert piped.returncode == 0, piped.stderr

    listed = await files_cli("ls", sandbox_id, "in", state_dir=state_dir)
    lines = listed.stdout.decode().splitlines()
    assert lines[0] == "/workspace/in"
    assert [line.split()[-1] for line in lines[1:]] == ["data.bin", "note.txt"]
    assert (
        (await files_cli("ls", sandbox_id, state_dir=state_dir)).stdout.decode().endswith("in/\n")
    )

    got = await files_cli("get", sandbox_id, "in/data.bin", state_dir=state_dir)
    assert got.stdout == local.read_bytes()
    saved = await files_cli(
        "get", sandbox_id, "in/note.txt", "--output=copy.txt", state_dir=state_dir, cwd=tmp_path
    )
    assert saved.returncode == 0, saved.stderr
    assert (tmp_path / "copy.txt").read_bytes() == b"hi"

    removed = await files_cli("rm", sandbox_id, "in", state_dir=state_dir)
    assert removed.returncode == 0, removed.stderr
    missing = await files_cli(
        "get", sandbox_id, "in/note.txt", "--output=gone.txt", state_dir=state_dir, cwd=tmp_path
    )
    assert missing.returncode == 1
    assert missing.stderr.decode() == (
        f"error: sandbox {sandbox_id}: no such file or directory: /workspace/in/note.txt\n"
    )
    assert sorted(os.listdir(tmp_path)) == ["copy.txt", "local.bin"]  # no half file left


async def test_wrong_arguments_print_the_usage(state_dir: Path) -> None:
    result = await files_cli("put", "0123456789ab", "only-two", state_dir=state_dir)
    assert result.returncode == 2
    assert b"usage: jupyter sandbox files put SANDBOX_ID LOCAL_FILE PATH" in result.stderr
