"""Persist and hydrate through real sandboxes: what goes in comes out, byte for byte."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import (
    MemorySnapshotUnsupportedError,
    SnapshotIntegrityError,
)
from jupyter_sandbox.sandbox.manager import Sandbox, SandboxManager
from jupyter_sandbox.sandbox.snapshots.service import Snapshots
from tests.sandbox.snapshots.workspace_files import OWNER, VARIED, manifest, sh

pytestmark = pytest.mark.integration


@pytest.fixture
def snapshots(manager: SandboxManager, tmp_path: Path) -> Snapshots:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    return manager.snapshots


@pytest.mark.parametrize("transport", ["exec", "host-dir"])
async def test_round_trip_into_a_new_and_the_same_sandbox(
    manager: SandboxManager,
    snapshots: Snapshots,
    sandbox: Sandbox,
    runtime: str,
    purpose: str,
    transport: str,
) -> None:
    snapshots.transport = transport
    await sh(manager, sandbox.sandbox_id, VARIED)
    before = await manifest(manager, sandbox.sandbox_id)
    snapshot = await snapshots.persist(OWNER, sandbox.sandbox_id, note="varied")
    assert snapshot["source"] == {
        "sandbox": sandbox.sandbox_id,
        "image": sandbox.info.image,
        "runtime": runtime,
    }
    assert [s["id"] for s in snapshots.list_snapshots(OWNER)] == [snapshot["id"]]

    # setuid is dropped on restore; everything else is as it was.
    expected = dict(before)
    expected["suid.sh"] = ["file", "0o755", *before["suid.sh"][2:]]
    assert before["suid.sh"][1] == "0o4755"

    restored = await snapshots.create_sandbox(
        OWNER, snapshot["id"], runtime=runtime, purpose=purpose
    )
    assert restored.sandbox_id != sandbox.sandbox_id
    assert await manifest(manager, restored.sandbox_id) == expected

    # The same sandbox: files removed or changed since come back; new files stay.
    await sh(
        manager,
        sandbox.sandbox_id,
        "rm -rf /workspace/docs && echo changed > /workspace/run.sh && echo new > /workspace/n",
    )
    await snapshots.hydrate(OWNER, snapshot["id"], sandbox.sandbox_id)
    after = await manifest(manager, sandbox.sandbox_id)
    assert after.pop("n")[0] == "file"
    assert after == {**expected, "suid.sh": after["suid.sh"]}
    # Nothing of the transport is left in the sandbox's host directory.
    io_dir = manager.settings.state_path / sandbox.sandbox_id / "io"
    assert [n for n in os.listdir(io_dir) if n.startswith(".snapshot")] == []


@pytest.mark.runc
@pytest.mark.parametrize("transport", ["exec", "host-dir"])
async def test_where_no_sealed_archive_can_be_made_tar_runs_in_the_sandbox(
    manager: SandboxManager,
    snapshots: Snapshots,
    purpose: str,
    transport: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A runc server that is not root cannot read a frozen sandbox (sealed_archive.py): the
    archive is made in the sandbox as before, over either transport, and the log says that
    its code could forge it. (The server here is root: the backend is told it is not.)"""
    snapshots.transport = transport
    reason = "under runc only a server running as root can read a frozen sandbox (test)"
    monkeypatch.setattr(manager.backend, "why_not_sealed", lambda runtime: reason)
    source = await manager.create(OWNER, runtime="runc", purpose=purpose)
    await sh(manager, source.sandbox_id, VARIED)
    before = await manifest(manager, source.sandbox_id)
    with caplog.at_level(logging.WARNING, "jupyter_sandbox.sandbox.snapshots.persist"):
        snapshot = await snapshots.persist(OWNER, source.sandbox_id)
    assert f"archived in the sandbox: {reason}" in caplog.text
    restored = await snapshots.create_sandbox(
        OWNER, snapshot["id"], runtime="runc", purpose=purpose
    )
    expected = {**before, "suid.sh": ["file", "0o755", *before["suid.sh"][2:]]}
    assert await manifest(manager, restored.sandbox_id) == expected


@pytest.mark.runc
async def test_a_200_mb_workspace_is_byte_identical(
    manager: SandboxManager, snapshots: Snapshots, purpose: str
) -> None:
    """LARGE: 200 MiB of random bytes (plus small files) through persist and hydrate, over
    the exec stream (memory-bounded streaming at size; the default transport is covered by the
    round trips above)."""
    snapshots.transport = "exec"
    source = await manager.create(OWNER, runtime="runc", purpose=purpose)
    await sh(
        manager,
        source.sandbox_id,
        "head -c 200M /dev/urandom > /workspace/big.bin && mkdir /workspace/d && "
        "head -c 5M /dev/urandom > /workspace/d/five.bin",
    )
    before = await manifest(manager, source.sandbox_id)
    assert before["big.bin"][2] == 200 * 1024**2
    snapshot = await snapshots.persist(OWNER, source.sandbox_id)
    assert snapshot["file_bytes"] == 205 * 1024**2
    await manager.remove(OWNER, source.sandbox_id)
    restored = await snapshots.create_sandbox(
        OWNER, snapshot["id"], runtime="runc", purpose=purpose
    )
    assert await manifest(manager, restored.sandbox_id) == before


@pytest.mark.runc
async def test_a_changed_snapshot_is_not_restored(
    manager: SandboxManager, snapshots: Snapshots, purpose: str
) -> None:
    source = await manager.create(OWNER, runtime="runc", purpose=purpose)
    await sh(manager, source.sandbox_id, "echo original > /workspace/f")
    snapshot = await snapshots.persist(OWNER, source.sandbox_id)
    path = snapshots.archive_path(OWNER, snapshot["id"])
    data = path.read_bytes()
    path.write_bytes(data.replace(b"original", b"tampered"))
    await sh(manager, source.sandbox_id, "rm /workspace/f")
    with pytest.raises(SnapshotIntegrityError):
        await snapshots.hydrate(OWNER, snapshot["id"], source.sandbox_id)
    assert await manifest(manager, source.sandbox_id) == {}
    # The clean archive staged while the archive was read (host-dir) is gone, never unpacked.
    io_dir = manager.settings.state_path / source.sandbox_id / "io"
    assert [n for n in os.listdir(io_dir) if n.startswith(".snapshot")] == []


@pytest.mark.runc
async def test_memory_snapshot_is_refused_before_touching_the_sandbox(
    manager: SandboxManager, snapshots: Snapshots, purpose: str
) -> None:
    source = await manager.create(OWNER, runtime="runc", purpose=purpose)
    for attempt in (
        snapshots.persist(OWNER, source.sandbox_id, kind="memory"),
        snapshots.checkpoint(OWNER, source.sandbox_id),
    ):
        with pytest.raises(MemorySnapshotUnsupportedError) as refused:
            await attempt
        assert refused.value.code == "memory_snapshot_refused"  # the sandbox's runtime: 409
        assert "runc" in refused.value.message
        assert "/workspace" in refused.value.message
    assert (await manager.get(OWNER, source.sandbox_id)).running
    assert snapshots.list_snapshots(OWNER) == []
    # The kernel still answers.
    await manager.attach(OWNER, source.sandbox_id)


@pytest.mark.runc
async def test_files_beside_the_notebook_are_kept(
    manager: SandboxManager, snapshots: Snapshots, purpose: str, tmp_path: Path
) -> None:
    """A copy-on-write /workspace: the launch directory's files and the sandbox's own writes
    are both in the snapshot; the launch directory itself is never written."""
    launch = tmp_path / "notebooks"
    launch.mkdir()
    (launch / "data.csv").write_text("a,b\n1,2\n")
    source = await manager.create(OWNER, runtime="runc", launch_dir=str(launch), purpose=purpose)
    await sh(manager, source.sandbox_id, "echo result > /workspace/out.txt")
    snapshot = await snapshots.persist(OWNER, source.sandbox_id)
    restored = await snapshots.create_sandbox(
        OWNER, snapshot["id"], runtime="runc", purpose=purpose
    )
    files = await manifest(manager, restored.sandbox_id)
    assert sorted(files) == ["data.csv", "out.txt"]
    assert sorted(os.listdir(launch)) == ["data.csv"]
