"""Snapshot storage: one directory per owner, single-segment ids, atomic writes, and a full
disk (a real, small tmpfs) that leaves nothing half-written."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_sandbox.protocol.snapshot_errors import SnapshotNotFoundError, SnapshotStorageFullError
from jupyter_sandbox.sandbox.snapshots import storage
from jupyter_sandbox.sandbox.snapshots.storage import (
    SnapshotStore,
    check_snapshot_id,
    new_snapshot_id,
)
from tests.sandbox.snapshots.archives import Member, tar_bytes


def store_one(store: SnapshotStore, owner: str, data: bytes) -> dict[str, object]:
    with store.new_archive(owner) as (out, temporary):
        out.write(data)
        return store.commit(owner, temporary, {"id": new_snapshot_id(), "created": "now"})


def test_owner_isolation_and_ids(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    data = tar_bytes(Member("f", data=b"x"))
    snap = store_one(store, "alice", data)
    snapshot_id = str(snap["id"])
    assert [m["id"] for m in store.list("alice")] == [snapshot_id]
    assert store.archive_path("alice", snapshot_id).read_bytes() == data
    assert store.list("bob") == []
    with pytest.raises(SnapshotNotFoundError):
        store.metadata("bob", snapshot_id)
    with pytest.raises(SnapshotNotFoundError):
        store.delete("bob", snapshot_id)
    alice_dir = store.owner_dir("alice").name
    for bad in ("../../" + alice_dir + "/" + snapshot_id, snapshot_id + "/", "..", "", "A" * 16):
        with pytest.raises(SnapshotNotFoundError):
            check_snapshot_id(bad)
        with pytest.raises(SnapshotNotFoundError):
            store.metadata("bob", bad)
    # Owner names never become paths: a name with '/' and '..' stays one directory.
    assert store.owner_dir("../alice").parent == tmp_path
    assert oct(store.owner_dir("alice").stat().st_mode & 0o777) == "0o700"
    assert oct(store.archive_path("alice", snapshot_id).stat().st_mode & 0o777) == "0o600"
    store.delete("alice", snapshot_id)
    assert store.list("alice") == []


def test_half_written_snapshots_are_never_listed(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    directory = store.owner_dir("alice")
    # A writer that died mid-archive, and one that died between the archive and its metadata.
    written: list[Path] = []

    def crash() -> None:
        with store.new_archive("alice") as (out, temporary):
            written.append(temporary)
            out.write(b"partial")
            raise RuntimeError("crash")

    with pytest.raises(RuntimeError):
        crash()
    assert not written[0].exists()
    (directory / ".tmp-left-by-a-kill.tar").write_bytes(b"partial")
    (directory / f"{new_snapshot_id()}.tar").write_bytes(b"no metadata yet")
    assert store.list("alice") == []
    os.utime(directory / ".tmp-left-by-a-kill.tar", (0, 0))
    assert store.remove_stale_temporaries("alice") == 1


@pytest.fixture
def tiny_disk() -> Iterator[Path]:
    """A real 1 MiB tmpfs, unmounted after the test (needs root, as the CI machine has)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = Path(tempfile.mkdtemp(prefix="jsbx-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mountpoint)], check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=True)
        mountpoint.rmdir()


def test_full_disk_removes_the_partial_file(tiny_disk: Path) -> None:
    store = SnapshotStore(tiny_disk)
    written: list[Path] = []

    def fill() -> None:
        with store.new_archive("alice") as (out, temporary):
            written.append(temporary)
            for _ in range(4):
                out.write(os.urandom(512 * 1024))
            out.flush()

    with pytest.raises(SnapshotStorageFullError) as full:
        fill()
    assert "full" in full.value.message
    assert full.value.code == "snapshot_storage_full"
    assert not written[0].exists()
    assert list(store.owner_dir("alice").iterdir()) == []
    assert store.list("alice") == []


def test_an_archive_being_written_is_synced_before_its_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The writeback thread syncs the file while it is written, and is gone before it closes.
    synced: list[int] = []
    real_fdatasync = os.fdatasync

    def fdatasync(fd: int) -> None:
        synced.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(storage.os, "fdatasync", fdatasync)
    store = SnapshotStore(tmp_path)
    with store.new_archive("alice") as (out, temporary):
        out.write(os.urandom(8 * 2**20))
        out.flush()
        assert _writeback_threads() == 1
        deadline = time.monotonic() + 5
        while out.fileno() not in synced and time.monotonic() < deadline:
            time.sleep(0.01)
        assert out.fileno() in synced
        store.commit("alice", temporary, {"id": new_snapshot_id(), "created": "now"})
    assert _writeback_threads() == 0


def _writeback_threads() -> int:
    return sum(t.name == "snapshot-writeback" for t in threading.enumerate())
