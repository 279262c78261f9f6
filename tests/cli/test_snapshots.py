"""`jupyter sandbox snapshot create|list|restore|delete` as a person runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from jupyter_sandbox.sandbox.manager import SandboxManager

pytestmark = [pytest.mark.integration, pytest.mark.runc]
JUPYTER = [sys.executable, "-m", "jupyter_sandbox.cli", "snapshot"]


async def snapshot_cli(
    *args: str, state_dir: Path, snapshot_dir: Path, purpose: str
) -> subprocess.CompletedProcess[str]:
    command = [
        *JUPYTER,
        *args,
        f"--SandboxSettings.state_dir={state_dir}",
        f"--Snapshots.snapshot_dir={snapshot_dir}",
        "--SandboxSettings.runtime=runc",
        "--owner=alice",
    ]
    env = {**os.environ, "JUPYTER_SANDBOX_PURPOSE": purpose}
    return await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=300, env=env
    )


async def test_create_list_restore_delete(
    manager: SandboxManager, state_dir: Path, tmp_path: Path, purpose: str
) -> None:
    def cli(*args: str) -> asyncio.Future[subprocess.CompletedProcess[str]]:
        return asyncio.ensure_future(
            snapshot_cli(*args, state_dir=state_dir, snapshot_dir=tmp_path, purpose=purpose)
        )

    source = await manager.create("alice", runtime="runc", purpose=purpose)
    await manager.exec("alice", source.sandbox_id, ["sh", "-c", "echo kept > /workspace/f"])

    made = await cli("create", source.sandbox_id, "--note=from the cli")
    assert made.returncode == 0, made.stderr
    snapshot_id = made.stdout.strip()
    listed = await cli("list")
    assert snapshot_id in listed.stdout
    assert "from the cli" in listed.stdout

    restored = await cli("restore", snapshot_id)
    assert restored.returncode == 0, restored.stderr
    new_id = restored.stdout.strip()
    result = await manager.exec("alice", new_id, ["cat", "/workspace/f"])
    assert result.stdout == b"kept\n"

    await manager.exec("alice", source.sandbox_id, ["rm", "/workspace/f"])
    into = await cli("restore", snapshot_id, f"--sandbox={source.sandbox_id}")
    assert into.returncode == 0, into.stderr
    result = await manager.exec("alice", source.sandbox_id, ["cat", "/workspace/f"])
    assert result.stdout == b"kept\n"

    assert (await cli("delete", snapshot_id)).returncode == 0
    gone = await cli("delete", snapshot_id)
    assert gone.returncode == 1
    assert f"no snapshot {snapshot_id}" in gone.stderr
    bad = await cli("restore", "../../etc")
    assert bad.returncode == 1
    assert "16 hex digits" in bad.stderr
