"""Snapshots without a sandbox: importing archives, the per-owner quota, owner checks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from traitlets.config import Config

from jupyter_sandbox.protocol.errors import QuotaExceededError
from jupyter_sandbox.protocol.snapshot_errors import SnapshotNotFoundError, UnsafeArchiveError
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.sandbox.snapshots.archives import Member, tar_bytes


@pytest.fixture
def manager(tmp_path: Path) -> SandboxManager:
    config = Config()
    config.SandboxSettings.state_dir = str(tmp_path / "state")
    config.Snapshots.snapshot_dir = str(tmp_path / "snapshots")
    config.Snapshots.max_snapshots = 2
    return SandboxManager.from_config(config)  # no engine is reached by these tests


async def test_import_quota_and_owners(manager: SandboxManager, tmp_path: Path) -> None:
    snapshots = manager.snapshots
    assert snapshots.snapshot_dir == str(tmp_path / "snapshots")
    good = tar_bytes(Member("a.txt", data=b"a"))
    first = await snapshots.import_archive("alice", good, note="one")
    path = tmp_path / "upload.tar"
    path.write_bytes(good)
    second = await snapshots.import_archive("alice", path)
    assert [s["id"] for s in snapshots.list_snapshots("alice")] == [first["id"], second["id"]]
    with pytest.raises(QuotaExceededError):
        await snapshots.import_archive("alice", good)
    assert len(snapshots.list_snapshots("alice")) == 2
    # bob's quota is his own; alice's snapshots are not his.
    await snapshots.import_archive("bob", good)
    with pytest.raises(SnapshotNotFoundError):
        snapshots.get("bob", first["id"])
    with pytest.raises(SnapshotNotFoundError):
        snapshots.archive_path("bob", first["id"])


async def test_a_refused_import_stores_nothing(manager: SandboxManager, tmp_path: Path) -> None:
    bad = tar_bytes(Member("ok", data=b"x"), Member("/etc/passwd", data=b"x"))
    with pytest.raises(UnsafeArchiveError):
        await manager.snapshots.import_archive("alice", bad)
    owner_dir = manager.snapshots.store.owner_dir("alice")
    assert os.listdir(owner_dir) == []
