"""Bad archives sent to a real sandbox: refused before anything is written, in the sandbox or
on the host; a symlink planted in the target is never followed; a full snapshot disk leaves
the source sandbox as it was."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import (
    ArchiveTooLargeError,
    SnapshotStorageFullError,
    SnapshotTooLargeError,
    UnsafeArchiveError,
)
from jupyter_sandbox.sandbox.manager import SandboxManager
from tests.sandbox.snapshots.archives import Member, huge_declared_file, tar_bytes
from tests.sandbox.snapshots.test_archive_rules import REFUSED
from tests.sandbox.snapshots.workspace_files import OWNER, manifest, sh

pytestmark = [pytest.mark.integration, pytest.mark.runc]


def files_under(directory: Path) -> list[str]:
    return [os.path.join(top, f) for top, _, files in os.walk(directory) for f in files]


async def test_every_refused_archive_writes_nothing(
    manager: SandboxManager, purpose: str, tmp_path: Path
) -> None:
    manager.snapshots.snapshot_dir = str(tmp_path / "snapshots")
    sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose)
    sandbox_id = sandbox.sandbox_id
    await sh(manager, sandbox_id, "mkdir /workspace/sub && echo keep > /workspace/keep")
    workspace, tmp = (
        await manifest(manager, sandbox_id),
        await manifest(manager, sandbox_id, "/tmp"),
    )
    cwd_before = sorted(os.listdir(Path.cwd()))
    # A good member first in each: it must not be written either.
    first = Member("written-before-the-bad-member.txt", data=b"x")
    archives = {case: tar_bytes(first, *members) for case, (members, _, _) in REFUSED.items()}
    archives["huge declared size"] = huge_declared_file("bomb", 1024**4)
    for case, data in sorted(archives.items()):
        with pytest.raises(UnsafeArchiveError):
            await manager.snapshots.hydrate_bytes(OWNER, sandbox_id, data)
        assert await manifest(manager, sandbox_id) == workspace, case
    assert await manifest(manager, sandbox_id, "/tmp") == tmp
    assert sorted(os.listdir(Path.cwd())) == cwd_before
    assert "escape.txt" not in os.listdir("/")
    assert files_under(tmp_path / "snapshots") == []


async def test_a_planted_symlink_in_the_target_is_not_followed(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose)
    sandbox_id = sandbox.sandbox_id
    await sh(manager, sandbox_id, "ln -s /tmp /workspace/docs")
    data = tar_bytes(Member("docs", "dir"), Member("docs/a.txt", data=b"x"))
    with pytest.raises(UnsafeArchiveError) as refused:
        await manager.snapshots.hydrate_bytes(OWNER, sandbox_id, data)
    assert refused.value.rule == "target-symlink"
    assert refused.value.member == "docs"
    assert "a.txt" not in await manifest(manager, sandbox_id, "/tmp")
    assert await manifest(manager, sandbox_id) == {"docs": ["link", "/tmp"]}


async def test_archives_larger_than_the_caps_or_the_workspace(
    manager: SandboxManager, purpose: str
) -> None:
    sandbox = await manager.create(
        OWNER, runtime="runc", limits={"workspace_size": "1m"}, purpose=purpose
    )
    too_big = tar_bytes(Member("f", data=bytes(2 * 1024**2)))
    with pytest.raises(SnapshotTooLargeError):
        await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, too_big)
    manager.snapshots.max_members = 3
    many = tar_bytes(*(Member(f"f{i}") for i in range(4)))
    with pytest.raises(ArchiveTooLargeError):
        await manager.snapshots.hydrate_bytes(OWNER, sandbox.sandbox_id, many)
    assert await manifest(manager, sandbox.sandbox_id) == {}


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A real 4 MiB tmpfs for snapshots, unmounted after the test (mounting needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = Path(tempfile.mkdtemp(prefix="jsbx-snapdisk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
        mountpoint.rmdir()


@pytest.mark.resilience(
    scenario="fault: the snapshot disk full (a real 4 MiB tmpfs) while persisting 12 MiB",
    expected="a clear error naming the disk; no partial snapshot listed or left; the source "
    "sandbox untouched and running",
)
@pytest.mark.parametrize("transport", ["host-dir", "exec"])
async def test_a_full_snapshot_disk_leaves_the_source_untouched(
    manager: SandboxManager,
    purpose: str,
    small_disk: Path,
    transport: str,
    observe: Callable[..., None],
) -> None:
    manager.snapshots.snapshot_dir = str(small_disk)
    manager.snapshots.transport = transport
    sandbox = await manager.create(OWNER, runtime="runc", purpose=purpose)
    await sh(manager, sandbox.sandbox_id, "head -c 12M /dev/urandom > /workspace/data.bin")
    before = await manifest(manager, sandbox.sandbox_id)
    with pytest.raises(SnapshotStorageFullError) as full:
        await manager.snapshots.persist(OWNER, sandbox.sandbox_id)
    assert str(small_disk) in full.value.message
    assert manager.snapshots.list_snapshots(OWNER) == []
    assert files_under(small_disk) == []
    assert (await manager.get(OWNER, sandbox.sandbox_id)).running
    assert await manifest(manager, sandbox.sandbox_id) == before
    observe(f"{transport} transport: {full.value.code}: {full.value.message[:140]}")
